"""The Watch's short way for the library's own classes (``Watch._quick``) accepts only
what its whole check (``Watch._checked``) accepts, and ``accept`` answers as the whole
check does: the same phase or the same refusal, the same counters and queue recorded,
the ticket chain cut the same.

Each case takes one transition of a real run (recorded as the runner's ``accept`` saw
it), changes the phase, the run's runtime, the agent, its budget or the ticket in place
(``object.__setattr__``, as a hostile phase, tool or model might), and judges it both
ways from the same Watch state.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    Failed,
    LoopState,
    Message,
    Planning,
    RetryPolicy,
    Runner,
    Runtime,
    Spend,
    ToolCalling,
    ToolRequest,
    Transcript,
    _seal,
    _watch,
    read_tool,
)
from statemachine._approval import ApprovedCall
from statemachine._errors import IllegalTransitionError
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class _Args(BaseModel):
    key: str


_FAILED_ONCE: set[str] = set()


@read_tool
async def lookup(args: _Args) -> dict[str, object]:
    """Look a key up (a key starting "flaky" times out the first time)."""
    if args.key.startswith("flaky") and args.key not in _FAILED_ONCE:
        _FAILED_ONCE.add(args.key)
        raise TimeoutError(args.key)
    return {"key": args.key}


class _EqualToAll:
    """Equal to, and not less than, everything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


class _LyingInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    def __ge__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@attrs.frozen(kw_only=True)
class _SubPlanning(Planning[None]):
    """A subclass of the library's Planning with the same slots (for ``__class__``)."""


@attrs.frozen(kw_only=True)
class _SubCalling(ToolCalling[None]):
    """A subclass of the library's ToolCalling with the same slots."""


# What the runner's accept saw: the Watch, its counters and queue then, the phases, and
# the ticket's parent before the accept cut it.
_Seen = tuple[_watch.Watch, Any, Any, Any, Any, Any]


def _recorded(calls: int, *, flaky: bool = False) -> list[_Seen]:
    seen: list[_Seen] = []
    plain = _watch.Watch.accept

    def spy(self: _watch.Watch, before: Any, after: Any, kinds: Any = None) -> Any:
        parent = getattr(getattr(after, "_ticket", None), "parent", None)
        seen.append((self, self._counters, self._pending, before, after, parent))
        return plain(self, before, after, kinds)

    # A flaky key of its own each run: its first call times out, then it is retried.
    flaky_key = f"flaky{len(_FAILED_ONCE)}"
    turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(calls)]
    if flaky:
        turns.insert(0, tool_call("lookup", f'{{"key": "{flaky_key}"}}'))
    agent = Agent[None](
        name="a",
        tools=[lookup],
        budget=Budget(tokens=10**6),
        max_steps=10**6,
        retry=RetryPolicy(base_delay=0, max_delay=0),
    )
    runner = Runner(agent, model=ScriptedModel([*turns, reply("done")]), gate=AutoDenyGate())
    _watch.Watch.accept = spy  # type: ignore[method-assign]
    try:
        anyio.run(runner.run, None, "go")
    finally:
        _watch.Watch.accept = plain  # type: ignore[method-assign]
    return seen


_RUN = _recorded(3, flaky=True)
_PAIRS = sorted({(type(seen[3]).__name__, type(seen[4]).__name__) for seen in _RUN})


def _outcome(seen: _Seen, how: str) -> tuple[tuple[object, object], object, object, bool | None]:
    watch, counters, pending, before, after, parent = seen
    watch._counters, watch._pending = counters, pending
    ticket = getattr(after, "_ticket", None)
    if ticket is not None:
        ticket.parent = parent
    try:
        if how == "accept":
            got: object = watch.accept(before, after)
        else:
            got = watch._checked(before, after, None)
        result: tuple[object, object] = ("accepted", got is after)
    except Exception as error:  # a refusal, or an error the whole check raises too
        result = (type(error).__name__, str(error))
    return (
        result,
        watch._counters,
        watch._pending,
        None if ticket is None else ticket.parent is None,
    )


def _quick_accepts(seen: _Seen) -> bool:
    watch, counters, pending, before, after, parent = seen
    watch._counters, watch._pending = counters, pending
    after._ticket.parent = parent
    entry = _watch._FAST.get(type(before), (None, {}))[1].get(type(after))
    return entry is not None and watch._quick(before, after, entry[1]) is not None


def test_a_run_of_library_classes_takes_the_short_way() -> None:
    """The figures' premise: every transition of the run but those through a copy (the
    last Planning's answer) is accepted by ``_quick``; each is accepted the same both
    ways."""
    quick = [_quick_accepts(seen) for seen in _RUN]
    assert sum(quick) >= len(_RUN) - 3  # and Retrying -> ToolCalling
    for seen in _RUN:
        assert _outcome(seen, "accept") == _outcome(seen, "checked")


_CHANGES = [
    "none",
    "step same",
    "step +2",
    "step lying",
    "spend lower",
    "tokens below",
    "cost below",
    "tool_calls below",
    "model_calls below",
    "iterations below",
    "spend cost lying",
    "loop fresh",
    "call_id other",
    "call_id not text",
    "attempt 0",
    "attempt lying",
    "call approved",
    "pending list",
    "pending extra",
    "pending not a request",
    "transcript tuple",
    "transcript other reply",
    "transcript empty",
    "transcript tail list",
    "agent other",
    "before agent other",
    "runtime field",
    "agent field",
    "budget value",
    "budget dict subclass",
    "ticket parent none",
    "ticket via copy",
    "ticket holder other",
    "ticket not a ticket",
    "class subclass",
]


class _Dict(dict[str, Any]):
    pass


def _change(seen: _Seen, change: str) -> _Seen:
    watch, counters, _pending, before, after, _parent = seen
    put = object.__setattr__
    rt, agent = watch._rt, watch._agent
    other = Agent[None](name="a", tools=[lookup])
    if change == "step same":
        put(after, "step", counters[0])
    elif change == "step +2":
        put(after, "step", counters[0] + 2)
    elif change == "step lying":
        put(after, "step", _LyingInt(0))
    elif change == "spend lower":
        put(after, "spent", Spend())
    elif change == "iterations below":
        put(after, "loop", after.loop.model_copy(update={"tool_iterations": counters[6] - 1}))
    elif change.endswith(" below"):
        name = change.removesuffix(" below")
        spent = attrs.evolve(after.spent)
        at = ("tokens", "cost", "tool_calls", "model_calls").index(name) + 1
        put(spent, name, counters[at] - 1)
        put(after, "spent", spent)
    elif change == "spend cost lying":
        lying = Spend()
        put(lying, "cost", _EqualToAll())
        put(after, "spent", lying)
    elif change == "loop fresh":
        put(after, "loop", LoopState())
    elif change == "call_id other" and hasattr(after, "call_id"):
        put(after, "call_id", "someone else's")
    elif change == "call_id not text" and hasattr(after, "call_id"):
        put(after, "call_id", _EqualToAll())
    elif change == "attempt 0" and hasattr(after, "attempt"):
        put(after, "attempt", 0)
    elif change == "attempt lying" and hasattr(after, "attempt"):
        put(after, "attempt", _LyingInt(1))
    elif change == "call approved" and hasattr(after, "call"):
        put(after, "call", object.__new__(ApprovedCall))
    elif change == "pending list" and hasattr(after, "pending"):
        put(after, "pending", list(after.pending))
    elif change == "pending extra" and hasattr(after, "pending"):
        extra = ToolRequest(id="x", name="lookup", arguments="{}")
        put(after, "pending", (*after.pending, extra))
    elif change == "pending not a request" and hasattr(after, "pending"):
        put(after, "pending", (*after.pending, _EqualToAll()))
    elif change == "transcript tuple":
        put(after, "transcript", tuple(after.transcript))
    elif change == "transcript other reply":
        asking = Message(
            role="assistant", tool_calls=(ToolRequest(id="z", name="lookup", arguments="{}"),)
        )
        put(after, "transcript", after.transcript.appended(asking))
    elif change == "transcript empty":
        put(after, "transcript", Transcript())
    elif change == "transcript tail list":
        listed = Transcript(after.transcript)
        put(listed, "_tail", list(listed._tail))
        put(after, "transcript", listed)
    elif change == "agent other":
        put(after, "agent", other)
    elif change == "before agent other":
        put(before, "agent", other)
    elif change == "runtime field":
        put(rt, "gate", AutoDenyGate())
    elif change == "agent field":
        put(agent, "max_steps", _EqualToAll())
    elif change == "budget value":
        put(agent.budget, "tokens", _LyingInt(10**9))
    elif change == "budget dict subclass":
        put(agent.budget, "__dict__", _Dict(vars(agent.budget)))
    elif change == "ticket parent none":
        return (watch, counters, _pending, before, after, None)
    elif change == "ticket via copy":
        put(after._ticket, "via", "copy")
    elif change == "ticket holder other":
        put(after._ticket, "holder", lambda: before)
    elif change == "ticket not a ticket":

        class _Other(_seal._Ticket):  # type: ignore[misc]  # final for the type checker only
            pass

        ticket = after._ticket
        fake = object.__new__(_Other)
        for name in ("parent", "via", "holder", "origin", "left_by", "runtime"):
            if hasattr(ticket, name):
                put(fake, name, getattr(ticket, name))
        put(after, "_ticket", fake)
    elif change == "class subclass":
        # Past the frozen class's __setattr__, as a phase could do it to the next one.
        if type(after) is Planning:
            put(after, "__class__", _SubPlanning)
        elif type(after) is ToolCalling:
            put(after, "__class__", _SubCalling)
    return seen


@settings(max_examples=300, deadline=None)
@given(
    at=st.integers(0, 10**6),
    changes=st.lists(st.sampled_from(_CHANGES), min_size=1, max_size=2),
)
def test_accept_answers_as_the_whole_check_after_changes_in_place(
    at: int, changes: list[str]
) -> None:
    """Whatever is changed in place (one or two changes), ``accept`` accepts or refuses
    as ``_checked`` does, records the same and cuts the chain the same; and when
    ``_quick`` accepts, so does ``_checked``."""
    run = _recorded(2, flaky=True)
    seen = run[at % len(run)]
    for change in changes:
        try:
            seen = _change(seen, change)
        except (TypeError, AttributeError, ValueError):  # a change the class does not allow
            continue
    quick = _quick_accepts(seen)
    whole = _outcome(seen, "checked")
    if quick:
        assert whole[0] == ("accepted", True)
    assert _outcome(seen, "accept") == whole


# The changes the whole check refuses on every pair of the run.
_ALWAYS_REFUSED = (
    "tokens below",
    "cost below",
    "tool_calls below",
    "model_calls below",
    "iterations below",
    "step same",
    "step +2",
    "step lying",
    "agent other",
    "before agent other",
    "runtime field",
    "agent field",
    "budget value",
    "budget dict subclass",
    "ticket parent none",
    "ticket via copy",
    "ticket holder other",
)


@pytest.mark.parametrize("change", _CHANGES)
@pytest.mark.parametrize("pair", _PAIRS)
def test_each_change_on_each_pair_is_judged_as_the_whole_check(
    change: str, pair: tuple[str, str]
) -> None:
    """Every change on every kind of transition of the run: ``accept`` answers as
    ``_checked``; what ``_checked`` refuses, ``_quick`` does not accept; and the changes
    that are refused everywhere are refused here."""
    run = _recorded(2, flaky=True)
    seen = next(s for s in run if (type(s[3]).__name__, type(s[4]).__name__) == pair)
    try:
        seen = _change(seen, change)
    except (TypeError, AttributeError, ValueError) as error:  # a change that tests nothing
        pytest.fail(f"the change {change!r} could not be made on {pair}: {error!r}")
    quick = _quick_accepts(seen)
    whole = _outcome(seen, "checked")
    if whole[0] != ("accepted", True):
        assert not quick
    assert _outcome(seen, "accept") == whole
    if change in _ALWAYS_REFUSED:
        assert whole[0][0] in {"IllegalTransitionError", "PhaseForgedError"}


def test_a_class_with_a_metaclass_that_says_it_is_a_library_class_takes_the_whole_check() -> None:
    """The short way finds its pairs by the classes themselves: a class whose metaclass
    hashes and compares as a library class is not taken for it."""

    class _Meta(type):
        def __eq__(cls, other: object) -> bool:
            return True

        def __hash__(cls) -> int:
            return hash(Planning)

    pretender = _Meta("Pretender", (), {})
    pair = _watch._FAST.get(pretender)
    assert pair is not None  # the dict matches it...
    assert pair[0] is not pretender  # ...and the check by identity does not


def test_the_pairs_left_to_the_whole_check() -> None:
    """Failed, ModelRetrying and a retry's run of its call are never judged the short way."""
    from statemachine import Failed, ModelRetrying, Retrying

    assert ModelRetrying not in _watch._FAST
    for _cls, pairs in _watch._FAST.values():
        assert Failed not in pairs
        assert ModelRetrying not in pairs
    assert ToolCalling not in _watch._FAST[Retrying][1]


def test_budget_cost_decimal_subclass() -> None:
    """A cost limit swapped for an equal Decimal subclass is refused (by identity)."""
    run = _recorded(1)
    seen = run[1]
    object.__setattr__(seen[0]._agent.budget, "tokens", Decimal(10**6))
    assert not _quick_accepts(seen)
    assert _outcome(seen, "accept")[0][0] == "IllegalTransitionError"


class _SameAsPlanning(type):
    """A metaclass under which a class hashes as, and is equal to, the library's Planning."""

    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(Planning)


class _NarrowPlanning(Planning[None], metaclass=_SameAsPlanning):
    """A Planning subclass whose advance names only Failed (narrower than Planning's), and
    which then returns what Planning's advance returns (a Responding)."""

    async def advance(self, rt: Runtime) -> Failed[None]:
        return await super().advance(rt)  # type: ignore[return-value]


class _NarrowSuccessors(Planning[None], metaclass=_SameAsPlanning):
    """A Planning subclass, equal to Planning by its metaclass, that answers ``successors``
    itself."""

    @classmethod
    def successors(cls) -> tuple[type[Any], ...]:
        return (Failed,)


def test_the_kept_successors_are_found_by_the_class_itself() -> None:
    """The Watch keeps the library classes' successors by the classes' ids: a class equal
    to Planning by its metaclass is asked itself (not given Planning's kept answer), and
    nothing is kept for it (Planning's answer is not replaced)."""
    planning = _watch._successors(object.__new__(Planning))
    assert _watch._successors(object.__new__(_NarrowSuccessors)) == (Failed,)
    assert _watch._LIBRARY_SUCCESSORS[id(Planning)] == planning
    assert id(_NarrowSuccessors) not in _watch._LIBRARY_SUCCESSORS
    assert _watch._successors(object.__new__(Planning)) == planning


@pytest.mark.anyio
async def test_a_class_equal_to_planning_is_judged_by_its_own_annotation() -> None:
    """The successors the Watch keeps for the library's classes are found by the class
    itself: a subclass whose metaclass makes it equal to Planning (and hash as it) is
    judged by its own annotation, which does not name Responding."""
    from statemachine import Phases

    agent = Agent[None](name="a", phases=Phases(planning=_NarrowPlanning))
    runner = Runner(agent, model=ScriptedModel([reply("hi")]), gate=AutoDenyGate())
    with pytest.raises(IllegalTransitionError, match="annotation does not name it"):
        await runner.run(None, "hi")
