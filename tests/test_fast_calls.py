"""The tool call's shortcuts, each pinned against the plain version it replaces.

- ``_fast._deadline._within``: a call under its deadline, against the whole call within
  ``anyio.CancelScope(deadline=...)`` (values, errors, the deadline's ``TimeoutError``,
  a call that opens scopes and task groups of its own, cancellation from outside, the
  deadline a call reads, calls running side by side).
- ``_calling._counted``: an answered call's spend in one step, against the two adds.
- ``_batch._action``: the governor's record of a call made once for the governor's check
  and the transition, against ``Planning._action``.
- ``_canonical._plain_json`` (a dict's items checked in its own loop) and a tool's
  ``call`` made by setting the call's slots, against the recursive check and the
  call's attrs ``__init__``.
- ``_planning._plan``: a reply's usage and its calls queued in one copy of the phase,
  against ``_ask`` then ``_route``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import weakref
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from deadline_support import cleans_up, raises, returns, waits, waits_then_raises, within_plain
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    InvalidCall,
    LoopGovernor,
    ModelReply,
    Observing,
    Planning,
    Runtime,
    SetupError,
    ToolCalling,
    ToolRegistry,
    Usage,
    _batch,
    _json,
    _phases,
    _planning,
    _tools,
    read_tool,
    write_tool,
)
from statemachine._batch import _action, _queued, _take
from statemachine._budget import Spend
from statemachine._calling import _counted
from statemachine._errors import BadArgumentsError
from statemachine._fast import _canonical, _deadline, _messages
from statemachine._fast._classes import _per_class
from statemachine._graph import _successors_of
from statemachine._model import Message, ToolRequest, Transcript
from statemachine._tools import ReadCall, WriteCall
from statemachine.testing import AutoDenyGate, ScriptedModel, hand_built, reply

pytestmark = pytest.mark.anyio


async def _swallows() -> str:
    try:
        await anyio.sleep(10)
    except anyio.get_cancelled_exc_class():
        return "swallowed"  # a tool that ignores the cancellation
    return "never"


async def _scopes_of_its_own() -> str:
    with anyio.CancelScope():
        await anyio.lowlevel.checkpoint()
    async with anyio.create_task_group() as group:
        group.start_soon(anyio.sleep, 0)
    return "scoped"


async def _own_scope_past_the_deadline() -> str:
    with anyio.CancelScope():
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 10)
    return "never"


async def _own_shorter_deadline() -> str:
    with anyio.move_on_after(0.01):
        await anyio.sleep(10)
    return "moved on"


async def _reads_its_deadline() -> str:
    left = anyio.current_effective_deadline() - anyio.current_time()
    await anyio.lowlevel.checkpoint()
    return "no deadline" if math.isinf(left) else f"{round(left)}s"


_CASES: list[tuple[str, Callable[[], Any], float | None]] = [
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
    ("swallows the cancellation", _swallows, 0.02),
    ("enters a scope and a task group and waits in them", _scopes_of_its_own, 5.0),
    ("waits in a task group of its own past the deadline", _own_scope_past_the_deadline, 0.02),
    ("a shorter deadline of its own", _own_shorter_deadline, 5.0),
    ("reads its deadline", _reads_its_deadline, 30.0),
    ("reads its deadline, none", _reads_its_deadline, None),
]


@pytest.mark.parametrize(("case", "make", "seconds"), _CASES, ids=[c[0] for c in _CASES])
async def test_a_call_under_its_deadline_ends_as_within_anyios_scope(
    case: str, make: Callable[[], Any], seconds: float | None
) -> None:
    """Every call ends (its value, its error, the deadline's ``TimeoutError``) as it does
    wholly within ``anyio.CancelScope(deadline=...)``; the scopes a call opens nest."""

    async def ended(within: Any) -> tuple[str, str]:
        try:
            return "value", await within(make(), seconds)
        except Exception as error:
            return type(error).__name__, str(error)

    assert await ended(_deadline._within) == await ended(within_plain), case


async def _times_out_itself() -> str:
    await anyio.lowlevel.checkpoint()
    raise TimeoutError("its own limit")


_EXPIRED = object()


async def _until_plain(call: Any, seconds: float, expired: object) -> Any:
    """The plain version of ``_until`` (the model call's ``_answered`` before it)."""
    with anyio.CancelScope(deadline=anyio.current_time() + seconds):
        return await call
    return expired


@pytest.mark.parametrize(
    ("case", "make", "seconds"),
    [*_CASES, ("raises TimeoutError itself", _times_out_itself, 5.0)],
    ids=[*(c[0] for c in _CASES), "raises TimeoutError itself"],
)
async def test_a_call_until_its_deadline_ends_as_within_anyios_scope(
    case: str, make: Callable[[], Any], seconds: float | None
) -> None:
    """``_until`` (the model call's): the call's value or error, or the value given for
    the deadline, as the plain scope gives them; a ``TimeoutError`` the call raises
    itself is its own error, not the deadline."""
    if seconds is None:
        return

    async def ended(until: Any) -> tuple[str, str]:
        try:
            result = await until(make(), seconds, _EXPIRED)
        except Exception as error:
            return type(error).__name__, str(error)
        return ("expired", "") if result is _EXPIRED else ("value", result)

    assert await ended(_deadline._until) == await ended(_until_plain), case


async def test_a_call_is_cancelled_from_outside_as_within_anyios_scope() -> None:
    """A scope around the run cancels a call that waits, and the call's cleanup runs."""
    cleaned: list[str] = []

    async def slow() -> str:
        try:
            await anyio.sleep(10)
        finally:
            cleaned.append("cleaned")
        return "never"

    for within in (_deadline._within, within_plain):
        with anyio.CancelScope() as outer:
            async with anyio.create_task_group() as group:

                async def cancel_soon(scope: anyio.CancelScope = outer) -> None:
                    await anyio.sleep(0.01)
                    scope.cancel()

                group.start_soon(cancel_soon)
                await within(slow(), 5.0)
        assert outer.cancelled_caught
    assert cleaned == ["cleaned", "cleaned"]


async def test_calls_side_by_side_each_end_at_their_own_deadline() -> None:
    """One timer serves every call on the loop: a later deadline still fires after an
    earlier call left (its timer was for that call), and calls running together are each
    cancelled at their own deadline, in order."""
    ended: list[str] = []

    async def call(name: str, wait: float, seconds: float) -> None:
        try:
            ended.append(f"{name} {await _deadline._within(waits(1, wait), seconds)}")
        except TimeoutError:
            ended.append(f"{name} timed out")

    await call("first", 0, 5.0)  # leaves a timer armed for 5 s from now
    await call("second", 0.2, 0.02)  # an earlier deadline re-arms it
    async with anyio.create_task_group() as group:
        group.start_soon(call, "late", 0.3, 0.1)
        group.start_soon(call, "early", 0.3, 0.03)
        group.start_soon(call, "in time", 0.01, 5.0)
    assert ended == [
        "first waited 1",
        "second timed out",
        "in time waited 1",
        "early timed out",
        "late timed out",
    ]
    deadlines = _deadline._LOOPS.get(_running_loop())
    assert deadlines is not None
    assert not deadlines._scopes


def _running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


_amounts = st.decimals(
    allow_nan=False, allow_infinity=False, min_value=-(10**6), max_value=10**6, places=6
)
_exponents = st.integers(min_value=-6, max_value=4)


@given(spent=_amounts, price=_amounts, spent_exp=_exponents, price_exp=_exponents)
def test_an_answered_calls_spend_is_the_two_adds(
    spent: Decimal, price: Decimal, spent_exp: int, price_exp: int
) -> None:
    """``_counted`` is ``add(tool_calls=1)`` then ``add(cost=price)``: the same Spend, the
    cost spelt the same (an amount with a positive exponent too: ``1E+2``)."""
    cost = Decimal(spent).scaleb(spent_exp).copy_abs()
    priced = Decimal(price).scaleb(price_exp).copy_abs()
    before = Spend(tokens=3, cost=cost, tool_calls=2, model_calls=1)
    plain = before.add(tool_calls=1).add(cost=priced)
    fast = _counted(before, priced)
    assert fast == plain
    assert str(fast.cost) == str(plain.cost)
    assert fast.model_dump_json() == plain.model_dump_json()


class _Args(BaseModel):
    key: str


@read_tool
async def _lookup(args: _Args) -> str:
    """Look a key up."""
    return args.key


def test_a_calls_record_is_made_once_and_is_the_plain_one() -> None:
    """``_action`` gives ``Planning._action``'s record; asked again for the same phase, call
    and arguments, the same record; for other arguments or another phase, a new one."""
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget())
    planning = agent.start(None, "go").receive("go")
    call = agent.tools.call("_lookup", {"key": "a"})
    first = _action(planning, call, '{"key": "a"}')
    assert first == planning._action(call, '{"key": "a"}')
    assert _action(planning, call, '{"key": "a"}') is first
    third = _action(planning, call, '{"key": "a"}')  # taken once: made again, the same
    assert third == first
    assert third is not first
    spaced = _action(planning, call, '{"key":  "a"}')
    assert spaced == planning._action(call, '{"key":  "a"}')
    assert spaced.exact != first.exact
    other = agent.start(None, "go").receive("go")
    again = _action(other, call, '{"key": "a"}')
    assert again == first
    assert again is not first


def test_a_queued_call_records_the_action_the_governor_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's call taken from the queue records the record ``before_action`` saw."""
    seen: list[object] = []
    checked = LoopGovernor.before_action

    def before_action(self: LoopGovernor, loop: Any, action: Any, **kwargs: Any) -> Any:
        seen.append(action)
        return checked(self, loop, action, **kwargs)

    monkeypatch.setattr(LoopGovernor, "before_action", before_action)
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget())
    planning = agent.start(None, "go").receive("go")
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    request = ToolRequest(name="_lookup", arguments='{"key": "b"}', id="c1")
    calling = _take(_queued(planning, (request,)), rt)
    assert calling.loop.actions[-1] is seen[0]
    plain = planning._action(agent.tools.call("_lookup", {"key": "b"}), '{"key": "b"}')
    assert seen[0] == plain.model_copy(update={"call_id": "c1"})


def _writes_it_plain(value: Any) -> bool:
    """``_canonical._plain_json`` as it was: one recursive check for every value."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return -_canonical._INT_BOUND < value < _canonical._INT_BOUND
    if kind is dict:
        return all(type(key) is str and _writes_it_plain(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_writes_it_plain(item) for item in value)
    return False


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=5),
    st.integers(),
    st.integers(min_value=-(10**401), max_value=10**401),
    st.just(10**400),
    st.just(-(10**400)),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=3),
    ),
    max_leaves=8,
)


@given(value=_values)
def test_the_sorted_c_check_says_what_it_said(value: Any) -> None:
    """The dict's own loop in ``_sorted_c_writes_it`` answers as the recursive check."""
    assert _canonical._plain_json(value) is _writes_it_plain(value)


class _Many(BaseModel):
    text: str
    count: int
    flag: bool = False
    amount: Decimal | None = None
    tags: list[str] = []
    nested: dict[str, Any] = {}


@read_tool
async def _reads(args: _Many) -> str:
    """Read."""
    return args.text


@write_tool
async def _writes(args: _Many) -> str:
    """Write."""
    return args.text


@given(
    text=st.text(max_size=8),
    count=st.integers(min_value=-(10**500), max_value=10**500),
    amount=st.none() | st.decimals(allow_nan=False, allow_infinity=False),
    tags=st.lists(st.text(max_size=3), max_size=3),
    nested=st.dictionaries(st.text(max_size=3), _values, max_size=2),
)
def test_a_tools_call_is_the_call_its_init_makes(
    text: str, count: int, amount: Decimal | None, tags: list[str], nested: dict[str, Any]
) -> None:
    """``tool.call(args)`` (made by setting the call's slots) is the call
    ``ReadCall(tool=..., args=...)`` / ``WriteCall(...)`` makes: equal, the same repr,
    canonical text and hash; or the same refusal for arguments that are not JSON (a
    number too large, a key that is not text)."""
    args = _Many(text=text, count=count, amount=amount, tags=tags, nested=nested)
    for tool, kind in ((_reads, ReadCall), (_writes, WriteCall)):
        try:
            plain: Any = kind(tool=tool, args=args)  # type: ignore[arg-type]
        except (BadArgumentsError, TypeError) as error:
            refused = (type(error), str(error), getattr(error, "problems", ()))
            try:
                tool.call(args)
            except (BadArgumentsError, TypeError) as fast_error:
                fast_refused = (type(fast_error), str(fast_error))
                problems = getattr(fast_error, "problems", ())
            assert (*fast_refused, problems) == refused
            continue
        fast = tool.call(args)
        assert type(fast) is kind
        assert fast == plain
        assert repr(fast) == repr(plain)
        assert (fast.args, fast.tool) == (plain.args, plain.tool)
        assert fast._canonical == plain._canonical
        assert fast.args_hash == plain.args_hash == _json.canonical_hash(args)


_TWO_CALLS = ModelReply(
    tool_calls=(
        ToolRequest(name="_lookup", arguments='{"key": "a"}', id="x"),
        ToolRequest(name="_lookup", arguments='{"key": "b"}', id=""),
    ),
    finish_reason="tool_calls",
    usage=Usage(input_tokens=7, output_tokens=3, cost=Decimal("0.25")),
)


@pytest.mark.parametrize("turn", [_TWO_CALLS, reply("done")], ids=["calls", "answer"])
async def test_a_reply_is_routed_as_ask_then_route_routed_it(turn: ModelReply) -> None:
    """``Planning.advance`` queues a reply's calls in one copy of the phase (its usage, its
    loop memory, the calls): the phase it ends in is the one ``_ask`` and ``_route`` make
    (the usage in a copy, then the calls queued in another)."""
    agent = Agent[None](name="t", tools=[_lookup], budget=Budget())
    rt = Runtime(run_id="r", model=ScriptedModel([turn, turn]), gate=AutoDenyGate())
    fast = await agent.start(None, "go").receive("go").advance(rt)
    planning = agent.start(None, "go").receive("go")
    planning._leave("advance")
    said, heard = await _planning._ask(planning, rt, tools=agent.tools.schemas())
    assert isinstance(said, ModelReply)
    plain = await _planning._route(heard, rt, said)
    assert type(fast) is type(plain)
    for field in ("transcript", "pending", "spent", "loop", "step", "invalid_streak"):
        assert getattr(fast, field, None) == getattr(plain, field, None), field
    assert tuple(fast.transcript) == tuple(plain.transcript)
    if isinstance(plain, ToolCalling):
        assert isinstance(fast, ToolCalling)
        assert (fast.call, fast.call_id) == (plain.call, plain.call_id)


# --- issue 23, third round: the route's and the phases' shortcuts ---------------------------


@given(spent=_amounts, spent_exp=_exponents)
def test_a_free_calls_spend_is_the_two_adds(spent: Decimal, spent_exp: int) -> None:
    """A tool without a cost function prices a call at ``_FREE`` itself, whose sum with
    zero ``_counted`` made once: the same Spend as the two adds, the cost spelt the same."""
    cost = Decimal(spent).scaleb(spent_exp).copy_abs()
    before = Spend(tokens=3, cost=cost, tool_calls=2, model_calls=1)
    price = _lookup.price(_Args(key="k"))
    assert price is _tools._FREE
    plain = before.add(tool_calls=1).add(cost=price)
    fast = _counted(before, price)
    assert fast == plain
    assert str(fast.cost) == str(plain.cost)
    assert fast.model_dump_json() == plain.model_dump_json()


def _read(read: Callable[[str], Any], text: str) -> tuple[str, Any, list[type[Any]]]:
    """What ``read`` gives for ``text``: the value (with the types of a dict's values),
    or the error's type and words."""
    try:
        value = read(text)
    except (ValueError, ArithmeticError, RecursionError) as error:
        return type(error).__name__, str(error), []
    kinds = [type(item) for item in value.values()] if isinstance(value, dict) else []
    return "value", value, kinds


_JSON_TEXTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
).map(lambda value: json.dumps(value))
_AROUND = st.sampled_from(["", " ", "\n", "\t ", "\r\n", "x", ",", "}", "\ufeff", "\u00a0", "0"])


@given(
    st.one_of(
        st.tuples(_AROUND, _JSON_TEXTS, _AROUND).map("".join),
        st.text(alphabet='{}[]":,0123456789.eE+-tfnul \n\\', max_size=12),
        st.sampled_from(["", "{", "1" * 401, '{"n": 1e401}', "NaN", "[1, 2]", '"a" "b"']),
    )
)
def test_arguments_are_scanned_as_the_decoder_decodes_them(text: str) -> None:
    """``_decoded`` (the scanner called directly when no whitespace is around the value)
    gives what ``_BOUNDED_DECODER.decode`` gives: the value, or the same error."""
    assert _read(_tools._decoded, text) == _read(_tools._BOUNDED_DECODER.decode, text)


def test_a_route_is_the_call_it_makes_or_the_same_invalid_call() -> None:
    """``route`` (``call`` written out) gives the call ``call`` makes, or the same
    ``InvalidCall`` for an unknown tool and bad arguments, as text, bytes or a mapping."""
    tools = ToolRegistry([_lookup])
    for arguments in ('{"key": "k"}', b'{"key": "k"}', {"key": "k"}, ' {"key": "k"} '):
        routed = tools.route("_lookup", arguments)
        assert routed == tools.call("_lookup", arguments)
        assert isinstance(routed, ReadCall)
        assert routed.args_hash == _json.canonical_hash(routed.args)
    assert tools.route("nope", "{}") == InvalidCall(
        name="nope",
        arguments="{}",
        problems=("unknown tool 'nope'",),
        feedback="There is no tool named 'nope'. Call one of: _lookup; or answer without a tool.",
    )
    for bad in ("{}", '{"key": 1}', "[]", "{", '{"key": "k"} x'):
        invalid = tools.route("_lookup", bad)
        assert isinstance(invalid, InvalidCall)
        with pytest.raises(BadArgumentsError) as raised:
            tools.call("_lookup", bad)
        assert invalid.problems == raised.value.problems
        assert invalid.arguments == bad


def test_a_model_passed_to_a_tool_is_validated_as_before() -> None:
    """``_validate`` takes a dict straight to validation; a model of the tool's own class
    is kept as it is, another model is refused, and a dict subclass is validated."""

    class Other(BaseModel):
        key: str

    class Mapping_(dict[str, Any]):
        pass

    args = _Args(key="k")
    assert _lookup._validate(args) is args
    with pytest.raises(BadArgumentsError, match="got Other, expected _Args"):
        _lookup._validate(Other(key="k"))
    assert _lookup._validate({"key": "k"}) == args
    assert _lookup._validate(Mapping_(key="k")) == args


def test_successors_are_read_once_per_class_and_not_kept_past_it() -> None:
    """``Active.successors`` gives ``_successors_of``'s answer; an entry of the id memo
    whose class is gone is not read for a new class of the same id; an error is kept for
    nothing (asked again, it is raised again)."""
    assert Planning.successors() == _successors_of(Planning, _phases._ORDER)
    assert Planning.successors() is Planning.successors()

    class Gone(Planning[None]):
        pass

    gone_id = id(Gone)
    assert Gone.successors() == Planning.successors()
    assert _phases._SUCCESSORS[gone_id][0]() is Gone
    dead = weakref.ref(Gone)
    del Gone
    gc.collect()
    assert dead() is None
    # Its entry went with it (or the id is a new class's now, with an entry of its own).
    entry = _phases._SUCCESSORS.get(gone_id)
    assert entry is None or entry[0]() is not None
    memo: Any = {}
    memo[id(Observing)] = (dead, ("a lie",))  # as if Observing had taken the dead class's id
    assert _per_class(memo, Observing, _phases._read_successors) == _successors_of(
        Observing, _phases._ORDER
    )

    class Unreadable(Planning[None]):
        async def advance(self, rt: Runtime) -> int:  # type: ignore[override]
            return 1

    for _ in range(2):
        with pytest.raises(SetupError):
            Unreadable.successors()
    # Nothing kept for it (an entry under its id, if any, is a gone class's: ids are reused).
    entry = _phases._SUCCESSORS.get(id(Unreadable))
    assert entry is None or entry[0]() is not Unreadable


_ROLES = st.sampled_from(["user", "assistant", "tool", "system"])


@given(
    roles=st.lists(_ROLES, max_size=70),
    head=st.lists(_ROLES, max_size=2),
    form=st.sampled_from(["transcript", "prefixed", "tuple"]),
)
def test_a_taken_call_starts_an_iteration_as_the_last_message_says(
    roles: list[str], head: list[str], form: str
) -> None:
    """``_taken`` reads the last message from the tail when it can: a pending call starts
    a tool iteration exactly when the transcript is empty or does not end with a tool's
    message, for a transcript of any length, one with messages before it (``prefixed``)
    and a tuple (a phase built by hand)."""

    def made(role: str) -> Message:
        return Message(role=role, content="x", tool_call_id="c" if role == "tool" else "")

    messages = tuple(made(role) for role in roles)
    transcript: Any = Transcript(messages)
    if form == "prefixed":
        transcript = transcript.prefixed(*(made(role) for role in head))
    elif form == "tuple":
        transcript = messages
    agent = Agent[None](name="taken", tools=[_lookup])
    pending = (ToolRequest(name="_lookup", arguments='{"key": "k"}', id="c1"),)
    planning = hand_built(Planning, agent=agent, ctx=None, transcript=transcript, pending=pending)
    call_id, kept, rest, iteration = _batch._taken(planning, "_lookup", '{"key": "k"}')
    assert (call_id, kept, rest) == ("c1", transcript, ())
    assert iteration == (not transcript or transcript[-1].role != "tool")


class _Instructed(Planning[None]):
    """A subclass as agents write them: its copy is still seen by nothing."""

    def instructions(self) -> str:
        return "Be brief."


class _Watching(Planning[None]):
    """A subclass that overrides a transition on the way: it must see the copy."""

    def call_tool(self, call: ReadCall, *, raw_arguments: str | None = None) -> ToolCalling[None]:
        return super().call_tool(call, raw_arguments=raw_arguments)


_CALLS = st.tuples(
    st.sampled_from(
        [
            ("_lookup", '{"key": "a"}'),
            ("_lookup", '{"key": "b"}'),
            ("_lookup", "{}"),
            ("_writes", '{"text": "t", "count": 1, "tags": [], "nested": {}}'),
            ("nope", "{}"),
        ]
    ),
    st.sampled_from(["", "x", "y"]),
).map(lambda made: ToolRequest(name=made[0][0], arguments=made[0][1], id=made[1]))


def _fields(phase: Any) -> dict[str, Any]:
    import attrs as attrs_

    named = {f.name: getattr(phase, f.name) for f in attrs_.fields(type(phase))}
    named.pop("_ticket")
    named["transcript"] = tuple(named["transcript"])
    return named


def _after(phase: Any) -> Any:
    """The next Planning after a taken call (observed, denied, or the calls skipped)."""
    if isinstance(phase, ToolCalling):
        phase._leave("execute")
        observing = phase._next(
            phase.agent.phases.observing,
            call=phase.call,
            call_id=phase.call_id,
            output="ok",
            pending=phase.pending,
        )
        return observing.observe()
    if isinstance(phase, _phases.AwaitApproval):
        return phase.deny("no")
    if isinstance(phase, Planning) and phase.pending:
        return phase.skip_pending("skipped")
    return phase


@given(
    replies=st.lists(st.lists(_CALLS, min_size=1, max_size=3).map(tuple), min_size=1, max_size=5),
    cls=st.sampled_from([Planning, _Instructed, _Watching]),
    tool_calls=st.sampled_from([None, 2]),
)
def test_a_replys_first_call_is_taken_as_from_the_queued_copy(
    replies: list[tuple[ToolRequest, ...]], cls: type[Planning[None]], tool_calls: int | None
) -> None:
    """``_take_reply`` (the queued copy left out when nothing can see it) ends where
    ``_take(_queued(...))`` does, reply after reply of a run: the same phase class and
    fields (transcript, queue, spend, loop memory with its records and verdicts, call and
    id), the phase left and copied alike, the record memo alike, and one transition from
    the phase advanced; through reads, writes, invalid and unknown calls, repeated calls
    the governor suppresses and a tool-call budget it stops."""
    phases = _phases.Phases[None](planning=cls)
    agent = Agent[None](
        name="t", tools=[_lookup, _writes], budget=Budget(tool_calls=tool_calls), phases=phases
    )
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=lambda: 0.0)
    fast_at = agent.start(None, "go").receive("go")
    plain_at = agent.start(None, "go").receive("go")
    for requests in replies:
        if not isinstance(fast_at, Planning):
            break
        results = []
        for at, take in ((fast_at, "fast"), (plain_at, "plain")):
            at._leave("advance")
            spent, loop = at.spent.add(tokens=3, model_calls=1), at.loop
            if take == "fast":
                made: Any = _batch._take_reply(at, rt, requests, spent=spent, loop=loop)
            else:
                made = _take(_queued(at, requests, spent=spent, loop=loop), rt)
            memo = _batch._last_action[0]
            results.append((made, at._ticket.copied, memo is None, memo and memo[3]))
            link, transitions = made._ticket, 0
            while link is not at._ticket:
                transitions += link.via == "transition"
                link = link.parent
            assert transitions == 1
        (fast, *fast_rest), (plain, *plain_rest) = results
        assert type(fast) is type(plain)
        assert _fields(fast) == _fields(plain)
        assert fast_rest == plain_rest
        fast_at, plain_at = _after(fast), _after(plain)


def _c_writes_plain(value: Any) -> bool:
    """``_c_writes_as_dumps`` as it was written before its dict loop read leaves itself."""
    kind = type(value)
    if kind is dict:
        return all(isinstance(k, str) and _c_writes_plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_c_writes_plain(item) for item in value)
    if kind in (str, int, float, bool, type(None), Decimal):
        return True
    return not isinstance(value, int | float | dict | list | tuple)


class _Text(str):
    pass


class _Number(int):
    pass


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=3)
    | st.decimals(allow_nan=False)
    | st.builds(_Number, st.integers())
    | st.builds(_Text, st.text(max_size=3))
    | st.just(b"x")
    | st.just(object()),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=2) | st.builds(_Text, st.text(max_size=2)), inner)
        | st.dictionaries(st.integers(), inner, max_size=2)
    ),
    max_leaves=8,
)


@given(_VALUES)
def test_the_c_writer_check_reads_a_dicts_leaves_as_it_did(value: Any) -> None:
    """``_c_writes_as_dumps`` (a dict's leaf values read in its own loop) says what the
    recursive check said, for nested values with subclasses, bytes and keys of any kind."""
    assert _messages._c_writes_as_dumps(value) == _c_writes_plain(value)
