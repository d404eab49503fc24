"""The Watch's cheaper reads find what the plain reads find.

``_asked_problem`` reads the ids of the model's last reply, its answers, the call held
and the queue as tuples in C; ``_last_reply`` reads a ``Transcript``'s last messages
from its ``_tail``; the queue is read once per transition. Each is compared here with
the plain version (the code before, kept below), on phases of every kind given
transcripts and queues that do and do not account for the reply's calls, and on
transcripts whose insides were changed in place.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import (
    Agent,
    AwaitApproval,
    Budget,
    Done,
    Failed,
    LoopState,
    Message,
    ModelRetrying,
    Observing,
    Planning,
    Responding,
    Retrying,
    Runtime,
    Spend,
    ToolCalling,
    ToolRequest,
    Transcript,
    _seal,
    _watch,
)
from statemachine._errors import IllegalTransitionError, PhaseForgedError
from statemachine._phases import Phase

_IDS = ("c0", "c1", "c2", "c3")
_REQUESTS = {call_id: ToolRequest(id=call_id, name="lookup", arguments="{}") for call_id in _IDS}


def _asked_problem_plain(after: Phase[Any]) -> str | None:
    """``_asked_problem`` as it was: lists built one call at a time, the queue read from
    the phase."""
    if isinstance(after, Failed):
        return None
    asking, answered = _watch._last_reply_plain(after.transcript)
    if asking is None:
        return None
    accounted = [message.tool_call_id for message in answered]
    if isinstance(after, ToolCalling | AwaitApproval | Observing | Retrying):
        accounted.append(after.call_id)
    accounted.extend(request.id for request in getattr(after, "pending", ()))
    asked = [call.id for call in asking.tool_calls]
    if accounted != asked:
        return f"the model asked for calls {asked}, and {accounted} are answered, held or pending"
    return None


def _message(kind: str, ids: tuple[str, ...]) -> Message:
    if kind == "asking":
        return Message(role="assistant", tool_calls=tuple(_REQUESTS[i] for i in ids))
    if kind == "tool":
        return Message(role="tool", content="x", tool_call_id=ids[0] if ids else "c0")
    return Message(role=kind, content="words")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


_SOME_IDS = st.lists(st.sampled_from(_IDS), max_size=3).map(tuple)
_MESSAGES = st.lists(
    st.tuples(st.sampled_from(["asking", "tool", "tool", "assistant", "user"]), _SOME_IDS).map(
        lambda kind_ids: _message(*kind_ids)
    ),
    max_size=45,
)
_KINDS: tuple[type[Phase[Any]], ...] = (
    Planning,
    ToolCalling,
    AwaitApproval,
    Observing,
    Retrying,
    ModelRetrying,
    Failed,
    Done,
)


def _phase(
    kind: type[Phase[Any]], transcript: object, call_id: str, pending: tuple[Any, ...]
) -> Any:
    """A phase of ``kind`` holding these fields, as a hostile ``object.__setattr__`` could
    leave one (only the fields the check reads are set)."""
    phase = object.__new__(kind)
    object.__setattr__(phase, "transcript", transcript)
    if any("call_id" in vars(klass) for klass in kind.__mro__):
        object.__setattr__(phase, "call_id", call_id)
    if hasattr(kind, "pending"):
        object.__setattr__(phase, "pending", pending)
    return phase


@settings(max_examples=400, deadline=None)
@given(
    messages=_MESSAGES,
    head=st.integers(0, 2),
    kind=st.sampled_from(_KINDS),
    call_id=st.sampled_from(_IDS),
    pending=_SOME_IDS,
    as_tuple=st.booleans(),
)
def test_the_reply_is_accounted_for_as_the_plain_check_finds(
    messages: list[Message],
    head: int,
    kind: type[Phase[Any]],
    call_id: str,
    pending: tuple[str, ...],
    as_tuple: bool,
) -> None:
    transcript = Transcript(messages[head:]).prefixed(*messages[:head])
    given_as: object = tuple(transcript) if as_tuple else transcript
    queue = tuple(_REQUESTS[i] for i in pending)
    after = _phase(kind, given_as, call_id, queue)
    read = getattr(after, "pending", ())
    assert _watch._asked_problem(after, read) == _asked_problem_plain(after)


def _asking_then(*answers: str) -> list[Message]:
    return [
        Message(role="user", content="go"),
        _message("asking", ("c0", "c1", "c2")),
        *(_message("tool", (i,)) for i in answers),
    ]


@pytest.mark.parametrize(
    "change",
    [
        "tail as a list",
        "tail emptied",
        "tail of one tool message",
        "tail a text",
    ],
)
def test_a_transcript_changed_in_place_is_read_as_the_plain_read_finds(change: str) -> None:
    """A transcript whose ``_tail`` was replaced in place: where it is no tuple, or holds
    no reply, the check reads the transcript one index at a time, as before."""
    transcript = Transcript([Message(role="user", content=str(n)) for n in range(40)])
    transcript = transcript.appended(*_asking_then("c0", "c1"))
    tail = transcript._tail  # pyright: ignore[reportPrivateUsage]
    replaced: object = {
        "tail as a list": list(tail),
        "tail emptied": (),
        "tail of one tool message": (_message("tool", ("c1",)),),
        "tail a text": "text",
    }[change]
    object.__setattr__(transcript, "_tail", replaced)
    try:
        plain: Any = _watch._last_reply_plain(transcript)
    except Exception as error:  # the same error either way
        with pytest.raises(type(error)):
            _watch._last_reply(transcript)
        return
    fast = _watch._last_reply(transcript)
    assert fast[0] is plain[0]
    assert list(fast[1]) == list(plain[1])


@pytest.mark.parametrize("answers", [(), ("c0",), ("c0", "c1"), ("c0", "c1", "c2")])
def test_a_reply_before_the_tail_is_found_one_index_at_a_time(answers: tuple[str, ...]) -> None:
    """A reply whose answers fill the tail (the reply itself in a full chunk before it)
    is found by the plain read: the same reply and answers."""
    transcript = Transcript([Message(role="user", content=str(n)) for n in range(31)])
    transcript = transcript.appended(*_asking_then(*answers)[1:])
    for extra in range(40):
        fast, plain = _watch._last_reply(transcript), _watch._last_reply_plain(transcript)
        assert fast[0] is plain[0]
        assert all(a is b for a, b in zip(fast[1], plain[1], strict=True))
        assert len(fast[1]) == len(plain[1])
        transcript = transcript.appended(_message("tool", (f"x{extra}",)))


@settings(max_examples=100, deadline=None)
@given(size=st.integers(0, 140))
def test_an_action_logs_length_is_read_as_its_len(size: int) -> None:
    """The counters read an ``ActionLog``'s length from its chunks and tail, as its
    ``__len__`` does (and ``len`` of anything else)."""
    from statemachine._actions import ActionLog, ActionRecord

    record = ActionRecord(
        call_id="c", tool="lookup", effect="read", exact="e", key="k", text="t", outcome="ok"
    )
    log = ActionLog(record for _ in range(size))
    phase = object.__new__(Planning)
    loop = LoopState().model_copy(update={"actions": log})
    object.__setattr__(phase, "loop", loop)
    object.__setattr__(phase, "spent", Spend())
    object.__setattr__(phase, "step", 3)
    assert _watch._counters(phase)[5] == len(log) == size
    object.__setattr__(phase, "loop", loop.model_copy(update={"actions": tuple(log)}))
    assert _watch._counters(phase)[5] == size


# --- the ticket chain: one transition of the phase advanced -------------------------------


def _one_transition_plain(before: Any, after: Any) -> None:
    """``Watch._one_transition`` as it was: ``_own_ticket``, then the loop, every time."""
    _watch._walked(before, after, _seal._own_ticket(after, "advance"))


class _Held:
    """Something holding a ticket, as a phase does (only what the check reads)."""

    kind = "Held"

    def __init__(self, ticket: object) -> None:
        self._ticket = ticket


class _OtherTicket:
    """Not the library's ticket, with the same fields."""

    def __init__(self, parent: object, via: str) -> None:
        self.parent, self.via, self.holder = parent, via, None
        self.origin, self.runtime = "start", None


class _Via(str):
    """A text equal to a ticket's ``via`` but not the very object (nor a plain str)."""


# How each link of a chain is made: its ``via``, and whether it is the library's ticket.
_VIAS = st.sampled_from(
    ["transition", "copy", "start", "restore", "hand", "other", "built", "subclass"]
)


def _via(name: str) -> str:
    if name == "built":  # equal to "transition", made at run time
        return "".join(["trans", "ition"])
    if name == "subclass":
        return _Via("transition")
    return name


@settings(max_examples=500, deadline=None)
@given(
    vias=st.lists(st.tuples(_VIAS, st.booleans()), max_size=3)
    | st.lists(st.tuples(_VIAS, st.booleans()), max_size=70),
    origin_at=st.integers(0, 2) | st.integers(0, 70),
    holder=st.sampled_from(["after", "after", "another", "none", "gone"]),
    after_is_origin=st.sampled_from([False, False, False, True]),
)
def test_the_ticket_chain_is_judged_as_the_plain_loop_judges_it(
    vias: list[tuple[str, bool]], origin_at: int, holder: str, after_is_origin: bool
) -> None:
    """The usual chain (the library's ticket held by the phase, one ``"transition"`` to
    the phase advanced) is taken without the loop; any other chain (copies, several
    transitions, a foreign or unheld ticket, an equal but other ``via`` text, a chain
    that never reaches the phase advanced or is too long) is judged as before: the same
    error or none, and the same parent left on the ticket."""

    def chain() -> tuple[Any, Any]:
        # links[0] is the ticket of the phase returned, links[n + 1] the parent of
        # links[n]; the one at ``origin_at`` (counted from the phase returned) has the
        # phase advanced's ticket as parent, and a chain that does not reach it ends.
        origin = _seal._Ticket(None, "start")
        links: list[Any] = []
        parent: Any = None
        for at, (name, ours) in reversed(list(enumerate(vias))):
            if at == origin_at:
                parent = origin
            made: Any = (_seal._Ticket if ours else _OtherTicket)(parent, _via(name))
            links.insert(0, made)
            parent = made
        ticket = origin if after_is_origin or not links else links[0]
        before, after = _Held(origin), _Held(ticket)
        keep = _Held(None)
        ticket.holder = {
            "after": lambda: after,
            "another": lambda: keep,
            "none": None,
            "gone": lambda: None,
        }[holder]
        return before, after

    outcomes = []
    for judge in (_watch.Watch._one_transition, _one_transition_plain):
        before, after = chain()
        try:
            judge(before, after)
            error = None
        except (IllegalTransitionError, PhaseForgedError) as raised:
            error = (type(raised), str(raised))
        outcomes.append((error, after._ticket.parent is None))
    assert outcomes[0] == outcomes[1]


def test_the_usual_chain_is_taken_without_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run's transitions take the short way (the premise of the figures), and
    one made by hand still fails."""
    asked: list[str] = []
    plain = _seal._own_ticket

    def counted(phase: Any, doing: str) -> Any:
        asked.append(doing)
        return plain(phase, doing)

    monkeypatch.setattr(_watch, "_own_ticket", counted)
    origin = _seal._Ticket(None, "start")
    before = _Held(origin)
    after = _Held(_seal._Ticket(origin, "transition"))
    after._ticket.holder = lambda: after
    _watch.Watch._one_transition(before, after)
    assert asked == []
    assert after._ticket.parent is None
    twice = _Held(_seal._Ticket(_seal._Ticket(origin, "transition"), "transition"))
    twice._ticket.holder = lambda: twice
    with pytest.raises(IllegalTransitionError, match="2 transitions away"):
        _watch.Watch._one_transition(before, twice)
    assert asked == ["advance"]


# --- the runtime's and the agent's fields, by identity ----------------------------------


class _EqualToAll:
    """Equal to everything: a field replaced by it is the same only by ``==``."""

    asked = 0

    def __eq__(self, other: object) -> bool:
        _EqualToAll.asked += 1
        return True

    __hash__ = object.__hash__


def _runtime_and_agent() -> tuple[Runtime, Agent[None]]:
    from statemachine.testing import AutoDenyGate, ScriptedModel

    agent = Agent[None](name="a", budget=Budget(tokens=5))
    return Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate()), agent


@settings(max_examples=300, deadline=None)
@given(
    which=st.sampled_from(["runtime", "agent"]),
    replaced=st.sets(st.integers(0, 15), max_size=3),
    how=st.sampled_from(["equal to all", "an equal copy", "None", "the same"]),
    in_kept=st.booleans(),
)
def test_the_fields_are_the_very_objects_kept_as_attrgetter_and_is_find(
    which: str, replaced: set[int], how: str, in_kept: bool
) -> None:
    """``_same_runtime``/``_same_terms`` answer as ``all(map(operator.is_,
    attrgetter(*fields)(obj), kept))`` (the check before) when fields were replaced in
    place (``object.__setattr__``, as a hostile phase could) or in the kept tuple: by an
    object equal to everything, an equal copy, None or the very same object. Any field
    replaced by another object is caught, and no field's ``__eq__`` is asked."""
    import copy
    import operator

    rt, agent = _runtime_and_agent()
    obj: Any = rt if which == "runtime" else agent
    parts = _watch._runtime_parts if which == "runtime" else _watch._agent_parts
    same = _watch._same_runtime if which == "runtime" else _watch._same_terms
    names = [field.name for field in attrs.fields(type(obj))]
    kept = list(parts(obj))
    for at in sorted(replaced):
        if at >= len(names):
            continue
        value = getattr(obj, names[at])
        new: Any = {
            "equal to all": _EqualToAll(),
            "an equal copy": copy.copy(value),
            "None": None,
            "the same": value,
        }[how]
        if in_kept:
            kept[at] = new
        else:
            object.__setattr__(obj, names[at], new)
    asked = _EqualToAll.asked
    plain = all(map(operator.is_, parts(obj), tuple(kept)))
    assert same(obj, tuple(kept)) is plain
    assert _EqualToAll.asked == asked


@pytest.mark.parametrize("which", ["runtime", "agent"])
def test_every_field_replaced_in_place_is_caught(which: str) -> None:
    """Each field of the runtime (14) and of the agent (16), replaced in place by another
    object, even one equal to everything, makes the check fail; the untouched object
    passes; the function compares every field attrs knows of, in its order."""
    rt, agent = _runtime_and_agent()
    obj: Any = rt if which == "runtime" else agent
    parts = _watch._runtime_parts if which == "runtime" else _watch._agent_parts
    same = _watch._same_runtime if which == "runtime" else _watch._same_terms
    names = [field.name for field in attrs.fields(type(obj))]
    assert len(names) == (14 if which == "runtime" else 16)
    kept = parts(obj)
    assert same(obj, kept)
    for at, name in enumerate(names):
        was = getattr(obj, name)
        for other in (_EqualToAll(), None, object()):
            if other is was:
                continue
            object.__setattr__(obj, name, other)
            assert not same(obj, kept), name
        object.__setattr__(obj, name, was)
        assert same(obj, kept)
        assert not same(obj, (*kept[:at], object(), *kept[at + 1 :])), name
    assert not same(obj, kept[:-1])  # a kept tuple of another length is never the same


# --- the successors of the library's own classes, kept ----------------------------------


def test_the_library_classes_successors_are_kept_and_a_subclass_is_asked_each_time() -> None:
    """For each of the library's active phase classes the kept answer is the classmethod's
    (read from the annotation); a subclass that overrides ``successors`` is asked at
    every transition, as before, and never kept (even one answering otherwise each
    time)."""
    for cls in _watch._LIBRARY_ACTIVE:
        phase = object.__new__(cls)
        assert _watch._successors(phase) == cls.successors()
        assert _watch._successors(phase) == cls.successors()

    asked: list[int] = []

    @attrs.frozen(kw_only=True)
    class Wider(Planning[None]):
        @classmethod
        def successors(cls) -> tuple[type[Phase[Any]], ...]:
            asked.append(1)
            return (Done,) if len(asked) % 2 else (Failed,)

    phase = object.__new__(Wider)
    assert _watch._successors(phase) == (Done,)
    assert _watch._successors(phase) == (Failed,)
    assert asked == [1, 1]
    assert id(Wider) not in _watch._LIBRARY_SUCCESSORS


class _Lying(Decimal):
    """A limit equal to every other: ``==`` cannot tell it from the one it replaced."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = Decimal.__hash__


class _LimitLiar(Planning[None]):
    """Puts a far larger token limit, equal to every value, into the agent's budget."""

    async def advance(
        self, rt: Runtime
    ) -> ToolCalling[None] | AwaitApproval[None] | Planning[None] | Failed[None] | Responding[None]:
        object.__setattr__(self.agent.budget, "tokens", _Lying(10**9))
        return await super().advance(rt)


@pytest.mark.anyio
async def test_a_budget_limit_replaced_by_an_object_equal_to_it_is_refused() -> None:
    """The budget's values are compared by identity: a limit replaced in place by one
    that answers ``==`` as it likes (and then counts as a far larger limit) is refused,
    as a limit replaced by a plain larger one is."""
    from statemachine import Phases, Runner
    from statemachine.testing import AutoDenyGate, ScriptedModel, reply

    agent = Agent[None](name="a", budget=Budget(tokens=5), phases=Phases(planning=_LimitLiar))
    runner = Runner(agent, model=ScriptedModel([reply("hi")]), gate=AutoDenyGate())
    with pytest.raises(IllegalTransitionError, match="budget"):
        await runner.run(None, "hi")


_VALUES = st.sampled_from(["k", 1, None, Decimal(1), Decimal("1.0"), 1.0, _EqualToAll()])


@settings(max_examples=300, deadline=None)
@given(
    kept=st.dictionaries(st.sampled_from(["tokens", "cost", "tool_calls", "wall_clock"]), _VALUES),
    changes=st.lists(
        st.tuples(
            st.sampled_from(["tokens", "cost", "x"]), st.sampled_from(["set", "copy", "del"])
        ),
        max_size=3,
    ),
    subclass=st.booleans(),
)
def test_the_budget_is_the_very_values_kept(
    kept: dict[str, Any], changes: list[tuple[str, str]], subclass: bool
) -> None:
    """``_same_values(keys)(now, values)`` holds exactly when ``now`` is a dict (not a
    subclass) with the kept keys, each with the very object kept (an equal copy or an
    object equal to all is not it), as the one-key-at-a-time version finds."""
    now = dict(kept)
    for key, how in changes:
        if how == "del":
            now.pop(key, None)
        elif how == "copy" and key in now:
            now[key] = copy.copy(now[key])
        else:
            now[key] = _EqualToAll()
    given: object = _Dict(now) if subclass else now
    expected = (
        not subclass and sorted(now) == sorted(kept) and all(now[key] is kept[key] for key in kept)
    )
    asked = _EqualToAll.asked
    values = tuple(kept.values())
    assert _watch._same_values(tuple(kept))(given, values) == expected
    assert _watch._same_values_plain(tuple(kept), given, values) == expected
    assert _EqualToAll.asked == asked  # no value's __eq__ was asked


class _Dict(dict[str, Any]):
    pass


@settings(max_examples=200, deadline=None)
@given(
    runtime_changed=st.sets(st.integers(0, 13), max_size=2),
    agent_changed=st.sets(st.integers(0, 15), max_size=2),
)
def test_the_run_and_its_terms_are_checked_at_once_as_one_by_one(
    runtime_changed: set[int], agent_changed: set[int]
) -> None:
    """``_same_run(rt, kept, agent, terms)`` answers ``_same_runtime(rt, kept) and
    _same_terms(agent, terms)``, whichever fields of either are not the ones kept."""
    rt, agent = _runtime_and_agent()
    kept_rt = list(_watch._runtime_parts(rt))
    terms = list(_watch._agent_parts(agent))
    for at in runtime_changed:
        kept_rt[at] = _EqualToAll()
    for at in agent_changed:
        terms[at] = _EqualToAll()
    both = _watch._same_run(rt, tuple(kept_rt), agent, tuple(terms))
    assert both == (
        _watch._same_runtime(rt, tuple(kept_rt)) and _watch._same_terms(agent, tuple(terms))
    )
    assert both == (not runtime_changed and not agent_changed)
