"""The Planning side's shortcuts of issue 23's eighth round, each against the plain path.

- ``LoopState._call_free``: whether a call id is free in a state, in one frame, against
  ``_Line.of(actions, failures).call(call_id, len(actions)) is None`` (the index made
  from the state's own actions), for states of branched lines (records on older states,
  settles, copies, states restored from JSON).
  A branch's own index holds only what it recorded; the rest is read from its line.
- ``_batch._with_ids`` asking a ``LoopState`` that question, against the plain loop over
  the calls (``_each_with_id``) on the same states; a ``LoopState`` subclass is not asked
  (its own ``_call_free`` is never called), and gets the plain path's ids.
- ``_planning._heard``'s time left: ``None`` without asking ``Runtime.remaining`` only for
  the library's ``Runtime`` and ``Budget`` themselves, the standard clock and no wall-clock
  limit; any other clock is read as asking reads it, and subclasses answer themselves.
- ``_batch._take_reply``'s time taken and price for the governor: ``Runtime.elapsed``'s
  difference for a ``Runtime`` itself, ``_FREE`` for a library ``ReadTool`` with no cost
  function, against ``_take(_queued(...))`` (a wall clock and a cost budget that stop it).
"""

from __future__ import annotations

import inspect
import time
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    ModelReply,
    Runner,
    Runtime,
    _batch,
    _phases,
    _planning,
    read_tool,
)
from statemachine._actions import ActionRecord
from statemachine._batch import _each_with_id, _with_ids
from statemachine._governor import LoopState, _Line
from statemachine._model import ToolRequest
from statemachine.testing import AutoDenyGate, ScriptedModel, tool_call

_IDS = ("", "a", "call-3", "call-3.2", "call-3.3", "call-4", "call-4.2")

# Mostly the latest state (a run), often an older one (a branch of its line).
_pick = st.one_of(st.just(-1), st.just(-1), st.integers(0, 10**6))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _pick, st.sampled_from(_IDS[1:])),
        st.tuples(st.just("settle"), _pick, st.sampled_from(_IDS[1:])),
        st.tuples(st.just("copy"), _pick, st.just("")),
        st.tuples(st.just("restore"), _pick, st.just("")),
    ),
    max_size=40,
)


def _pool(steps: list[tuple[str, int, str]]) -> list[LoopState]:
    """Every state ``steps`` make, from ``LoopState()``."""
    pool = [LoopState()]
    for kind, at, call_id in steps:
        loop = pool[at % len(pool)]
        if kind == "record":
            made = ActionRecord(
                call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()"
            )
            loop = loop.record(made)
        elif kind == "settle":
            loop = loop.settle(call_id, "failed", f"result of {call_id}")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


def _free(loop: LoopState, call_id: str) -> bool:
    """The plain answer: the index made from the state's own actions."""
    return _Line.of(loop.actions, loop.failures).call(call_id, len(loop.actions)) is None


def _fields(requests: tuple[ToolRequest, ...]) -> list[tuple[Any, ...]]:
    return [(type(r), r.name, r.arguments, r.id, r.model_fields_set) for r in requests]


@settings(max_examples=150, deadline=None)
@given(_steps)
def test_a_free_call_id_is_the_plain_indexs_answer(steps: list[tuple[str, int, str]]) -> None:
    """Every state of a pool of branched lines answers ``_call_free`` for every id as the
    index made from its own actions does (a branch reads its line's ids below its base)."""
    for loop in _pool(steps):
        for call_id in _IDS:
            assert loop._call_free(call_id) is _free(loop, call_id), (call_id, loop.actions)


def test_a_branch_reads_the_ids_below_its_base() -> None:
    """A state recorded from an older state of its line (a branch, an overlay) finds the
    ids the line held below its branch point, and not those recorded after it there."""
    steps = [("record", -1, "a"), ("record", -1, "call-3"), ("record", 1, "call-4")]
    branch = _pool(steps)[-1]
    assert branch._line().parent is not None
    assert [branch._call_free(call_id) for call_id in ("a", "call-3", "call-4", "b")] == [
        False,
        True,
        False,
        True,
    ]
    request = ToolRequest(name="t", arguments="{}", id="a")
    assert [r.id for r in _with_ids(branch, 3, (request,))] == ["call-3"]


@settings(max_examples=150, deadline=None)
@given(_steps, st.sampled_from(_IDS), st.sampled_from([3, 4]))
def test_a_replys_id_is_the_plain_loops_on_branched_lines(
    steps: list[tuple[str, int, str]], given_id: str, step: int
) -> None:
    """``_with_ids`` gives a reply's one call the id (and request) the plain loop gives it,
    on every state of a pool of branched lines: a new id is new to that state."""
    for loop in _pool(steps):
        request = ToolRequest(name="t", arguments="{}", id=given_id)
        fast = _with_ids(loop, step, (request,))
        plain = _each_with_id(loop, step, (request,))
        assert _fields(fast) == _fields(plain)
        assert (fast[0] is request) is (plain[0] is request)
        assert _free(loop, fast[0].id)


class _Lying(LoopState):
    """A subclass whose own answer says every id is free."""

    def _call_free(self, call_id: str) -> bool:
        raise AssertionError("a subclass's _call_free is not asked")


def test_a_subclass_is_not_asked_and_gets_the_plain_ids() -> None:
    """A ``LoopState`` subclass takes the plain path (its index read), whatever its own
    ``_call_free`` would answer: an id the run used is replaced."""
    loop = LoopState()
    for call_id in ("call-3", "mine"):
        made = ActionRecord(
            call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()"
        )
        loop = loop.record(made)
    lying = _Lying.model_validate(loop.model_dump())
    for given_id, expected in (("mine", "call-3.2"), ("", "call-3.2"), ("new", "new")):
        request = ToolRequest(name="t", arguments="{}", id=given_id)
        (made_id,) = _with_ids(lying, 3, (request,))
        assert made_id.id == expected
        (exact,) = _with_ids(loop, 3, (request,))
        assert exact.id == expected


# --- the model call's time left: Runtime.remaining, or None without asking ------------------


class _Args(BaseModel):
    key: str


@read_tool
async def _lookup(args: _Args) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key}


class _Ticking:
    """A clock that moves on each time it is read, and counts the reads."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)


class _OwnRuntime(Runtime):
    """A runtime whose time left is its own."""

    def remaining(self, budget: Budget) -> float | None:
        return 7.0


class _OwnBudget(Budget, frozen=True):
    """A budget whose seconds left are its own."""

    def remaining_seconds(self, elapsed: float) -> float | None:
        return 5.0


@pytest.mark.anyio
@pytest.mark.parametrize("clock", ["monotonic", "ticking"])
@pytest.mark.parametrize("wall_clock", [None, 60.0])
@pytest.mark.parametrize("runtime", [Runtime, _OwnRuntime])
@pytest.mark.parametrize("budget", [Budget, _OwnBudget])
async def test_the_time_left_is_the_runtimes_answer(
    clock: str, wall_clock: float | None, runtime: type[Runtime], budget: type[Budget]
) -> None:
    """The request's timeout is ``rt.remaining(budget)`` as asked of the same runtime (its
    class's own answer for a subclass, the budget's for a budget subclass), and a clock
    that is not ``time.monotonic`` is read as often as asking reads it; only the standard
    clock with no wall-clock limit, the library's classes themselves, is not read."""
    agent = Agent[None](name="t", tools=[_lookup], budget=budget(wall_clock=wall_clock))
    model = ScriptedModel([ModelReply(text="done")])
    ticking = _Ticking()
    rt = runtime(
        run_id="r",
        model=model,
        gate=AutoDenyGate(),
        clock=time.monotonic if clock == "monotonic" else ticking,
    )
    planning = agent.start(None, "go").receive("go")
    planning._leave("advance")
    reads = ticking.reads
    await _planning._heard(planning, rt, tools=())
    (request,) = model.requests
    if clock == "ticking":
        # Asked, as rt.remaining(budget) asks: the clock read once (started at its first
        # read, 1.0, so the elapsed time is the reads before), none for a runtime that
        # answers itself.
        if runtime is _OwnRuntime:
            assert (ticking.reads - reads, request.timeout) == (0, 7.0)
        else:
            left = agent.budget.remaining_seconds(float(reads))
            assert (ticking.reads - reads, request.timeout) == (1, left)
    elif runtime is _OwnRuntime:
        assert request.timeout == 7.0
    elif budget is _OwnBudget:
        assert request.timeout == 5.0
    elif wall_clock is None:
        assert request.timeout is None
    else:  # the standard clock against a limit: the seconds left, below the limit
        assert request.timeout is not None
        assert 0 < request.timeout <= 60.0


# --- a reply's first call before the governor: the time taken and the call's price --------


class _LateRuntime(Runtime):
    """A runtime whose time taken is its own."""

    def elapsed(self) -> float:
        return 1000.0


@read_tool(cost=lambda args: Decimal("0.75"))
async def _priced(args: _Args) -> dict[str, str]:
    """Look a key up, at a price."""
    return {"key": args.key}


def _phase_fields(phase: Any) -> dict[str, Any]:
    named = {f.name: getattr(phase, f.name) for f in attrs.fields(type(phase))}
    named.pop("_ticket")
    named["transcript"] = tuple(named["transcript"])
    return named


@settings(max_examples=60, deadline=None)
@given(
    tool=st.sampled_from(["_lookup", "_priced"]),
    runtime=st.sampled_from([Runtime, _LateRuntime]),
    wall_clock=st.sampled_from([None, 1.5, 2.5, 4.5]),
    cost=st.sampled_from([None, "0.5", "1"]),
    tick=st.sampled_from([0.0, 1.0]),
)
def test_a_replys_call_is_ruled_on_as_from_the_queued_copy(
    tool: str, runtime: type[Runtime], wall_clock: float | None, cost: str | None, tick: float
) -> None:
    """``_take_reply`` asks the governor with the time taken and the price the plain way
    (``_take(_queued(...))``: ``rt.elapsed()``, ``tool.price(args)``) gives: the same
    phase (a run the wall clock or the cost budget stops, or the call), and the clock read
    as often; a runtime that answers ``elapsed`` itself, and a cost function, are asked."""
    budget = Budget(wall_clock=wall_clock, cost=None if cost is None else Decimal(cost))
    agent = Agent[None](name="t", tools=[_lookup, _priced], budget=budget)
    made_by: list[Any] = []
    for take in ("fast", "plain"):
        reads = [0.0]

        def clock(reads: list[float] = reads) -> float:
            reads[0] += tick if tick else 0.0
            return reads[0]

        rt = runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate(), clock=clock)
        at = agent.start(None, "go").receive("go")
        at._leave("advance")
        spent, loop = at.spent.add(tokens=3, model_calls=1), at.loop
        requests = (ToolRequest(name=tool, arguments='{"key": "k"}', id="c1"),)
        if take == "fast":
            made: Any = _batch._take_reply(at, rt, requests, spent=spent, loop=loop)
        else:
            made = _batch._take(_batch._queued(at, requests, spent=spent, loop=loop), rt)
        made_by.append((type(made), _phase_fields(made), reads[0]))
    assert made_by[0] == made_by[1]


# --- the runner's question whether a phase waits for a person -------------------------------


def test_the_phases_read_in_place_wait_as_their_classes_say() -> None:
    """The runner reads ``waiting_for`` in place for ``ToolCalling`` and ``Observing``
    (never waiting: ``Active.waiting_for`` is theirs, ``""``) and for ``Planning`` (its
    loop memory's pause, which is what ``Planning.waiting_for`` answers)."""
    base = inspect.getattr_static(_phases.Active, "waiting_for")
    for kind in (_phases.ToolCalling, _phases.Observing):
        assert inspect.getattr_static(kind, "waiting_for") is base
        assert base.fget(object.__new__(kind)) == ""
    planning = Agent[None](name="t", tools=[_lookup]).start(None, "go").receive("go")
    paused = planning.pause("a person must look")
    assert paused.waiting_for == paused.loop.paused == "a person must look"
    assert planning.waiting_for == planning.loop.paused == ""


class _WaitingCalling(_phases.ToolCalling[None]):
    """A ToolCalling subclass that waits for a person (its own answer)."""

    @property
    def waiting_for(self) -> str:
        return "a person"


class _WaitingObserving(_phases.Observing[None]):
    """An Observing subclass that waits for a person (its own answer)."""

    @property
    def waiting_for(self) -> str:
        return "a person"


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["tool_calling", "observing"])
async def test_a_subclass_that_waits_stops_the_run(which: str) -> None:
    """A subclass of a class the runner reads in place is asked: the run stops at it,
    waiting, as at any phase that waits."""
    kind = _WaitingCalling if which == "tool_calling" else _WaitingObserving
    phases = _phases.Phases[None](**{which: kind})
    agent = Agent[None](name="t", tools=[_lookup], phases=phases)
    model = ScriptedModel([tool_call("_lookup", '{"key": "k"}'), ModelReply(text="done")])
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "go")
    assert type(result.final) is kind
    assert result.final.waiting_for == "a person"
