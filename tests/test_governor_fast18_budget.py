# pyright: reportPrivateUsage=false
"""The governor told the budget the runner found with no limit: ``begin_step`` and
``before_action`` take a private ``_free``, and for that very object (by identity, still a
``Budget`` itself) do not read its four limits again; ``_plan`` and ``_batch`` tell the
library's own methods only (a subclass's, a patched method, are called as before, without
it); ``_take_reply`` reads a ``ToolRequest`` itself's arguments and id once.

Checked against the plain way: the governor's answers with ``_free`` given (the budget
itself, another equal budget, a subclass, ``None``) are those without it for every budget
the runner hands as free and for every budget it does not; a whole run reads the four
limits of a ``Budget()`` only at the drive's start, however many calls it makes; runs
with a patched or a subclass's methods call them exactly as before (no ``_free``); a
``ToolRequest`` subclass reaching ``_take_reply`` has its fields read as before.
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
    ActionRecord,
    Agent,
    Budget,
    LoopGovernor,
    LoopState,
    ModelReply,
    ReadCall,
    Runner,
    Runtime,
    Spend,
    ToolRequest,
    read_tool,
)
from statemachine import _batch as batch_module
from statemachine import _runner as runner_module
from statemachine._planning import _plan
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class KeyArgs(BaseModel):
    key: str


@read_tool
async def look(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


class RefusingBudget(Budget, frozen=True):
    """No limit, yet refuses every call: the plain way asks its refuse."""

    def refuse(self, spent: Any, **kwargs: Any) -> str | None:
        return "refused by the subclass"


class LateBudget(Budget, frozen=True):
    """No limit, yet refuses the second tool call on: the plain way asks its refuse."""

    def refuse(self, spent: Any, **kwargs: Any) -> str | None:
        if kwargs.get("tool_calls") and spent.tool_calls >= 1:
            return "refused by the subclass"
        return super().refuse(spent, **kwargs)


_LIMITS = ("wall_clock", "tool_calls", "tokens", "cost")


def _budgets() -> st.SearchStrategy[Budget]:
    return st.one_of(
        st.just(Budget()),
        st.builds(Budget, tool_calls=st.integers(0, 3)),
        st.builds(Budget, tokens=st.integers(0, 60)),
        st.builds(Budget, cost=st.decimals(0, 1, places=2)),
        st.builds(Budget, wall_clock=st.sampled_from([0.5, 1e6])),
        st.just(RefusingBudget()),
        st.just(LateBudget()),
    )


def _action(governor: LoopGovernor, key: str) -> ActionRecord:
    agent = Agent[None](name="gov18", tools=[look], budget=Budget())
    call = agent.tools.route("look", f'{{"key": "{key}"}}')
    assert isinstance(call, ReadCall)
    return governor.action(call, f'{{"key": "{key}"}}', "c1")


def _free_for(budget: Budget, which: str) -> object:
    return {
        "itself": budget,
        "another": Budget(),
        "copy": budget.model_copy(),
        "subclass": RefusingBudget(),
        "none": None,
    }[which]


def _handed(budget: Budget, which: str) -> bool:
    """Whether the runner could hand ``_free_for(budget, which)`` with ``budget``."""
    return which != "itself" or (type(budget) is Budget and budget == Budget())


_SPENT = st.builds(
    Spend,
    model_calls=st.integers(0, 5),
    tool_calls=st.integers(0, 5),
    tokens=st.integers(0, 80),
    cost=st.decimals(0, 2, places=2),
)
_WHICH = st.sampled_from(["itself", "another", "copy", "subclass", "none"])


@settings(max_examples=150, deadline=None)
@given(_budgets(), _WHICH, _SPENT, st.floats(0, 10), st.sampled_from([None, 2]))
def test_the_governor_told_free_answers_as_the_plain_way(
    budget: Budget, which: str, spent: Spend, elapsed: float, iterations: int | None
) -> None:
    if not _handed(budget, which):
        return
    free = _free_for(budget, which)
    governor = LoopGovernor()
    loop = LoopState()
    step: dict[str, Any] = {
        "ctx": None,
        "spent": spent,
        "budget": budget,
        "elapsed": elapsed,
        "max_steps": 4,
        "max_tool_iterations": iterations,
    }
    assert governor.begin_step(loop, **step, _free=free) == governor.begin_step(loop, **step)
    action = _action(governor, "k")
    asked: dict[str, Any] = {
        "spent": spent,
        "budget": budget,
        "elapsed": elapsed,
        "price": Decimal("0.5"),
    }
    assert governor.before_action(loop, action, **asked, _free=free) == (
        governor.before_action(loop, action, **asked)
    )


@pytest.mark.parametrize("which", ["another", "copy", "subclass", "none"])
def test_a_limit_is_read_unless_the_budget_is_the_free_one(which: str) -> None:
    budget = Budget(tool_calls=0, wall_clock=0.5)
    free = _free_for(budget, which)
    governor = LoopGovernor()
    loop = LoopState()
    spent = Spend(tool_calls=1)
    step: dict[str, Any] = {"ctx": None, "spent": spent, "elapsed": 1.0, "max_steps": 9}
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step, _free=free)
    assert begun.check == "budget"
    asked: dict[str, Any] = {"spent": spent, "elapsed": 1.0, "price": Decimal(0)}
    ruled = governor.before_action(loop, _action(governor, "k"), budget=budget, **asked, _free=free)
    assert ruled.check == "budget"
    # The very object (which the runner hands only when it has no limit) is not read.
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step, _free=budget)
    assert begun.check != "budget"


def test_a_subclass_handed_as_free_is_asked() -> None:
    budget = RefusingBudget()
    governor = LoopGovernor()
    loop = LoopState()
    step: dict[str, Any] = {"ctx": None, "spent": Spend(), "elapsed": 0.0, "max_steps": 9}
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step, _free=budget)
    assert begun.reason == "refused by the subclass"
    asked: dict[str, Any] = {"spent": Spend(), "elapsed": 0.0, "price": Decimal(0)}
    ruled = governor.before_action(
        loop, _action(governor, "k"), budget=budget, **asked, _free=budget
    )
    assert ruled.reason == "refused by the subclass"


# -- whole runs ----------------------------------------------------------------------------


def _turns(keys: list[str]) -> list[ModelReply]:
    return [
        *(tool_call("look", f'{{"key": "{key}"}}', tokens=7, cost=Decimal("0.10")) for key in keys),
        reply("done"),
    ]


class _NotABudget:
    pass


def _run(
    budget: Budget, keys: list[str], *, plain: bool = False, governor: Any = None
) -> tuple[Any, ...]:
    extra = {} if governor is None else {"governor": governor}
    agent = Agent[None](name="gov18run", tools=[look], budget=budget, **extra)
    model = ScriptedModel(_turns(keys))

    async def go() -> Any:
        return await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "go")

    saved = getattr(runner_module, "Budget")  # noqa: B009 - not exported
    if plain:  # free never found: every call reads the budget
        setattr(runner_module, "Budget", _NotABudget)  # noqa: B010
    try:
        result = anyio.run(go)
    finally:
        setattr(runner_module, "Budget", saved)  # noqa: B010
    final = result.final
    return (result.path, final.kind, final.step, final.spent, getattr(final, "reason", None))


_KEYS = st.lists(st.text("abc", min_size=1, max_size=3), max_size=5, unique=True)


@settings(max_examples=60, deadline=None)
@given(_budgets(), _KEYS)
def test_a_run_under_any_budget_is_the_plain_ways(budget: Budget, keys: list[str]) -> None:
    assert _run(budget, keys) == _run(budget, keys, plain=True)


def _limit_reads(monkeypatch: pytest.MonkeyPatch, keys: list[str]) -> int:
    """How many times a run under ``Budget()`` reads its four limits."""
    reads: list[str] = []
    own = Budget.__getattribute__

    def counted(self: Budget, name: str) -> Any:
        if name in _LIMITS and type(self) is Budget:
            reads.append(name)
        return own(self, name)

    with monkeypatch.context() as patch:
        patch.setattr(Budget, "__getattribute__", counted)
        _run(Budget(), keys)
    return len(reads)


def test_a_run_reads_a_free_budgets_limits_once_a_drive(monkeypatch: pytest.MonkeyPatch) -> None:
    one = _limit_reads(monkeypatch, ["a"])
    many = _limit_reads(monkeypatch, ["a", "b", "c", "d", "e"])
    assert one == many == 4  # the runner's reads at the drive's start


def _spied(monkeypatch: pytest.MonkeyPatch, name: str, seen: list[dict[str, Any]]) -> None:
    own = getattr(LoopGovernor, name)

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return own(self, *args, **kwargs)

    monkeypatch.setattr(LoopGovernor, name, spy)


@pytest.mark.parametrize("name", ["begin_step", "before_action"])
@pytest.mark.parametrize("budget", [Budget(), Budget(tool_calls=9), LateBudget()])
def test_a_patched_method_is_called_as_before(
    name: str, budget: Budget, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []
    plain = _run(budget, ["a", "b"])
    _spied(monkeypatch, name, seen)
    assert _run(budget, ["a", "b"]) == plain
    assert seen
    assert all("_free" not in kwargs for kwargs in seen)


class _Told:
    """A governor of another class (duck-typed), its methods without ``_free``."""

    def __init__(self) -> None:
        self.own = LoopGovernor()
        self.seen: list[str] = []

    def begin_step(
        self,
        loop: LoopState,
        *,
        ctx: Any,
        spent: Spend,
        budget: Budget,
        elapsed: float,
        max_steps: int,
        max_tool_iterations: int | None,
    ) -> Any:
        self.seen.append("begin_step")
        return self.own.begin_step(
            loop,
            ctx=ctx,
            spent=spent,
            budget=budget,
            elapsed=elapsed,
            max_steps=max_steps,
            max_tool_iterations=max_tool_iterations,
        )

    def before_action(
        self,
        loop: LoopState,
        action: ActionRecord,
        *,
        spent: Spend,
        budget: Budget,
        elapsed: float,
        price: Any,
    ) -> Any:
        self.seen.append("before_action")
        return self.own.before_action(
            loop, action, spent=spent, budget=budget, elapsed=elapsed, price=price
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.own, name)


def test_another_governors_methods_are_called_as_before() -> None:
    told = _Told()
    agent = Agent[None](name="gov18told", tools=[look], budget=Budget())
    object.__setattr__(agent, "governor", told)
    model = ScriptedModel(_turns(["a", "b"]))

    async def go() -> Any:
        return await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "go")

    result = anyio.run(go)
    assert result.final.kind == "Done"
    assert told.seen.count("begin_step") == 3
    assert told.seen.count("before_action") == 2


# -- _take_reply's reads of the request ----------------------------------------------------


class CountingRequest(ToolRequest, frozen=True):
    """A subclass: its fields read as before (counted)."""

    def __getattribute__(self, name: str) -> Any:
        if name in ("name", "arguments", "id"):
            _READS.append(name)
        return super().__getattribute__(name)


_READS: list[str] = []


def _taken(monkeypatch: pytest.MonkeyPatch, cls: type[ToolRequest], arguments: str) -> Any:
    made = cls(name="look", arguments=arguments, id="c9")
    with monkeypatch.context() as patch:

        def with_ids(loop: object, step: object, requests: object) -> tuple[ToolRequest, ...]:
            return (made,)

        patch.setattr(batch_module, "_with_ids", with_ids)
        agent = Agent[None](name="gov18take", tools=[look], budget=Budget())
        planning = agent.start(None, "go").receive("go")
        model = ScriptedModel([tool_call("look", arguments)])
        rt = Runtime(run_id="r18", model=model, gate=AutoDenyGate())
        _READS.clear()
        after = anyio.run(_plan, planning, rt, agent.budget)
        reads = list(_READS)
    return after, reads


@pytest.mark.parametrize("arguments", ['{"key": "a"}', '{"nokey": 1}'])
def test_a_request_subclass_is_read_as_before(
    arguments: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    exact, none = _taken(monkeypatch, ToolRequest, arguments)
    got, reads = _taken(monkeypatch, CountingRequest, arguments)
    assert none == []
    assert type(got) is type(exact)
    assert got.loop == exact.loop
    assert len(got.transcript) == len(exact.transcript)
    if type(got).__name__ == "ToolCalling":
        assert got.call_id == exact.call_id == "c9"
        # The plain way's reads: name and arguments for the route, arguments and id for
        # the action, id for the phase.
        assert reads == ["name", "arguments", "arguments", "id", "id"]
    else:
        assert reads[:3] == ["name", "arguments", "arguments"]
