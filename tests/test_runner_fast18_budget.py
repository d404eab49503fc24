# pyright: reportPrivateUsage=false
"""The runner reads the agent's budget once a drive: a ``Budget`` itself with no limit is
handed to ``_execute`` and ``_plan`` as ``free``, and for that very object (by identity,
still a ``Budget`` itself) they do not read its four limits again; ``_plan`` reads a
``ModelReply`` itself's ``tool_calls`` once.

Checked against the plain way (``free`` never found: the runner's ``Budget`` replaced by
another class, so ``_execute`` and ``_heard`` read the limits each time): runs under
budgets with and without limits, of ``Budget`` and of a subclass, give the same path,
final phase (kind, step, spend, reason) and the same requests' timeouts (``None`` exactly
when the plain way's is); ``_execute`` and ``_plan`` called with a ``free`` that is
another budget, or a subclass's, read and apply the budget as the plain way does; a
subclass of ``ModelReply`` has its ``tool_calls`` read as before, twice.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    ModelReply,
    ReadCall,
    Runner,
    Runtime,
    ToolCalling,
    read_tool,
)
from statemachine import _runner as runner_module
from statemachine._calling import _execute
from statemachine._planning import _plan
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class KeyArgs(BaseModel):
    key: str


@read_tool
async def look(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


class RefusingBudget(Budget, frozen=True):
    """No limit, yet refuses the n-th tool call on: the plain way asks its refuse."""

    def refuse(self, spent: Any, **kwargs: Any) -> str | None:
        if kwargs.get("tool_calls") and spent.tool_calls >= 1:
            return "refused by the subclass"
        return super().refuse(spent, **kwargs)


def _budgets() -> st.SearchStrategy[Budget]:
    return st.one_of(
        st.just(Budget()),
        st.builds(Budget, tool_calls=st.integers(0, 4)),
        st.builds(Budget, tokens=st.integers(0, 60)),
        st.builds(Budget, cost=st.decimals(0, 1, places=2)),
        st.builds(Budget, wall_clock=st.just(1e6)),
        st.just(RefusingBudget()),
    )


def _turns(keys: list[str]) -> list[ModelReply]:
    return [
        *(tool_call("look", f'{{"key": "{key}"}}', tokens=7, cost=Decimal("0.10")) for key in keys),
        reply("done"),
    ]


class _NotABudget:
    pass


def _run(budget: Budget, keys: list[str], *, plain: bool) -> Any:
    agent = Agent[None](name="budget18run", tools=[look], budget=budget)
    model = ScriptedModel(_turns(keys))

    async def go() -> Any:
        return await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "go")

    saved = getattr(runner_module, "Budget")  # noqa: B009 - not exported
    if plain:
        setattr(runner_module, "Budget", _NotABudget)  # noqa: B010
    try:
        result = anyio.run(go)
    finally:
        setattr(runner_module, "Budget", saved)  # noqa: B010
    final = result.final
    return (
        result.path,
        final.kind,
        final.step,
        final.spent,
        getattr(final, "reason", None),
        [request.timeout is None for request in model.requests],
    )


_KEYS = st.lists(st.text("abc", min_size=1, max_size=3), max_size=5, unique=True)


@settings(max_examples=60, deadline=None)
@given(_budgets(), _KEYS)
def test_a_run_under_any_budget_is_the_plain_ways(budget: Budget, keys: list[str]) -> None:
    assert _run(budget, keys, plain=False) == _run(budget, keys, plain=True)


@pytest.mark.parametrize(
    "budget", [Budget(), Budget(tool_calls=9), Budget(wall_clock=1e6), RefusingBudget()]
)
def test_free_is_the_budget_itself_only_when_it_has_no_limit(
    budget: Budget, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[object] = []
    execute, plan = getattr(runner_module, "_execute"), getattr(runner_module, "_plan")  # noqa: B009

    async def spy_execute(calling: Any, rt: Any, free: object = None) -> Any:
        handed.append(free)
        return await execute(calling, rt, free)

    async def spy_plan(planning: Any, rt: Any, free: object = None) -> Any:
        handed.append(free)
        return await plan(planning, rt, free)

    monkeypatch.setattr(runner_module, "_execute", spy_execute)
    monkeypatch.setattr(runner_module, "_plan", spy_plan)
    _run(budget, ["a", "b"], plain=False)
    free = budget if type(budget) is Budget and budget == Budget() else None
    assert handed
    assert all(item is free for item in handed)


def test_a_limit_still_refuses() -> None:
    fast = _run(Budget(tool_calls=1), ["a", "b", "c"], plain=False)
    assert fast[1] == "Failed"
    fast = _run(RefusingBudget(), ["a", "b"], plain=False)
    assert fast[1] == "Failed"
    assert "subclass" in str(fast[4])


# -- _execute and _plan with a free budget that is not theirs -----------------------------


def _calling(budget: Budget) -> ToolCalling[None]:
    agent = Agent[None](name="budget18call", tools=[look], budget=budget)
    planning = agent.start(None, "go").receive("go")
    call = agent.tools.route("look", '{"key": "k"}')
    assert isinstance(call, ReadCall)
    return planning.call_tool(call, raw_arguments='{"key": "k"}')


def _executed(budget: Budget, free: object) -> Any:
    calling = _calling(budget)
    rt = Runtime(run_id="r18", model=ScriptedModel([]), gate=AutoDenyGate())
    calling._leave("execute")
    after = anyio.run(_execute, calling, rt, free)
    return (after.kind, after.step, after.spent, getattr(after, "reason", None))


_LIMITED = st.one_of(
    st.builds(Budget, tool_calls=st.integers(0, 2)),
    st.builds(Budget, wall_clock=st.just(1e6)),
    st.builds(Budget, cost=st.decimals(0, 1, places=2)),
    st.just(RefusingBudget()),
)


@settings(max_examples=40, deadline=None)
@given(_LIMITED, st.sampled_from(["another", "subclass", "none", "itself"]))
def test_execute_reads_a_budget_not_its_free_one(budget: Budget, which: str) -> None:
    free: object = {
        "another": Budget(),
        "subclass": RefusingBudget(),
        "none": None,
        "itself": budget,
    }[which]
    plain = _executed(budget, None)
    if which == "itself" and type(budget) is Budget and budget != Budget():
        return  # never handed: the runner finds a budget with a limit not free
    assert _executed(budget, free) == plain


def test_execute_asks_a_subclass_handed_as_free() -> None:
    budget = RefusingBudget()
    calling = _calling(budget)
    object.__setattr__(calling, "spent", calling.spent.add(tool_calls=1))
    rt = Runtime(run_id="r18", model=ScriptedModel([]), gate=AutoDenyGate())
    calling._leave("execute")
    after = anyio.run(_execute, calling, rt, budget)
    assert after.kind == "Failed"


def _planned(budget: Budget, free: object, turn: ModelReply) -> Any:
    agent = Agent[None](name="budget18plan", tools=[look], budget=budget)
    planning = agent.start(None, "go").receive("go")
    model = ScriptedModel([turn])
    rt = Runtime(run_id="r18", model=model, gate=AutoDenyGate())
    after = anyio.run(_plan, planning, rt, free)
    return (
        type(after).__name__,
        after.step,
        after.spent,
        [request.timeout is None for request in model.requests],
    )


@settings(max_examples=40, deadline=None)
@given(
    _LIMITED,
    st.sampled_from(["another", "subclass", "none"]),
    st.sampled_from(["call", "done", "length"]),
)
def test_plan_reads_a_budget_not_its_free_one(budget: Budget, which: str, kind: str) -> None:
    free: object = {"another": Budget(), "subclass": RefusingBudget(), "none": None}[which]
    turn = _turn(kind, ModelReply)
    assert _planned(budget, free, turn) == _planned(budget, None, turn)


def test_plan_with_its_free_budget_gives_no_timeout() -> None:
    budget = Budget()
    assert _planned(budget, budget, _turn("call", ModelReply))[3] == [True]
    limited = Budget(wall_clock=1e6)
    assert _planned(limited, Budget(), _turn("call", ModelReply))[3] == [False]


# -- the reply's tool_calls read once for a ModelReply itself ---------------------------


class CountingReply(ModelReply, frozen=True):
    """A subclass: its tool_calls read as before (counted)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "tool_calls":
            _READS.append(name)
        return super().__getattribute__(name)


_READS: list[str] = []


def _turn(kind: str, cls: type[ModelReply]) -> ModelReply:
    made = tool_call("look", '{"key": "k"}') if kind != "done" else reply("done")
    fields = dict(made.__dict__)
    if kind == "length":
        fields["finish_reason"] = "length"
    return cls.model_validate(fields)


@pytest.mark.parametrize("kind", ["call", "done", "length"])
def test_a_reply_subclass_is_read_as_before(kind: str) -> None:
    _READS.clear()
    got = _planned(Budget(), None, _turn(kind, CountingReply))
    exact = _planned(Budget(), None, _turn(kind, ModelReply))
    assert got[:3] == exact[:3]
    # The plain way's reads, as before: the test, then the hand-over (a call) or
    # _route's two (an answer, a reply cut at its length).
    expected = ["tool_calls"] * (2 if kind == "call" else 3)
    assert expected == _READS


@pytest.mark.parametrize("kind", ["call", "done", "length"])
def test_a_reply_itself_goes_where_the_plain_way_goes(kind: str) -> None:
    got = _planned(Budget(), None, _turn(kind, ModelReply))
    expected = {"call": "ToolCalling", "done": "Responding", "length": None}[kind]
    if expected is not None:
        assert got[0] == expected
    assert got[0] != "ToolCalling" or kind == "call"
