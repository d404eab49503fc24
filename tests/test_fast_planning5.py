"""The governor's cycle check kept per line, issue 23's eleventh round, against its plain path.

- Each index line (``_Line``) keeps the run of one tool its latest actions make (``tool``,
  ``run``: every action from ``run`` on is a call of ``tool``), kept up as actions are
  recorded (``LoopState.record``'s own step and ``_Line.add``). ``before_action`` on a
  ``LoopState`` itself answers a read of that tool whose window (the last
  ``cycle_window - 1`` actions) lies within the run at once: one tool only is no cycle.
  It must give what ``LoopGovernor._checked`` (the plain path, whose ``_cycle`` reads the
  window) gives, for every state of a pool grown by runs of one tool, records of others,
  settles of every kind, copies, restored states and branches.
- The run is what the actions say: for every state whose index is a line of its own,
  the actions from ``run`` up to the state's length are calls of ``tool``.
- The window is read (``_cycle``) whenever it holds a call of another tool, or a tool
  that is not an exact ``str``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import Budget, LoopGovernor, Spend
from statemachine._actions import _SETTERS, CHUNK, ActionLog, ActionRecord
from statemachine._governor import Decision, LoopState, _Line

_IDS = ("a", "b", "c", "d", "e", "f")
_TOOLS = ("search", "lookup", "refund")
_ARGS = ("order 12", "Order 12", "order 13", "flights to oslo")


def _action(call_id: str, tool: str, args: str) -> ActionRecord:
    return ActionRecord(
        call_id=call_id,
        tool=tool,
        effect="write" if tool == "refund" else "read",
        exact=f"{tool}\x00{args}",
        key=f"{tool}:{args.lower()}",
        text=f"{tool}({args})",
    )


_pick = st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(0, 10**6))
# How a call ends (None: left pending); "ok-low" gains less than the cycle check asks.
_outcome = st.sampled_from((None, "ok", "failed", "refused", "ok-low", "ok-low", "ok-none"))
_call = st.tuples(st.sampled_from(_IDS), st.sampled_from(_TOOLS), st.sampled_from(_ARGS))
_steps = st.lists(
    st.one_of(
        # n calls of one tool in a row, each settled as drawn (or left pending).
        st.tuples(st.just("run"), _pick, _call, st.lists(_outcome, min_size=1, max_size=14)),
        st.tuples(st.just("record"), _pick, _call, st.lists(_outcome, min_size=1, max_size=1)),
        st.tuples(st.just("settle"), _pick, _call, st.lists(_outcome, min_size=1, max_size=1)),
        st.tuples(st.just("many"), _pick, _call, st.just([])),
        st.tuples(st.just("copy"), _pick, _call, st.just([])),
        st.tuples(st.just("restore"), _pick, _call, st.just([])),
    ),
    max_size=16,
)


def _settle(loop: LoopState, call_id: str, outcome: str) -> LoopState:
    if outcome.startswith("ok"):
        gain = {"ok": 0.9, "ok-low": 0.05, "ok-none": None}[outcome]
        return loop.settle(call_id, "ok", f"result of {call_id}", gain)
    return loop.settle(call_id, cast('Literal["failed", "refused"]', outcome), f"no: {call_id}")


_Step = tuple[str, int, tuple[str, str, str], list[str | None]]


def _pool(steps: list[_Step]) -> list[LoopState]:
    pool = [LoopState()]
    serial = 0
    for kind, at, (call_id, tool, args), outcomes in steps:
        loop = pool[at % len(pool)]
        if kind in ("run", "record"):
            for outcome in outcomes:
                serial += 1
                made = f"{call_id}{serial}" if kind == "run" else call_id
                loop = loop.record(_action(made, tool, f"{args} {serial}"))
                if outcome is not None:
                    loop = _settle(loop, made, outcome)
                if kind == "run":
                    pool.append(loop)
        elif kind == "many":  # past a chunk of the log
            for n in range(CHUNK + 2):
                loop = loop.record(_action(f"{call_id}-{n}", tool, f"{args} {n}"))
                loop = loop.settle(f"{call_id}-{n}", "ok", "fine", 0.9 if n % 3 else 0.0)
        elif kind == "settle":
            loop = _settle(loop, call_id, outcomes[0] or "ok")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


_GOVERNORS = (
    LoopGovernor(),
    LoopGovernor(cycle_window=4, cycle_gain=0.5),
    LoopGovernor(cycle_window=5),
    LoopGovernor(cycle_window=7, cycle_gain=0.95),
)


def _ask(governor: LoopGovernor, loop: LoopState, action: ActionRecord) -> Decision:
    return governor.before_action(
        loop, action, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
    )


def _fields(decision: Decision) -> tuple[Any, ...]:
    return (decision.verdict, decision.reason, decision.message, decision.check)


def _line(loop: LoopState) -> _Line | None:
    return loop._index


def _run_holds(loop: LoopState) -> None:
    """The line's run of one tool is what the state's actions say."""
    line = _line(loop)
    if line is None or line.parent is not None or line.size < len(loop.actions):
        return
    if line.tool is not None:
        assert all(action.tool == line.tool for action in loop.actions[line.run :])
    if line.size == len(loop.actions) and line.size:
        # The latest state of its line: the run is the longest (it starts at 0 or after
        # a call of another tool).
        assert line.tool == loop.actions[-1].tool
        assert line.run == 0 or loop.actions[line.run - 1].tool != line.tool


@settings(max_examples=120, deadline=None)
@given(_steps, st.sampled_from(_IDS))
def test_before_action_answers_as_the_plain_path(steps: list[_Step], call_id: str) -> None:
    """Every state of the pool, every governor, a new call of every tool: the same
    verdict, reason, message and check as ``_checked``; the run as the actions say."""
    pool = _pool(steps)
    for loop in pool:
        _run_holds(loop)
        for governor in _GOVERNORS:
            for tool in _TOOLS:
                action = _action(call_id, tool, "never asked")
                fast = _ask(governor, loop, action)
                plain = governor._checked(loop, action)
                assert _fields(fast) == _fields(plain)


def _spied(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The call ids ``_cycle`` (the window read) is asked about."""
    asked: list[str] = []
    original = LoopGovernor._cycle

    def cycle(self: LoopGovernor, loop: LoopState, action: ActionRecord) -> Decision:
        asked.append(action.call_id)
        return original(self, loop, action)

    monkeypatch.setattr(LoopGovernor, "_cycle", cycle)
    return asked


def _ran(loop: LoopState, tools: list[str], gain: float | None = 0.0) -> LoopState:
    for tool in tools:
        call_id = f"c{len(loop.actions)}"
        loop = loop.record(_action(call_id, tool, call_id)).settle(call_id, "ok", "r", gain)
    return loop


@pytest.mark.parametrize("window", [4, 5, 12])
def test_the_window_is_read_only_when_it_holds_another_tool(
    monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    asked = _spied(monkeypatch)
    governor = LoopGovernor(cycle_window=window)
    need = window - 1
    # The window's first action a call of another tool: read.
    loop = _ran(LoopState(), ["search"] + ["lookup"] * (need - 1))
    assert _ask(governor, loop, _action("in", "lookup", "new")).check == ""
    assert asked == ["in"]
    # One more call of the tool: the window holds it only; not read.
    loop = _ran(loop, ["lookup"])
    assert _ask(governor, loop, _action("out", "lookup", "new")).check == ""
    assert asked == ["in"]
    # A call of another tool: read; a write: never.
    assert _ask(governor, loop, _action("other", "search", "new")).check == ""
    assert _ask(governor, loop, _action("write", "refund", "new")).check == ""
    assert asked == ["in", "other"]
    # A run shorter than the window from the start of the log: not read.
    short = _ran(LoopState(), ["lookup"] * (need - 2))
    assert _ask(governor, short, _action("short", "lookup", "new")).check == ""
    # The latest action pending (a run mid-call): read only if another tool is in it.
    pending = short.record(_action("p", "lookup", "p"))
    assert _ask(governor, pending, _action("pending", "lookup", "new")).check == ""
    assert asked == ["in", "other"]
    mixed = _ran(LoopState(), ["lookup", "search"]).record(_action("p", "lookup", "p"))
    _ask(governor, mixed, _action("mixed", "lookup", "new"))
    assert asked == ["in", "other", "mixed"]


def test_a_cycle_is_still_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tools repeating, gaining nothing, after a long run of one: a cycle."""
    governor = LoopGovernor(cycle_window=6)
    loop = _ran(LoopState(), ["lookup"] * 20 + ["search", "lookup", "search", "lookup"])
    assert _ask(governor, loop, _action("x", "search", "new")).check == "cycle"
    # Gaining enough: none.
    loop = _ran(LoopState(), ["lookup"] * 20 + ["search", "lookup", "search"], gain=0.9)
    loop = _ran(loop, ["lookup"])
    loop = loop.record(_action("p", "search", "p"))  # pending: the window is read
    assert _ask(governor, loop, _action("y", "lookup", "new")).check == ""


class _Shifty(str):
    """A tool name equal to every text: not an exact ``str``, so never in a run."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = str.__hash__


def _record_of(call_id: str, tool: str) -> ActionRecord:
    """A record holding ``tool`` as it is (``ActionRecord(...)`` would make it a ``str``)."""
    made: ActionRecord = object.__new__(ActionRecord)
    values = (call_id, tool, "read", f"e-{call_id}", f"k-{call_id}", f"{tool}()", "pending", "")
    for setter, value in zip(_SETTERS, (*values, None), strict=True):
        setter(made, value)
    return made


def test_a_tool_not_of_exact_str_is_never_in_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _spied(monkeypatch)
    governor = LoopGovernor(cycle_window=4)
    loop = _ran(LoopState(), ["search", "lookup"])
    shifty = _Shifty("lookup")
    for n in range(4):
        loop = loop.record(_record_of(f"s{n}", shifty)).settle(f"s{n}", "ok", "r", 0.0)
    line = _line(loop)
    assert line is not None
    assert line.tool is None
    assert _ask(governor, loop, _action("x", "lookup", "new")).check == ""
    # Asked with such a tool: the window is read too.
    _ask(governor, _ran(LoopState(), ["lookup"] * 5), _record_of("y", shifty))
    assert asked == ["x", "y"]
    # The same records in a state made from them (its index by _Line.of and _Line.add).
    made = LoopState(actions=ActionLog(loop.actions))
    assert _ask(governor, made, _action("z", "lookup", "new")).check == ""
    assert asked == ["x", "y", "z"]
    made_line = _line(made)
    assert made_line is not None
    assert made_line.tool is None
    # Then a run of an exact str starts again after it.
    loop = _ran(loop, ["lookup"] * 3)
    line = _line(loop)
    assert line is not None
    assert (line.tool, line.run) == ("lookup", 6)


def test_the_run_through_every_way_a_line_takes_an_action() -> None:
    """``record``'s own step, ``_Line.add`` (a restored state, a branch) and ``_Line.of``
    keep the same run."""
    loop = _ran(LoopState(), ["search", "lookup", "lookup", "search", "search", "search"])
    line = _line(loop)
    assert line is not None
    assert (line.tool, line.run) == ("search", 3)
    restored = LoopState.model_validate_json(loop.model_dump_json())
    again = _ran(restored, ["search"])  # the index made by _Line.of, then added to
    made = _line(again)
    assert made is not None
    assert (made.tool, made.run) == ("search", 3)
    older = LoopState(actions=ActionLog(loop.actions[:4]))
    older = _ran(older, ["lookup"])
    older_line = _line(older)
    assert older_line is not None
    assert (older_line.tool, older_line.run) == ("lookup", 4)
    # A branch (a record on an older state of the line): its run starts at the branch.
    first = _ran(LoopState(), ["lookup"] * 3)
    _ran(first, ["lookup"])
    branch = _ran(first, ["lookup"])
    branch_line = _line(branch)
    assert branch_line is not None
    assert branch_line.parent is not None
    assert (branch_line.tool, branch_line.run) == ("lookup", 3)


# --- the budget's checks of a Budget without limits -----------------------------------------


class _OwnBudget(Budget, frozen=True):
    """A subclass: its refuse is asked (the plain path), whatever its limits."""


_limit = st.one_of(st.none(), st.integers(0, 4))
_budgets = st.tuples(
    _limit,
    st.one_of(st.none(), st.decimals(0, 4, places=2)),
    _limit,
    st.one_of(st.none(), st.floats(0.5, 4.0)),
)
_spends = st.builds(
    Spend,
    tokens=st.integers(0, 5),
    cost=st.decimals(0, 5, places=2),
    tool_calls=st.integers(0, 5),
    model_calls=st.integers(0, 5),
)


@settings(max_examples=150, deadline=None)
@given(_budgets, _spends, st.floats(0.0, 5.0), st.decimals(0, 2, places=2))
def test_the_budget_checks_answer_as_refuse(
    limits: tuple[int | None, Decimal | None, int | None, float | None],
    spent: Spend,
    elapsed: float,
    price: Decimal,
) -> None:
    """``begin_step`` and ``before_action`` with a ``Budget`` itself (no limit, or some):
    the same decision as with a subclass of the same limits, whose ``refuse`` is asked."""
    tokens, cost, tool_calls, wall_clock = limits
    fields: dict[str, Any] = {
        "tokens": tokens,
        "cost": cost,
        "tool_calls": tool_calls,
        "wall_clock": wall_clock,
    }
    budget, own = Budget(**fields), _OwnBudget(**fields)
    governor = LoopGovernor()
    loop = _ran(LoopState(), ["lookup"])
    action = _action("new", "lookup", "new")
    for max_steps in (2, 10):
        step: dict[str, Any] = {
            "ctx": None,
            "spent": spent,
            "elapsed": elapsed,
            "max_steps": max_steps,
            "max_tool_iterations": 3,
        }
        fast = governor.begin_step(loop, budget=budget, **step)
        plain = governor.begin_step(loop, budget=own, **step)
        assert _fields(fast) == _fields(plain)
    asked: dict[str, Any] = {"spent": spent, "elapsed": elapsed, "price": price}
    fast = governor.before_action(loop, action, budget=budget, **asked)
    plain = governor.before_action(loop, action, budget=own, **asked)
    assert _fields(fast) == _fields(plain)


def test_a_budget_without_limits_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    original = Budget.refuse

    def refuse(self: Budget, spent: Spend, **words: Any) -> str | None:
        asked.append(words["action"])
        return original(self, spent, **words)

    monkeypatch.setattr(Budget, "refuse", refuse)
    governor, loop, action = LoopGovernor(), LoopState(), _action("n", "lookup", "n")
    step: dict[str, Any] = {"ctx": None, "spent": Spend(), "elapsed": 0.0, "max_steps": 5}
    ruling: dict[str, Any] = {"spent": Spend(), "elapsed": 0.0, "price": Decimal(1)}
    assert governor.begin_step(loop, budget=Budget(), max_tool_iterations=None, **step).check == ""
    assert governor.before_action(loop, action, budget=Budget(), **ruling).check == ""
    assert asked == []
    # A limit reached, or a subclass: asked.
    over: dict[str, Any] = {**ruling, "spent": Spend(tool_calls=1)}
    assert governor.before_action(loop, action, budget=Budget(tool_calls=1), **over).check == (
        "budget"
    )
    assert asked == ["calling lookup"]
    governor.begin_step(loop, budget=_OwnBudget(), max_tool_iterations=None, **step)
    governor.before_action(loop, action, budget=_OwnBudget(), **ruling)
    assert asked[1:] == ["the next model call", "calling lookup"]


# --- the planning step's reads of the runtime, the tools and the governor -----------------


def _planned(clock: Any, budget: Budget, governor: LoopGovernor | None = None) -> Any:
    import anyio

    from statemachine import Agent, Runner
    from statemachine.testing import AutoDenyGate, ScriptedModel, reply

    agent = Agent[None](name="a", budget=budget, governor=governor or LoopGovernor())
    model = ScriptedModel([reply("Hello.")])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), clock=clock)
    return anyio.run(runner.run, None, "Hi."), model


def test_the_planning_step_reads_the_runs_own_clock() -> None:
    """The step's elapsed time is the clock's reading less the run's start (a run that
    started at 1,000 seconds on its clock has used none of a 10-second budget)."""
    result, model = _planned(lambda: 1000.0, Budget(wall_clock=10))
    assert result.final.answer == "Hello."
    assert model.requests[0].tools == ()  # the agent's tools' schemas (it has none)
    readings = iter([1000.0, 1000.0, 1020.0])
    late, _ = _planned(lambda: next(readings, 1020.0), Budget(wall_clock=10))
    assert late.final.reason.startswith("wall-clock budget exhausted: 20.00s of 10s"), (
        late.final.reason
    )


def test_a_run_past_its_baseline_is_still_flagged() -> None:
    """The governor's flag is asked when it has a baseline: a run past it is flagged."""
    flagged, _ = _planned(
        lambda: 0.0, Budget(), LoopGovernor(baseline_steps=0.1, baseline_factor=1.0)
    )
    assert [flag.split(":")[0] for flag in flagged.final.loop.flags] == ["long_run"]
    plain, _ = _planned(lambda: 0.0, Budget())
    assert plain.final.loop.flags == ()
