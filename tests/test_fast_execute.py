"""ToolCalling.execute's shortcuts against their plain versions (see ``_calling``).

``_unlimited``: a budget it lets skip ``Budget.refuse`` refuses nothing, and it lets only
an exact ``Budget`` with no limit skip. ``_counted``: the spend after a call, made without
``Spend.add``'s keywords, is what ``add`` makes, value and spelling. A run with a budget
or a breaker still refuses as before.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, Failed, Observing, ReadCall, Runtime, read_tool
from statemachine._budget import Spend
from statemachine._calling import _counted, _unlimited
from statemachine._money import money_sum
from statemachine._tools import _FREE
from statemachine.testing import AutoDenyGate, ScriptedModel

_ZERO = Decimal(0)


# Money as to_money admits it: up to 28 places, below 1E+36, with exponents above 0 too.
def _decimal(digits: list[int], exponent: int, negative: bool) -> Decimal:
    return Decimal((int(negative), tuple(digits), exponent))


money = st.builds(
    _decimal,
    st.lists(st.integers(0, 9), min_size=1, max_size=12),
    st.integers(-28, 20),
    st.booleans(),
)
counts = st.integers(0, 10**6)
limits = st.one_of(st.none(), st.integers(0, 10**6))


def _spelled(spend: Spend) -> tuple[Any, ...]:
    return (spend.tokens, str(spend.cost), spend.tool_calls, spend.model_calls)


@given(counts, money, counts, counts, st.one_of(st.just(_FREE), money.map(abs)))
def test_counted_is_the_plain_add(
    tokens: int, cost: Decimal, tool_calls: int, model_calls: int, price: Decimal
) -> None:
    spent = Spend(tokens=tokens, cost=cost, tool_calls=tool_calls, model_calls=model_calls)
    plain = spent.add(tool_calls=1).add(cost=price)
    assert _spelled(_counted(spent, price)) == _spelled(plain)
    assert _spelled(_counted(spent, price)) == _spelled(
        spent.add(tool_calls=1, cost=money_sum(_ZERO, price))
    )


class _Loud(Spend):
    """A Spend subclass: _counted leaves it to its own add."""

    def add(self, **amounts: Any) -> Spend:
        return Spend(tokens=7)


def test_counted_leaves_a_subclass_to_its_add() -> None:
    assert _counted(_Loud(), _FREE).tokens == 7


@given(
    limits, st.one_of(st.none(), money.map(abs)), limits, st.one_of(st.none(), st.floats(1, 1e6))
)
def test_unlimited_only_when_refuse_refuses_nothing(
    tokens: int | None, cost: Decimal | None, tool_calls: int | None, wall: float | None
) -> None:
    budget = Budget(tokens=tokens, cost=cost, tool_calls=tool_calls, wall_clock=wall)
    free = _unlimited(budget)
    assert free == (tokens is None and cost is None and tool_calls is None and wall is None)
    if free:
        spent = Spend(tokens=10**9, cost=Decimal("1E+30"), tool_calls=10**9)
        assert budget.refuse(spent, elapsed=1e9, action="a", tool_calls=1, cost=_ZERO) is None
        assert budget.remaining_seconds(1e9) is None


def test_unlimited_refuses_a_subclass_and_a_budget_changed_behind_its_back() -> None:
    class Strict(Budget):  # pyright: ignore[reportGeneralTypeIssues]
        def refuse(self, spent: Spend, **kwargs: Any) -> str | None:
            return "no"

    assert not _unlimited(Strict())
    budget = Budget()
    object.__setattr__(budget, "tool_calls", 0)  # frozen, written anyway: read live
    assert not _unlimited(budget)
    assert not _unlimited(object())


class _Args(BaseModel):
    key: str


@read_tool
async def _look(args: _Args) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


def _execute(agent: Agent[None]) -> Any:
    call = agent.tools.route("_look", '{"key": "k"}')
    assert isinstance(call, ReadCall)
    planning = agent.start(None, "go").receive("go")
    planning._leave("call_tool")
    calling = planning._next(agent.phases.tool_calling, call=call, call_id="c1")
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    return anyio.run(calling.execute, rt)


def test_a_budget_still_refuses_and_none_lets_the_call_run() -> None:
    ran = _execute(Agent[None](name="a", tools=[_look]))
    assert isinstance(ran, Observing)
    assert ran.spent.tool_calls == 1
    assert str(ran.spent.cost) == "0"
    refused = _execute(Agent[None](name="a", tools=[_look], budget=Budget(tool_calls=0)))
    assert isinstance(refused, Failed)
    assert "tool-call budget" in refused.reason


def test_a_budget_written_behind_its_back_still_refuses() -> None:
    budget = Budget()
    agent = Agent[None](name="a", tools=[_look], budget=budget)
    object.__setattr__(budget, "tool_calls", 0)
    refused = _execute(agent)
    assert isinstance(refused, Failed)
    assert "tool-call budget" in refused.reason


def test_leave_refuses_what_own_ticket_refuses() -> None:
    """``_leave``'s own check of the ticket: a copy holding the phase's ticket, a phase
    without one, and a second leave are refused as ``_own_ticket`` refuses them."""
    from statemachine._errors import PhaseForgedError, PhaseReusedError
    from statemachine._phases import Planning

    agent = Agent[None](name="a", tools=[_look])
    planning = agent.start(None, "go").receive("go")
    twin = object.__new__(Planning)
    for name in ("agent", "ctx", "transcript", "spent", "step", "loop", "_ticket"):
        object.__setattr__(twin, name, getattr(planning, name))
    with pytest.raises(PhaseForgedError):
        twin._leave("fail")
    bare = object.__new__(Planning)
    with pytest.raises(PhaseForgedError):
        bare._leave("fail")
    planning._leave("fail")
    with pytest.raises(PhaseReusedError):
        planning._leave("fail")


# _spend: a Spend made through its _Making twin is the one the constructor makes.


@given(counts, money, counts, counts)
def test_spend_is_the_constructor_s_spend(
    tokens: int, cost: Decimal, tool_calls: int, model_calls: int
) -> None:
    from attrs.exceptions import FrozenInstanceError

    from statemachine._budget import _spend

    made = _spend(tokens, cost, tool_calls, model_calls)
    plain = Spend(tokens=tokens, cost=cost, tool_calls=tool_calls, model_calls=model_calls)
    assert type(made) is Spend
    assert made == plain
    assert _spelled(made) == _spelled(plain)
    assert hash(made) == hash(plain)
    assert made.model_dump_json() == plain.model_dump_json()
    with pytest.raises(FrozenInstanceError):
        made.tokens = 1  # type: ignore[misc]


# The builders run the hook of ToolCalling, Observing and Retrying (the check of the call
# they hold) themselves: a write that was not approved is still refused, and a
# subclass's hook of its own is still called.


def test_a_builder_still_refuses_an_unapproved_write() -> None:
    import attrs

    from statemachine import UnapprovedWriteError, write_tool
    from statemachine._phases import Retrying, ToolCalling

    @write_tool
    async def put(args: _Args) -> dict[str, object]:
        """Put a key."""
        return {"key": args.key}

    agent = Agent[None](name="a", tools=[_look, put])
    write = agent.tools.call("put", {"key": "k"})
    read = agent.tools.call("_look", {"key": "k"})

    class LooksRead(ReadCall):  # type: ignore[misc]  # a subclass is not the exact type
        pass

    sly = object.__new__(LooksRead)
    for field in attrs.fields(ReadCall):
        object.__setattr__(sly, field.name, getattr(read, field.name))
    for cls, extra in (
        (ToolCalling, {}),
        (Observing, {"output": 1}),
        (Retrying, {"attempt": 1, "error": "e"}),
    ):
        for call in (write, sly, "not a call"):
            planning = agent.start(None, "go").receive("go")
            with pytest.raises(UnapprovedWriteError):
                planning._next(cls, call=call, call_id="c", **extra)
        made = agent.start(None, "go").receive("go")._next(cls, call=read, call_id="c", **extra)
        assert type(made) is cls


def test_a_subclass_s_own_hook_is_called_by_its_builder() -> None:
    import attrs

    from statemachine import Phases
    from statemachine._phases import ToolCalling

    seen: list[object] = []

    @attrs.frozen(kw_only=True)
    class Watched(ToolCalling[None]):
        def __attrs_post_init__(self) -> None:
            seen.append(self.call_id)
            super().__attrs_post_init__()

    agent = Agent[None](name="a", tools=[_look], phases=Phases[None](tool_calling=Watched))
    call = agent.tools.call("_look", {"key": "k"})
    made = agent.start(None, "go").receive("go")._next(Watched, call=call, call_id="c9")
    assert type(made) is Watched
    assert seen == ["c9"]


# The idempotency key a tool reads: a read call's is None, whatever its caller had set,
# and the caller's is back after it, as the plain set and reset leave it.


async def _key_seen(agent: Agent[None], name: str) -> tuple[Any, Any]:
    from statemachine import current_idempotency_key

    call = agent.tools.call(name, {"key": "k"})
    planning = agent.start(None, "go").receive("go")
    planning._leave("call_tool")
    calling = planning._next(agent.phases.tool_calling, call=call, call_id="c1")
    rt = Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())
    observed = await calling.execute(rt)
    assert isinstance(observed, Observing)
    return observed.output, current_idempotency_key()


def test_a_read_tool_reads_no_key_and_leaves_the_caller_s() -> None:
    from statemachine import current_idempotency_key
    from statemachine._tools import _IDEMPOTENCY_KEY

    @read_tool
    async def reads(args: _Args) -> dict[str, object]:
        """What key the tool reads."""
        return {"key": current_idempotency_key()}

    @read_tool
    async def sets(args: _Args) -> dict[str, object]:
        """Sets the key itself and leaves it set."""
        _IDEMPOTENCY_KEY.set("left by the tool")
        return {"key": current_idempotency_key()}

    agent = Agent[None](name="a", tools=[reads, sets])

    async def runs() -> list[tuple[Any, Any]]:
        seen = [await _key_seen(agent, "reads"), await _key_seen(agent, "sets")]
        token = _IDEMPOTENCY_KEY.set("the caller's")
        try:
            seen += [await _key_seen(agent, "reads"), await _key_seen(agent, "sets")]
        finally:
            _IDEMPOTENCY_KEY.reset(token)
        return seen

    assert anyio.run(runs) == [
        ({"key": None}, None),
        ({"key": "left by the tool"}, None),
        ({"key": None}, "the caller's"),
        ({"key": "left by the tool"}, "the caller's"),
    ]
