"""The hot path's shortcuts make exactly what the long way makes.

``Phase._next`` and ``Phase._copy`` build a phase slot by slot where its class allows
(``cls(...)`` and ``attrs.evolve`` otherwise); ``Observing.observe`` writes a result in
C where that writes what ``_json.dumps`` writes; the tool arguments are read by one
decoder made once; the runner finds out whether a transition's log event is wanted
without importing anything.
"""

from __future__ import annotations

import collections
import datetime
import enum
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest
import structlog
from deadline_support import cleans_up, raises, returns, waits, waits_then_raises, within_plain
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, PrivateAttr
from structlog.testing import LogCapture
from support import written_or_error

from statemachine import (
    Agent,
    BadArgumentsError,
    Done,
    Failed,
    Idle,
    MemoryCheckpointer,
    Message,
    ModelRequest,
    Observing,
    Phase,
    Phases,
    Planning,
    ReadCall,
    Responding,
    Retrying,
    Runner,
    ToolCalling,
    ToolRequest,
    Transcript,
    UnapprovedWriteError,
    _json,
    _runtime,
    _seal,
    _tools,
    _watch,
    read_tool,
    write_tool,
)
from statemachine._fast import _attrs, _messages
from statemachine._fast._pydantic import _trusted
from statemachine.testing import AutoDenyGate, ScriptedModel, hand_built, reply, tool_call

pytestmark = pytest.mark.anyio


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": 42}


@write_tool
async def store(args: KeyArgs) -> str:
    """Store a key."""
    return "stored"


def _fields(phase: Phase[Any]) -> dict[str, Any]:
    """Every field of ``phase`` and its class; for the seal, whether it is a fresh
    ticket bound to this very phase (each phase has a ticket of its own)."""
    values: dict[str, Any] = {"class": type(phase)}
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            ticket = phase._ticket
            values[field.name] = (ticket.holder() is phase, ticket.left_by)
            continue
        values[field.name] = getattr(phase, field.name)
    return values


def _planning(agent: Agent[Any] | None = None) -> Planning[Any]:
    agent = agent or Agent[None](name="fast", tools=[lookup, store])
    return agent.start(None, "hi").receive("hi")


def _long_way(leaving: Phase[Any], cls: type[Any], **changes: Any) -> Any:
    """What ``_next`` made before it had builders."""
    return cls(
        agent=leaving.agent,
        ctx=leaving.ctx,
        transcript=leaving.transcript,
        spent=leaving.spent,
        step=leaving.step + 1,
        loop=leaving.loop,
        ticket=_seal._Ticket(None, "hand"),
        **changes,
    )


# --- _next and _copy --------------------------------------------------------------------


def _every_library_phase(planning: Planning[Any]) -> list[tuple[type[Any], dict[str, Any]]]:
    call = planning.agent.tools.call("lookup", {"key": "k"})
    assert isinstance(call, ReadCall)
    return [
        (Idle, {"input": "again"}),
        (Planning, {}),
        (Planning, {"invalid_streak": 2}),
        (ToolCalling, {"call": call, "call_id": "call-1"}),
        (ToolCalling, {"call": call, "call_id": "call-1", "attempt": 3}),
        (Observing, {"call": call, "call_id": "call-1", "output": {"a": 1}}),
        (Retrying, {"call": call, "call_id": "call-1", "attempt": 1, "error": "timed out"}),
        (Responding, {"text": "Hi."}),
        (Failed, {"reason": "no", "from_phase": "Planning"}),
        (Done, {"answer": "Hi.", "answer_sha256": "ab"}),
    ]


def test_next_builds_every_library_phase_as_its_init_does() -> None:
    planning = _planning()
    planning._leave("test")  # the new phase is not left, whatever the old one is
    for cls, changes in _every_library_phase(planning):
        made = planning._next(cls, **changes)
        assert _fields(made) == _fields(_long_way(planning, cls, **changes))
        assert not made.left
        assert made.step == planning.step + 1
        # Built by a builder of its own, not by falling back to __init__.
        assert _attrs._BUILDERS[id(cls)][1] is not _attrs._by_init


def test_copy_is_attrs_evolve() -> None:
    planning, again = _planning(), _planning()
    call = planning.agent.tools.call("lookup", {"key": "k"})
    calling = planning._next(ToolCalling, call=call, call_id="call-1", attempt=2)
    calling._leave("advance")  # a copy carries on the advance that left it
    cases: list[tuple[Phase[Any], dict[str, Any]]] = [
        (planning, {}),
        (again, {"loop": again.loop._evolve(paused="x")}),
        (calling, {"spent": calling.spent.add(tool_calls=1)}),
    ]
    for phase, changes in cases:
        copied = phase._copy(**changes)
        evolved = attrs.evolve(phase, ticket=_seal._Ticket(None, "hand"), **changes)
        assert _fields(copied) == _fields(evolved)
        assert not copied.left
    assert _attrs._COPIERS[id(Planning)][1] is not _attrs._by_init


def test_next_and_copy_refuse_what_init_refuses_with_its_error() -> None:
    planning = _planning()
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'call'"):
        planning._next(ToolCalling, call_id="call-1")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        planning._next(Planning, bogus=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        planning._copy(bogus=1)


def test_next_still_runs_tool_callings_check_of_its_call() -> None:
    """ToolCalling's __attrs_post_init__ runs for a built phase too."""
    planning = _planning()
    write = planning.agent.tools.call("store", {"key": "k"})
    with pytest.raises(UnapprovedWriteError):
        planning._next(ToolCalling, call=write, call_id="call-1")


# User subclasses: each kind the builder must either build exactly or leave to __init__.


@attrs.frozen(kw_only=True)
class NotedPlanning(Planning[None]):
    """An extra field with a default and one with a factory; a post-init hook."""

    note: str = "none"
    seen: list[str] = attrs.field(factory=list)
    hooked: list[int] = attrs.field(factory=list, eq=False)

    def __attrs_post_init__(self) -> None:
        self.hooked.append(self.step)


def _shout(value: str) -> str:
    return value.upper()


def _short(_: Any, __: Any, value: str) -> None:
    if len(value) > 5:
        raise ValueError(f"too long: {value!r}")


@attrs.frozen(kw_only=True)
class CheckedPlanning(Planning[None]):
    """A converter and a validator: built by its own __init__."""

    label: str = attrs.field(default="ok", converter=_shout, validator=_short)


@attrs.frozen(kw_only=True)
class SelfishPlanning(Planning[None]):
    """A factory that reads the phase being built."""

    label: str = attrs.field(
        default=attrs.Factory(lambda self: f"step {self.step}", takes_self=True)
    )


class PlainPlanning(Planning[None]):
    """A subclass that only overrides a method (no attrs decorator, so it has a __dict__)."""

    def instructions(self) -> str:
        return "plain"


class SlottedExtra(Planning[None]):
    """A slot of its own that is not a field: __init__ may set it, so __init__ builds it."""

    __slots__ = ("extra",)


def test_a_user_subclass_with_extra_fields_and_a_post_init_transitions_as_init_makes_it() -> None:
    agent = Agent[None](name="fast", tools=[lookup], phases=Phases[None](planning=NotedPlanning))
    planning = agent.start(None, "hi").receive("hi")
    assert isinstance(planning, NotedPlanning)
    assert planning.hooked == [1]  # the post-init ran once, on the built phase
    again = planning._next(NotedPlanning, note="kept", seen=["a"])
    assert _fields(again) == _fields(_long_way(planning, NotedPlanning, note="kept", seen=["a"]))
    assert again.hooked == [2]
    fresh = again._next(NotedPlanning)
    assert (fresh.note, fresh.seen) == ("none", [])  # defaults, not carried by _next
    assert fresh.seen is not again.seen  # a new list from the factory
    copied = again._copy()
    # Every field carried (the same list), and the hook run again, as attrs.evolve does.
    assert (copied.note, copied.seen, copied.hooked) == ("kept", ["a"], [2, 2])
    assert copied.hooked is again.hooked
    assert _attrs._BUILDERS[id(NotedPlanning)][1] is not _attrs._by_init


async def test_a_user_subclass_with_extra_fields_runs_through_the_runner() -> None:
    agent = Agent[None](name="fast", tools=[lookup], phases=Phases[None](planning=NotedPlanning))
    model = ScriptedModel([tool_call("lookup", '{"key": "k"}'), reply("Done.")])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), keep_states=True)
    result = await runner.run(None, "hi")
    assert result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert all(type(s) is NotedPlanning for s in result.states if s.kind == "Planning")
    assert result.final.transcript[-2].content == '{"key":"k","value":42}'


def test_a_user_subclass_with_a_converter_and_a_validator_is_built_by_its_init() -> None:
    agent = Agent[None](name="fast", tools=[lookup], phases=Phases[None](planning=CheckedPlanning))
    planning = agent.start(None, "hi").receive("hi")
    assert isinstance(planning, CheckedPlanning)
    assert planning.label == "OK"  # the converter ran
    assert planning._next(CheckedPlanning, label="abc").label == "ABC"
    with pytest.raises(ValueError, match="too long: 'TOOLONG'"):
        planning._next(CheckedPlanning, label="toolong")
    assert planning._copy(label="x").label == "X"
    assert _attrs._BUILDERS[id(CheckedPlanning)][1] is _attrs._by_init
    assert _attrs._COPIERS[id(CheckedPlanning)][1] is _attrs._by_init


def test_a_takes_self_factory_and_a_slot_that_is_no_field_go_through_init() -> None:
    planning = _planning()
    selfish = planning._next(SelfishPlanning)
    assert selfish.label == "step 2"
    assert _attrs._BUILDERS[id(SelfishPlanning)][1] is _attrs._by_init
    extra = planning._next(SlottedExtra)
    assert _fields(extra) == _fields(_long_way(planning, SlottedExtra))
    assert _attrs._BUILDERS[id(SlottedExtra)][1] is _attrs._by_init


def test_a_generic_alias_is_built_by_calling_it() -> None:
    planning = _planning()
    made = planning._next(Planning[None], invalid_streak=1)
    assert type(made) is Planning
    assert _fields(made) == _fields(_long_way(planning, Planning, invalid_streak=1))
    assert _attrs._BUILDERS[id(Planning[None])][1] is _attrs._by_init


def test_a_plain_subclass_is_built_with_the_fields_its_parent_declares() -> None:
    planning = _planning()
    plain = planning._next(PlainPlanning, invalid_streak=1)
    assert type(plain) is PlainPlanning
    assert plain.instructions() == "plain"
    assert _fields(plain) == _fields(_long_way(planning, PlainPlanning, invalid_streak=1))
    assert vars(plain) == {}  # nothing else was set on it
    assert _attrs._BUILDERS[id(PlainPlanning)][1] is not _attrs._by_init


# --- the observed result as JSON ----------------------------------------------------------


class Color(int, enum.Enum):
    RED = 1


class Level(enum.IntEnum):
    HIGH = 3


class Odd(float):
    def __repr__(self) -> str:
        return "2.5"


class Listing(list[int]):
    def __iter__(self) -> Any:
        return iter([9])


class Shape(BaseModel):
    corners: int
    price: Decimal


RESULTS: list[Any] = [
    {"key": "k", "value": 42, "unit": "widgets"},
    {"a": [1, 2.5, 1e16, 1e-7, 1e300, Decimal("1.50"), Decimal("-0.000"), None, True, (1, 2)]},
    {"nested": {"deep": [{"x": '\x00 é \u2028 \\ "'}]}},
    "text",
    10**500,
    [],
    {},
    {1: "a"},
    {True: "a"},
    {None: "a"},
    {"a": Color.RED},
    {"a": Level.HIGH},
    {"a": Odd(1.0)},
    {"a": Listing([1, 2])},
    collections.OrderedDict(a=1),
    {"d": datetime.date(2024, 1, 2)},
    {"s": {1, 2}},
    {"m": Shape(corners=3, price=Decimal("9.90"))},
    [float("nan")],
    {"too": Decimal("Infinity")},
    b"bytes",
]


@pytest.mark.parametrize("value", RESULTS, ids=range(len(RESULTS)))
def test_a_result_is_written_as_json_dumps_writes_it(value: Any) -> None:
    def written(write: Any) -> tuple[str, str]:
        try:
            return "text", write(value)
        except Exception as error:  # the same error, whichever way it is written
            return type(error).__name__, str(error)

    assert written(_messages._result_text) == written(_json.dumps)


def test_observe_writes_the_result_with_exact_numbers() -> None:
    planning = _planning()
    call = planning.agent.tools.call("lookup", {"key": "k"})
    output = {"price": Decimal("19.90"), "ratio": 0.1, "n": 10**20}
    observing = planning._next(Observing, call=call, call_id="call-1", output=output)
    told = observing.observe().transcript[-1]
    assert told.content == '{"price":19.90,"ratio":0.1,"n":100000000000000000000}'


# --- the tool arguments -----------------------------------------------------------------

ARGUMENTS: list[str | bytes] = [
    '{"key": "k", "n": 1.50, "m": 2e3, "l": [1, null, true]}',
    '{"key": "k"}',
    b'{"key": "k"}',
    '\ufeff{"key": "k"}',
    '{"key": NaN}',
    '{"key": Infinity}',
    '{"key": "k"',
    "[1, 2]",
    "1" * 401,
    '{"n": 1e401}',
    '{"key": "\\ud800"}',
    "",
]


@pytest.mark.parametrize("text", ARGUMENTS, ids=range(len(ARGUMENTS)))
def test_arguments_are_read_as_json_loads_reads_them(text: str | bytes) -> None:
    try:
        expected: Any = _json.loads(text, bounded=True)
    except ValueError as error:
        expected = f"arguments are not valid JSON ({error})"
    else:
        if not isinstance(expected, dict):
            expected = "arguments must be a JSON object"
    try:
        got: Any = _tools._parse_arguments("t", text)
    except BadArgumentsError as error:
        (got,) = error.problems
    assert got == expected
    if isinstance(got, dict):
        assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


# --- whether a transition's log event is wanted -------------------------------------------


def _transition_events(logs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(e["from"], e["to"]) for e in logs if e["event"] == "transition"]


async def test_a_log_capture_configured_by_hand_gets_every_transition_event() -> None:
    capture = LogCapture()
    before = structlog.get_config()["processors"]
    structlog.configure(processors=[capture])
    try:
        model = ScriptedModel([reply("Hi.")])
        agent = Agent[None](name="fast", tools=[lookup])
        await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "hi")
    finally:
        structlog.configure(processors=before)
    assert _transition_events(capture.entries) == [
        ("Idle", "Planning"),
        ("Planning", "Responding"),
        ("Responding", "Done"),
    ]


def test_without_a_listener_no_transition_event_is_built() -> None:
    """Nothing logs at INFO and nothing captures: the event's keys are never built."""
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from statemachine import Agent, Runner, _runner
        from statemachine.testing import AutoDenyGate, ScriptedModel, reply

        built = []
        keys = _runner._transition_keys
        _runner._transition_keys = lambda *a: built.append(1) or keys(*a)
        runner = Runner(
            Agent[None](name="a"), model=ScriptedModel([reply("Hi.")]), gate=AutoDenyGate()
        )
        result = anyio.run(runner.run, None, "hi")
        assert result.ok
        assert "structlog" in sys.modules, "the runner's logger imports structlog"
        assert built == [], built
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr


# --- models made without validation -------------------------------------------------------


def _slots(model: BaseModel) -> tuple[Any, ...]:
    return (
        type(model),
        model.__dict__,
        model.__pydantic_fields_set__,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


class _Memory(BaseModel, frozen=True, extra="forbid"):
    """A frozen model with private attributes (as ``LoopState`` was before round 18)."""

    evidence: tuple[str, ...] = ()
    tool_iterations: int = 0
    finalize: str = ""
    _index: Any = PrivateAttr(default=None)
    _grams: Any = PrivateAttr(default=None)


def test_trusted_makes_what_model_construct_makes() -> None:
    values: dict[str, Any] = {"name": "lookup", "arguments": "{}", "id": "c"}
    made = _trusted(ToolRequest, dict(values), {"name", "id"})
    assert _slots(made) == _slots(ToolRequest.model_construct({"name", "id"}, **values))
    assert made == ToolRequest(**values)
    assert made.model_dump() == values
    private = {"_index": None, "_grams": None}
    loop = _trusted(_Memory, dict(_Memory().__dict__), set(), private)
    assert loop.__pydantic_private__ is private
    assert _slots(loop)[:4] == _slots(_Memory.model_construct(set(), **_Memory().__dict__))[:4]


# --- the transcript, one message longer ---------------------------------------------------


class Log(tuple[Message, ...]):
    """A tuple subclass that iterates its items in reverse."""

    def __iter__(self) -> Any:
        return iter(tuple(tuple.__iter__(self))[::-1])


def test_a_transcript_grows_as_unpacking_it_would_make_it() -> None:
    first = Message(role="user", content="one")
    agent = Agent[None](name="fast", tools=[lookup], instructions="Be brief.")
    hello = Message(role="user", content="hi")
    seeds: list[Any] = [(first,), [first], Log((first, hello)), Transcript([first])]
    for seed in seeds:
        idle = hand_built(Idle[None], agent=agent, ctx=None, transcript=seed)
        planning = idle.receive("hi")
        assert type(planning.transcript) is Transcript
        assert planning.transcript == (*seed, hello)
        system = Message(role="system", content="Be brief.")
        assert planning._next(Planning).messages() == (system, *planning.transcript)
        shown = hand_built(Planning[None], agent=agent, ctx=None, transcript=seed).messages()
        assert type(shown) is Transcript
        assert shown == (system, *seed)
    planning = agent.start(None, "hi").receive("hi")
    call = agent.tools.call("lookup", {"key": "k"})
    assert isinstance(call, ReadCall)
    calling = planning.call_tool(call)
    assert calling.transcript[:-1] == planning.transcript
    assert calling.transcript[-1].tool_calls[0].arguments == '{"key":"k"}'
    observing = calling._next(Observing, call=call, call_id=calling.call_id, output={"v": 1})
    told = observing.observe().transcript
    assert told[:-1] == calling.transcript
    assert told[-1] == Message(role="tool", content='{"v":1}', tool_call_id="call-1", name="lookup")


def said(n: int) -> Message:
    return Message(role="user", content=f"message {n}")


def test_a_transcript_reads_as_the_tuple_of_its_messages() -> None:
    """Every way of reading a transcript gives what the tuple of its messages gives,
    for transcripts grown by appending, branched, and prefixed."""
    plain: tuple[Message, ...] = ()
    grown = Transcript()
    kept: list[tuple[Transcript, tuple[Message, ...]]] = []
    for n in range(120):  # several full chunks
        new = (said(n),) if n % 3 else (said(n), said(n + 100))
        plain, grown = plain + new, grown.appended(*new)
        kept.append((grown, plain))
        if n == 50:  # more than a chunk at once
            many = tuple(said(1000 + i) for i in range(70))
            plain, grown = plain + many, grown.appended(*many)
            kept.append((grown, plain))
        if n % 7 == 0:  # a branch from an older transcript leaves the others as they were
            old, old_plain = kept[n // 2]
            branched = said(-n)
            kept.append((old.appended(branched), (*old_plain, branched)))
        if n % 5 == 0:
            head = (Message(role="system", content="rules"),)
            kept.append((grown.prefixed(*head), head + plain))
    for transcript, expected in kept:
        assert len(transcript) == len(expected)
        assert tuple(transcript) == expected
        assert transcript == expected
        assert expected == transcript
        assert transcript == Transcript(expected)
        assert hash(transcript) == hash(expected)
        assert list(reversed(transcript)) == list(reversed(expected))
        for index in range(-len(expected), len(expected)):
            assert transcript[index] is expected[index]
        for cut in (
            slice(None),
            slice(1, None),
            slice(-3, None),
            slice(None, None, -1),
            slice(-2, 1, -2),
            slice(3, 100),
            slice(100, None),
            slice(2, -2),
            slice(None, None, 2),
            slice(31, 65),
            slice(-40, -1),
        ):
            assert transcript[cut] == expected[cut]
        with pytest.raises(IndexError):
            transcript[len(expected)]
    assert Transcript() == ()
    assert not Transcript()


def test_appending_shares_the_full_chunks_and_copies_only_the_tail() -> None:
    from statemachine._model import _CHUNK, EMPTY_TRANSCRIPT

    grown = Transcript()
    for n in range(_CHUNK + 1):
        grown = grown.appended(said(n))
    assert len(grown._chunks) == 1
    assert len(grown._tail) == 1
    more = grown.appended(said(100))
    branch = grown.appended(said(-100))  # a branch: the older transcript is unchanged
    assert more._chunks is grown._chunks is branch._chunks  # shared, not copied
    assert tuple(more)[-2:] == (said(_CHUNK), said(100))
    assert tuple(branch)[-2:] == (said(_CHUNK), said(-100))
    assert tuple(grown) == tuple(said(n) for n in range(_CHUNK + 1))
    # Every part is a tuple: nothing a transcript holds can be changed through it.
    for transcript in (grown, more, branch, more.prefixed(said(-1))):
        assert type(transcript._head) is tuple
        assert type(transcript._tail) is tuple
        assert all(type(chunk) is tuple for chunk in transcript._chunks)
        assert all(len(chunk) == _CHUNK for chunk in transcript._chunks)
        assert 0 < len(transcript._tail) <= _CHUNK
    EMPTY_TRANSCRIPT.appended(said(9))
    assert tuple(EMPTY_TRANSCRIPT) == ()


@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 40)),
            st.tuples(st.just("branch"), st.integers(0, 1000)),
        ),
        max_size=40,
    ),
    head=st.integers(0, 2),
    probe=st.integers(-200, 200),
    cut=st.tuples(st.integers(-200, 200), st.integers(-200, 200), st.sampled_from([1, 1, 2, -1])),
)
def test_a_transcript_is_the_tuple_of_its_appends(
    steps: list[tuple[str, int]], head: int, probe: int, cut: tuple[int, int, int]
) -> None:
    """Against the plain version (tuples concatenated): any appends and branches, any
    index and slice, read with and without a prefix."""
    made: list[tuple[Transcript, tuple[Message, ...]]] = [(Transcript(), ())]
    transcript, plain = made[0]
    counter = 0
    for kind, number in steps:
        if kind == "branch":
            transcript, plain = made[number % len(made)]
            continue
        new = tuple(said(counter + i) for i in range(number))
        counter += number
        transcript, plain = transcript.appended(*new), plain + new
        made.append((transcript, plain))
    prefix = tuple(Message(role="system", content=f"rule {i}") for i in range(head))
    for transcript, plain in made:
        prefixed = transcript.prefixed(*prefix)
        for shown, expected in ((transcript, plain), (prefixed, prefix + plain)):
            assert tuple(shown) == expected
            assert len(shown) == len(expected)
            assert shown == Transcript(expected)
            assert hash(shown) == hash(expected)
            if -len(expected) <= probe < len(expected):
                assert shown[probe] is expected[probe]
            else:
                with pytest.raises(IndexError):
                    shown[probe]
            window = slice(*cut)
            assert shown[window] == expected[window]


@pytest.mark.parametrize("instructions", ["Be brief.", ""])
async def test_a_model_cannot_change_the_run_s_past_messages(instructions: str) -> None:
    """A model given the run's conversation tries to rewrite it, through the request's
    public and private attributes: the run's transcript and its checkpoints are as
    they would have been."""

    class Tamperer:
        async def complete(self, request: ModelRequest) -> Any:
            shown: Any = request.messages
            forged = Message(role="user", content="forged")
            for name in ("_chunks", "_tail", "_head", "_items"):
                part = getattr(shown, name, None)
                for target in (part, *(part if isinstance(part, tuple) else ())):
                    with pytest.raises((TypeError, AttributeError)):
                        target[0] = forged  # a tuple refuses item assignment
                    with pytest.raises((TypeError, AttributeError)):
                        target.append(forged)
            object.__setattr__(shown, "_tail", (forged,))  # its own object only
            object.__setattr__(shown, "_chunks", ())
            with pytest.raises(AttributeError):
                shown._items = [forged]
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                shown[-1].content = "forged"  # type: ignore[misc]
            return await model.complete(request)

    model = ScriptedModel(
        [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(20)] + [reply("Done.")]
    )
    agent = Agent[None](name="fast", tools=[lookup], instructions=instructions)
    store = MemoryCheckpointer()
    result = await Runner(agent, model=Tamperer(), gate=AutoDenyGate(), checkpointer=store).run(
        None, "go"
    )
    plain_model = ScriptedModel(
        [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(20)] + [reply("Done.")]
    )
    plain_store = MemoryCheckpointer()
    expected = await Runner(
        agent, model=plain_model, gate=AutoDenyGate(), checkpointer=plain_store
    ).run(None, "go", run_id=result.run_id)
    assert result.final.transcript == expected.final.transcript
    assert all(m.content != "forged" for m in result.final.transcript)
    _, stored = await store.load(result.run_id)
    _, plain_stored = await plain_store.load(result.run_id)
    assert stored["fields"]["transcript"] == plain_stored["fields"]["transcript"]
    assert type(stored["fields"]["transcript"][0]) is str  # the past spans a full chunk


def test_transcripts_appended_from_many_threads_hold_their_own_messages() -> None:
    import threading

    base = Transcript([said(0)])
    results: dict[int, Transcript] = {}

    def grow(n: int) -> None:
        transcript = base
        for i in range(200):
            transcript = transcript.appended(said(n * 1000 + i))
        results[n] = transcript

    threads = [threading.Thread(target=grow, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, transcript in results.items():
        assert tuple(transcript) == (said(0), *(said(n * 1000 + i) for i in range(200)))


def test_a_model_request_keeps_a_transcript_and_validates_a_tuple_into_one() -> None:
    grown = Transcript([said(1)]).appended(said(2))
    request = ModelRequest(messages=grown)
    assert request.messages is grown
    from_tuple = ModelRequest(messages=(said(1), said(2)))
    assert type(from_tuple.messages) is Transcript
    assert from_tuple == request
    assert from_tuple.model_dump(mode="json") == request.model_dump(mode="json")
    assert request.model_dump(mode="json")["messages"] == [
        said(1).model_dump(mode="json"),
        said(2).model_dump(mode="json"),
    ]
    assert ModelRequest.model_validate_json(request.model_dump_json()) == request


# --- the canonical arguments that approvals and idempotency keys hash ---------------------


class Anything(BaseModel):
    data: Any
    more: Any = None


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**399, max_value=10**401),
    st.text(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(data=_VALUES, more=_VALUES)
def test_canonical_arguments_are_what_json_canonical_writes(data: Any, more: Any) -> None:
    args = Anything(data=data, more=more)
    assert written_or_error(_tools._canonical, args) == written_or_error(_json.canonical, args)


CANONICAL_CASES: list[Any] = [
    {"b": 1, "a": [True, None, "x"], "é": {"z": (1, 2), "\x00": ""}},
    {"n": 10**400 - 1},
    {"n": 10**400},
    {"n": -(10**400)},
    {"f": 1.0},
    {"d": Decimal("5.00")},
    {1: "int key"},
    {"k": Color.RED},
    {"k": Level.HIGH},
    {"k": datetime.date(2024, 1, 2)},
    {"s": "\ud800"},
]


@pytest.mark.parametrize("data", CANONICAL_CASES, ids=range(len(CANONICAL_CASES)))
def test_canonical_arguments_of_the_edge_cases(data: Any) -> None:
    args = Anything(data=data)
    assert written_or_error(_tools._canonical, args) == written_or_error(_json.canonical, args)


def test_a_calls_hash_is_the_canonical_hash_of_its_arguments() -> None:
    agent = Agent[None](name="fast", tools=[lookup])
    call = agent.tools.call("lookup", {"key": "k\u00e9"})
    assert call.args_hash == _json.canonical_hash(KeyArgs(key="k\u00e9"))
    assert call.describe() == 'lookup({"key":"k\u00e9"})'


class Shouted(str):
    """Instructions of a str subclass: validated, as before."""


class ShoutingPlanning(Planning[None]):
    def instructions(self) -> str:
        return Shouted("BE BRIEF.")


class NumberedPlanning(Planning[None]):
    def instructions(self) -> str:
        return 5  # type: ignore[return-value]  # a mistake pydantic reports


def test_the_system_message_is_the_one_pydantic_would_make() -> None:
    agent = Agent[None](name="fast", tools=[lookup], instructions="Be brief.")
    cases = [
        (agent.start(None, "hi").receive("hi"), "Be brief."),
        (_planning()._next(ShoutingPlanning), Shouted("BE BRIEF.")),
    ]
    for planning, text in cases:
        (made, *_) = planning.messages()
        validated = Message(role="system", content=text)
        assert made == validated
        assert type(made.content) is type(validated.content)
        assert made.model_dump_json() == validated.model_dump_json()
        assert attrs.astuple(made, recurse=False) == attrs.astuple(validated, recurse=False)
    with pytest.raises(TypeError, match="a message's content is text"):
        _planning()._next(NumberedPlanning).messages()


def test_a_message_made_on_the_hot_path_is_the_one_its_class_makes() -> None:
    """``_message`` sets the slots ``Message.__init__`` sets, to the same values, for
    every role; the class's own checks refuse what the hot path is never given."""
    request = ToolRequest(name="lookup", arguments='{"key":"k"}', id="call-1")
    cases: list[tuple[Any, ...]] = [
        ("system", "Be brief.", (), "", ""),
        ("user", "hi", (), "", ""),
        ("assistant", "", (request,), "", ""),
        ("assistant", "Done.", (), "", ""),
        ("tool", '{"v":1}', (), "call-1", "lookup"),
    ]
    for role, content, calls, call_id, name in cases:
        made = _messages._message(role, content, calls, call_id, name)
        built = Message(
            role=role, content=content, tool_calls=calls, tool_call_id=call_id, name=name
        )
        assert type(made) is Message
        assert attrs.astuple(made, recurse=False) == attrs.astuple(built, recurse=False)
        assert made == built
        assert hash(made) == hash(built)
        assert repr(made) == repr(built)
        assert made.model_dump_json() == built.model_dump_json()
        assert Message.model_validate(made.model_dump(mode="json")) == made
    with pytest.raises(ValueError, match="role is one of"):
        Message(role="robot")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="content is text"):
        Message(role="user", content=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="has no field"):
        Message.model_validate({"role": "user", "text": "hi"})
    listed = Message(role="assistant", tool_calls=[request.model_dump()])  # type: ignore[list-item]
    assert listed.tool_calls == (request,)


def test_a_request_made_on_the_hot_path_is_the_one_model_copy_makes() -> None:
    """``_request`` makes the ToolRequest that validating (or ``model_copy`` with a new
    id) makes, and the fields set it shares is never changed by a copy of one."""
    given = ToolRequest(name="lookup", arguments='{"key":"k"}')
    made = _messages._request("lookup", '{"key":"k"}', "call-7")
    copied = given.model_copy(update={"id": "call-7"})
    built = ToolRequest(name="lookup", arguments='{"key":"k"}', id="call-7")
    for other in (copied, built):
        assert made == other
        assert made.model_dump() == other.model_dump()
        assert made.model_dump_json() == other.model_dump_json()
    assert made.model_fields_set == built.model_fields_set
    shared = made.model_fields_set
    again = made.model_copy(update={"id": "call-8"})
    assert again.id == "call-8"
    assert shared == {"name", "arguments", "id"}
    assert _messages._request("a", "{}", "c").model_fields_set is shared


def _message(kind: str, number: int) -> Message:
    """A message of one of the kinds a transcript's tail can hold."""
    request = ToolRequest(id=f"c{number}", name="lookup", arguments="{}")
    if kind == "asking":
        return Message(role="assistant", content="", tool_calls=(request,))
    if kind == "tool":
        return Message(role="tool", content="x", tool_call_id=f"c{number}")
    return Message(role=kind, content="words")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


_KINDS = st.sampled_from(["asking", "tool", "assistant", "user", "system"])


@settings(max_examples=300)
@given(kinds=st.lists(_KINDS, max_size=30), head=st.lists(_KINDS, max_size=3))
def test_the_last_reply_is_read_from_the_tail_as_one_index_at_a_time(
    kinds: list[str], head: list[str]
) -> None:
    """The runner's check reads the model's last reply and its answers from one slice of
    the transcript's tail: what reading it one index at a time from the end finds,
    however many answers follow it (more than the slice holds too), with a prefix."""
    transcript = Transcript([_message(kind, number) for number, kind in enumerate(kinds)])
    if head:
        transcript = transcript.prefixed(*(_message(kind, 100 + n) for n, kind in enumerate(head)))
    for given_as in (transcript, tuple(transcript)):
        fast, plain = _watch._last_reply(given_as), _watch._last_reply_plain(given_as)
        assert fast[0] is plain[0]
        assert tuple(fast[1]) == tuple(plain[1])
        assert all(a is b for a, b in zip(fast[1], plain[1], strict=True))


def test_the_last_reply_past_the_slice_is_found_one_index_at_a_time() -> None:
    answers = [_message("tool", number) for number in range(_watch._TAIL + 3)]
    transcript = Transcript([_message("asking", 0), *answers])
    asking, answered = _watch._last_reply(transcript)
    assert asking is transcript[0]
    assert tuple(answered) == tuple(answers)


async def _waits_in_a_scope_of_its_own() -> str:
    with anyio.CancelScope():
        await anyio.lowlevel.checkpoint()
    async with anyio.create_task_group() as group:
        group.start_soon(anyio.sleep, 0)
    return "scoped"


_WITHIN_CASES: list[tuple[str, Callable[[], Any], float | None]] = [
    (
        "enters a cancel scope and a task group, and waits in them",
        _waits_in_a_scope_of_its_own,
        5.0,
    ),
    ("returns", returns, 5.0),
    ("returns, no deadline", returns, None),
    ("returns, deadline passed", returns, 0.0),
    ("returns, deadline negative", returns, -1.0),
    ("raises", raises, 5.0),
    ("waits within", lambda: waits(5, 0), 5.0),
    ("waits a while within", lambda: waits(3, 0.001), 5.0),
    ("waits past", lambda: waits(3, 0.05), 0.02),
    ("waits, deadline passed", lambda: waits(1, 0), 0.0),
    ("waits, then raises", waits_then_raises, 5.0),
    ("cleans up past the deadline", cleans_up, 0.02),
]


@pytest.mark.parametrize(
    ("case", "make", "seconds"), _WITHIN_CASES, ids=[c[0] for c in _WITHIN_CASES]
)
async def test_a_call_under_a_deadline_ends_as_it_did_within_a_cancel_scope(
    case: str, make: Callable[[], Any], seconds: float | None
) -> None:
    """``_within`` under a deadline: every call ends (its value, its error, the
    deadline's TimeoutError) as it does wholly within a cancel scope. A shortcut that
    took the call's first step outside the scope (the scope costs about 9 us) broke a
    call that enters a scope or task group of its own and waits in it: the scopes no
    longer nest."""

    async def ended(within: Any) -> tuple[str, str]:
        try:
            return "value", await within(make(), seconds)
        except Exception as error:
            return type(error).__name__, str(error)

    assert await ended(_runtime._within) == await ended(within_plain), case


async def test_a_call_under_a_deadline_is_cancelled_from_outside_as_before() -> None:
    """A scope around the run (``Runner.stop``) cancels a call that waits, inside
    ``_within`` as it did, and the call's own cleanup runs."""
    cleaned: list[str] = []

    async def slow() -> str:
        try:
            await anyio.sleep(10)
        finally:
            cleaned.append("cleaned")
        return "never"

    for within in (_runtime._within, within_plain):
        with anyio.CancelScope() as outer:
            async with anyio.create_task_group() as group:

                async def cancel_soon() -> None:
                    await anyio.sleep(0.01)
                    outer.cancel()

                group.start_soon(cancel_soon)
                await within(slow(), 5.0)
        assert outer.cancelled_caught
    assert cleaned == ["cleaned", "cleaned"]
