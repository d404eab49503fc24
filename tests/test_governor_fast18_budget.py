# pyright: reportPrivateUsage=false
"""The governor's free budget: the library's own ``begin_step`` and ``before_action`` do
not read the four limits of the very ``Budget`` a drive found with no limit at its start
(``_governor._free_budget``, by identity, still a ``Budget`` itself), kept there only by
``_hold_free``, which checks it (``_plan`` hands it the runner's ``free``, or forgets the
budget when the runner found it limited); every caller calls the governor once, in one
form (no private keyword, no test of the governor's class or method), so a subclass's,
a patched or a duck-typed governor's methods are called as before; ``_take_reply`` reads a
``ToolRequest`` itself's arguments and id once.

Checked against the plain way (the slot empty): the governor's answers with whatever
``_hold_free`` was handed (the budget itself, another equal budget, a copy, a subclass,
``None``) are those without it, for budgets with and without limits; a subclass, even put
in the slot by hand, is asked; a whole run reads the four limits of a ``Budget()`` a fixed
number of times however many calls it makes; a budget found limited at a drive's start is
read even if an earlier drive kept it; runs under different budgets interleaved on one
event loop or in threads each get their own decisions (the limited one stops at its
limit); runs with a patched, a subclass's or a duck-typed governor's methods call them
exactly as before; a ``ToolRequest`` subclass reaching ``_take_reply`` is read as before.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    ActionRecord,
    Agent,
    Budget,
    Decision,
    LoopGovernor,
    LoopState,
    ModelReply,
    ReadCall,
    Runner,
    Runtime,
    Spend,
    ToolRequest,
    Verdict,
    read_tool,
)
from statemachine import _batch as batch_module
from statemachine import _governor as governor_module
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


@pytest.fixture(autouse=True)
def _no_free_budget() -> Any:
    """Each test starts and ends with the slot empty (the plain way)."""
    governor_module._free_budget = None
    yield
    governor_module._free_budget = None


def _held(free: object, budget: object) -> object:
    """What the slot holds once ``_hold_free(free, budget)`` ran on an empty slot."""
    governor_module._free_budget = None
    governor_module._hold_free(free, budget)
    return governor_module._free_budget


_SPENT = st.builds(
    Spend,
    model_calls=st.integers(0, 5),
    tool_calls=st.integers(0, 5),
    tokens=st.integers(0, 80),
    cost=st.decimals(0, 2, places=2),
)
_WHICH = st.sampled_from(["itself", "another", "copy", "subclass", "none"])


def _answers(
    governor: LoopGovernor, budget: Budget, spent: Spend, elapsed: float, iterations: int | None
) -> tuple[Any, Any]:
    loop = LoopState()
    step: dict[str, Any] = {
        "ctx": None,
        "spent": spent,
        "budget": budget,
        "elapsed": elapsed,
        "max_steps": 4,
        "max_tool_iterations": iterations,
    }
    asked: dict[str, Any] = {
        "spent": spent,
        "budget": budget,
        "elapsed": elapsed,
        "price": Decimal("0.5"),
    }
    return (
        governor.begin_step(loop, **step),
        governor.before_action(loop, _action(governor, "k"), **asked),
    )


@settings(max_examples=150, deadline=None)
@given(_budgets(), _WHICH, _SPENT, st.floats(0, 10), st.sampled_from([None, 2]))
def test_the_governor_with_a_free_budget_answers_as_the_plain_way(
    budget: Budget, which: str, spent: Spend, elapsed: float, iterations: int | None
) -> None:
    governor = LoopGovernor()
    governor_module._free_budget = None
    plain = _answers(governor, budget, spent, elapsed, iterations)
    free = _free_for(budget, which)
    kept = _held(free, budget)
    # Only a Budget itself with no limit is kept, and only the object handed.
    if type(free) is Budget and free == Budget():
        assert kept is free
    else:
        assert kept is None
    assert _answers(governor, budget, spent, elapsed, iterations) == plain
    # A slot kept by another run (another Budget()) changes nothing either.
    governor_module._hold_free(Budget(), None)
    assert _answers(governor, budget, spent, elapsed, iterations) == plain


@pytest.mark.parametrize("which", ["itself", "another", "copy", "subclass", "none"])
def test_a_limit_is_read_unless_the_budget_is_the_free_one(which: str) -> None:
    budget = Budget(tool_calls=0, wall_clock=0.5)
    assert _held(_free_for(budget, which), budget) is not budget
    governor = LoopGovernor()
    loop = LoopState()
    spent = Spend(tool_calls=1)
    step: dict[str, Any] = {"ctx": None, "spent": spent, "elapsed": 1.0, "max_steps": 9}
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step)
    assert begun.check == "budget"
    asked: dict[str, Any] = {"spent": spent, "elapsed": 1.0, "price": Decimal(0)}
    ruled = governor.before_action(loop, _action(governor, "k"), budget=budget, **asked)
    assert ruled.check == "budget"
    # The very object in the slot (which _hold_free never keeps: put there by hand) is not
    # read: the slot is what the governor's own methods go by.
    governor_module._free_budget = budget
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step)
    assert begun.check != "budget"
    ruled = governor.before_action(loop, _action(governor, "k"), budget=budget, **asked)
    assert ruled.check != "budget"


def test_the_writer_forgets_a_budget_found_limited() -> None:
    budget = Budget()
    assert _held(budget, budget) is budget
    governor_module._hold_free(None, Budget())  # another budget found limited: kept
    assert governor_module._free_budget is budget
    governor_module._hold_free(None, budget)  # this one found limited: forgotten
    assert governor_module._free_budget is None
    governor_module._free_budget = budget
    governor_module._hold_free(RefusingBudget(), budget)  # not free: forgotten
    assert governor_module._free_budget is None


def test_a_subclass_in_the_slot_is_asked() -> None:
    budget = RefusingBudget()
    assert _held(budget, budget) is None
    governor_module._free_budget = budget  # by hand: _hold_free never keeps it
    governor = LoopGovernor()
    loop = LoopState()
    step: dict[str, Any] = {"ctx": None, "spent": Spend(), "elapsed": 0.0, "max_steps": 9}
    begun = governor.begin_step(loop, budget=budget, max_tool_iterations=None, **step)
    assert begun.reason == "refused by the subclass"
    asked: dict[str, Any] = {"spent": Spend(), "elapsed": 0.0, "price": Decimal(0)}
    ruled = governor.before_action(loop, _action(governor, "k"), budget=budget, **asked)
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
    # The runner's reads at the drive's start, and _hold_free's check as it keeps it.
    assert one == many == 8


def test_a_budget_found_limited_is_read_though_a_drive_kept_it() -> None:
    """The slot is the drive's finding: a budget an earlier drive kept, found limited at
    this drive's start (its frozen fields written by hand in between), is read."""
    budget = Budget()
    _run(budget, ["a"])
    assert governor_module._free_budget is budget
    object.__setattr__(budget, "tool_calls", 0)  # by hand: a frozen model's field rewritten
    altered = _run(budget, ["a", "b"])
    plain = _run(Budget(tool_calls=0), ["a", "b"])
    assert altered == plain
    assert altered[1] == "Failed"


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
    keys = {"spent", "budget", "elapsed"}
    keys |= {"ctx", "max_steps", "max_tool_iterations"} if name == "begin_step" else {"price"}
    assert all(set(kwargs) == keys for kwargs in seen)
    assert all(kwargs["budget"] is budget for kwargs in seen)


class _Stricter(LoopGovernor):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """A subclass whose methods refuse from the second tool call on, whatever the budget."""

    def begin_step(self, loop: LoopState, **kwargs: Any) -> Any:
        _CALLED.append(("begin_step", tuple(sorted(kwargs))))
        return super().begin_step(loop, **kwargs)

    def before_action(self, loop: LoopState, action: ActionRecord, **kwargs: Any) -> Any:
        _CALLED.append(("before_action", tuple(sorted(kwargs))))
        if kwargs["spent"].tool_calls >= 1:
            return Decision(Verdict.ABORT, "refused by the governor subclass", check="budget")
        return super().before_action(loop, action, **kwargs)


_CALLED: list[tuple[str, tuple[str, ...]]] = []


@pytest.mark.parametrize("budget", [Budget(), Budget(tool_calls=9)])
def test_a_governor_subclass_is_called_as_before(budget: Budget) -> None:
    _CALLED.clear()
    fast = _run(budget, ["a", "b", "c"], governor=_Stricter())
    called = list(_CALLED)
    _CALLED.clear()
    plain = _run(budget, ["a", "b", "c"], governor=_Stricter(), plain=True)
    assert fast == plain
    assert called == _CALLED
    assert fast[1] == "Failed"
    assert fast[4] == "refused by the governor subclass"
    assert ("before_action", ("budget", "elapsed", "price", "spent")) in called


# -- runs under different budgets at once ------------------------------------------------


@read_tool
async def wait(args: KeyArgs) -> dict[str, object]:
    """Look a key up, letting the other runs go first."""
    await anyio.lowlevel.checkpoint()
    await anyio.lowlevel.checkpoint()
    return {"key": args.key}


def _waiting_turns(keys: list[str]) -> list[ModelReply]:
    return [
        *(tool_call("wait", f'{{"key": "{key}"}}', tokens=7, cost=Decimal("0.10")) for key in keys),
        reply("done"),
    ]


async def _drive(budget: Budget, keys: list[str]) -> tuple[Any, ...]:
    agent = Agent[None](name="gov19both", tools=[wait], budget=budget)
    model = ScriptedModel(_waiting_turns(keys))
    result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "go")
    final = result.final
    return (result.path, final.kind, final.step, final.spent, getattr(final, "reason", None))


def _alone(budget: Budget, keys: list[str]) -> tuple[Any, ...]:
    """A run by itself, from an empty slot (what no other run's budget touched)."""
    governor_module._free_budget = None
    return anyio.run(_drive, budget, keys)


_INTERLEAVED = [
    Budget(),
    Budget(tool_calls=1),
    Budget(),
    Budget(tokens=10),
    Budget(cost=Decimal("0.15")),
    RefusingBudget(),
    LateBudget(),
]


def test_runs_interleaved_on_one_loop_keep_their_own_limits() -> None:
    keys = ["a", "b", "c", "d"]
    alone = [_alone(budget, keys) for budget in _INTERLEAVED]
    together: list[Any] = [None] * len(_INTERLEAVED)

    async def both() -> None:
        async def one(index: int) -> None:
            together[index] = await _drive(_INTERLEAVED[index], keys)

        async with anyio.create_task_group() as group:
            for index in range(len(_INTERLEAVED)):
                group.start_soon(one, index)

    anyio.run(both)
    assert together == alone
    assert alone[0][1] == "Done"
    assert alone[1][1] == "Failed"  # the limited run stops at its one tool call
    assert alone[1][3].tool_calls == 1


def test_a_free_and_a_limited_run_in_one_task_group() -> None:
    free, limited = Budget(), Budget(tool_calls=1)
    keys = ["a", "b", "c"]
    got: dict[str, Any] = {}

    async def both() -> None:
        async def run(name: str, budget: Budget) -> None:
            got[name] = await _drive(budget, keys)

        async with anyio.create_task_group() as group:
            group.start_soon(run, "free", free)
            group.start_soon(run, "limited", limited)

    anyio.run(both)
    assert got["free"][1] == "Done"
    assert got["free"][3].tool_calls == 3
    assert got["limited"][1] == "Failed"
    assert got["limited"][3].tool_calls == 1
    assert got["limited"] == _alone(Budget(tool_calls=1), keys)
    assert got["free"] == _alone(Budget(), keys)


def test_runs_in_threads_keep_their_own_limits() -> None:
    keys = ["a", "b", "c"]
    alone = [_alone(budget, keys) for budget in _INTERLEAVED]
    results: dict[tuple[int, int], Any] = {}

    def worker(index: int) -> None:
        for turn in range(6):
            results[index, turn] = anyio.run(_drive, _INTERLEAVED[index], keys)

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(len(_INTERLEAVED))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for (index, _turn), got in results.items():
        assert got == alone[index]
    assert len(results) == 6 * len(_INTERLEAVED)


class _Told:
    """A governor of another class (duck-typed), its methods called as before."""

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
