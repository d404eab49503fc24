"""statemachine._budget: limits checked before the spend, with messages naming the budget."""

from __future__ import annotations

import re
from decimal import Decimal

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from statemachine import Budget, Spend

# --- each limit -------------------------------------------------------------------------


def test_tool_call_budget_refuses_the_call_that_would_cross_it() -> None:
    """With 2 tool calls allowed and 2 made, a third is refused by the tool-call budget."""
    budget = Budget(tool_calls=2)
    reason = budget.refuse(
        Spend(tool_calls=2), elapsed=0.0, action="calling get_weather", tool_calls=1
    )
    assert reason == "tool-call budget: calling get_weather would make 3 tool calls, 2 allowed"


def test_tool_call_budget_admits_calls_up_to_the_limit() -> None:
    """The second of 2 allowed tool calls runs."""
    budget = Budget(tool_calls=2)
    assert budget.refuse(Spend(tool_calls=1), elapsed=0.0, action="x", tool_calls=1) is None


def test_token_budget_refuses_the_spend_that_would_cross_it() -> None:
    """With 90 of 100 tokens used, an action needing 11 is refused by the token budget."""
    budget = Budget(tokens=100)
    reason = budget.refuse(Spend(tokens=90), elapsed=0.0, action="summarising", tokens=11)
    assert reason == "token budget: 90 of 100 tokens used, no room for summarising"


def test_token_budget_admits_spending_exactly_up_to_the_limit() -> None:
    """With 90 of 100 tokens used, an action needing exactly 10 runs."""
    budget = Budget(tokens=100)
    assert budget.refuse(Spend(tokens=90), elapsed=0.0, action="x", tokens=10) is None


def test_cost_budget_refuses_the_charge_that_would_cross_it() -> None:
    """$999.99 spent of $1000: a $0.02 charge is refused and the message shows the sums."""
    budget = Budget(cost=Decimal("1000"))
    reason = budget.refuse(
        Spend(cost=Decimal("999.99")),
        elapsed=0.0,
        action="calling book_flight",
        cost=Decimal("0.02"),
    )
    assert reason == (
        "cost budget: calling book_flight would bring the run's cost to $1000.01 of $1000 "
        "allowed ($999.99 spent so far)"
    )


def test_cost_budget_admits_spending_exactly_up_to_the_limit() -> None:
    """$999.99 spent of $1000: a $0.01 charge brings the run to exactly $1000 and runs."""
    budget = Budget(cost=Decimal("1000"))
    spent = Spend(cost=Decimal("999.99"))
    assert budget.refuse(spent, elapsed=0.0, action="x", cost=Decimal("0.01")) is None


def test_wall_clock_budget_refuses_once_the_time_is_used() -> None:
    """At 60 s of a 60 s budget nothing more may start; the message names the wall clock."""
    budget = Budget(wall_clock=60)
    reason = budget.refuse(Spend(), elapsed=60.0, action="the next model call")
    assert reason == "wall-clock budget exhausted: 60.00s of 60s used before the next model call"


def test_wall_clock_budget_admits_actions_while_time_is_left() -> None:
    """At 59.99 s of a 60 s budget an action may still start."""
    assert Budget(wall_clock=60).refuse(Spend(), elapsed=59.99, action="x") is None


# --- open-ended actions -----------------------------------------------------------------


def test_open_ended_action_is_refused_once_tokens_are_used_up() -> None:
    """A model call's usage is unknown beforehand, so it is refused once the tokens are all used."""
    budget = Budget(tokens=100)
    reason = budget.refuse(
        Spend(tokens=100), elapsed=0.0, action="the next model call", open_ended=True
    )
    assert reason == "token budget: 100 of 100 tokens used, no room for the next model call"


def test_open_ended_action_is_refused_once_the_cost_is_reached() -> None:
    """Once the run has spent its whole cost budget, the next model call is refused."""
    budget = Budget(cost=Decimal("5"))
    reason = budget.refuse(
        Spend(cost=Decimal("5.00")), elapsed=0.0, action="the next model call", open_ended=True
    )
    assert reason == (
        "cost budget: the next model call would bring the run's cost to $5.00 of $5 allowed "
        "($5.00 spent so far)"
    )


def test_open_ended_action_runs_while_something_is_left() -> None:
    """With one token, one cent and one tool call left, a model call may still run."""
    budget = Budget(tokens=100, cost=Decimal("5"), tool_calls=3)
    spent = Spend(tokens=99, cost=Decimal("4.99"), tool_calls=2)
    assert budget.refuse(spent, elapsed=0.0, action="x", open_ended=True) is None


# --- the Budget model -------------------------------------------------------------------


def test_a_budget_without_limits_refuses_nothing() -> None:
    """Budget() is unlimited: no spend, however large, is refused."""
    spent = Spend(tokens=10**9, cost=Decimal("1e9"), tool_calls=10**6)
    reason = Budget().refuse(
        spent, elapsed=1e9, action="x", tokens=1, cost=Decimal(1), tool_calls=1, open_ended=True
    )
    assert reason is None


def test_budget_cost_is_exact_money() -> None:
    """The cost limit is Money: text and ints become exact Decimals, floats are refused."""
    assert Budget(cost="1000.50").cost == Decimal("1000.50")
    assert Budget(cost=1000).cost == Decimal(1000)
    with pytest.raises(
        ValidationError, match=re.escape("money must be exact, but got the float 0.5")
    ):
        Budget(cost=0.5)


@pytest.mark.parametrize(
    "limits",
    [{"tokens": -1}, {"tool_calls": -1}, {"wall_clock": 0}, {"wall_clock": -1.0}, {"steps": 3}],
)
def test_budget_refuses_impossible_limits(limits: dict[str, object]) -> None:
    """Negative counts, a wall clock of zero or less, and unknown limits are refused."""
    with pytest.raises(ValidationError):
        Budget(**limits)  # type: ignore[arg-type]


def test_remaining_seconds_counts_down_and_stops_at_zero() -> None:
    """6 s are left at 4 s of a 10 s budget, 0 s after it, and None when there is no limit."""
    budget = Budget(wall_clock=10)
    assert budget.remaining_seconds(4.0) == 6.0
    assert budget.remaining_seconds(12.0) == 0.0
    assert Budget().remaining_seconds(4.0) is None


def test_left_reports_what_remains_of_each_limited_budget() -> None:
    """left() names each limited budget with what remains, exactly; unlimited ones are absent."""
    budget = Budget(tokens=100, cost=Decimal("10"), tool_calls=3)
    spent = Spend(tokens=40, cost=Decimal("2.50"), tool_calls=1)
    assert budget.left(spent) == {"tokens": "60", "cost": "7.50", "tool_calls": "2"}
    assert Budget(tokens=5).left(spent) == {"tokens": "-35"}


# --- Spend ------------------------------------------------------------------------------


def test_spend_add_returns_a_new_spend_and_leaves_the_old_one_alone() -> None:
    """add() is immutable: the original Spend still reads zero after it."""
    before = Spend()
    after = before.add(tokens=5, cost=Decimal("1.10"), tool_calls=1)
    assert before == Spend(tokens=0, cost=Decimal(0), tool_calls=0)
    assert after == Spend(tokens=5, cost=Decimal("1.10"), tool_calls=1)
    assert after is not before


def test_spend_cannot_be_changed_in_place() -> None:
    """A Spend is frozen: assigning a field raises."""
    spent = Spend()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spent.tokens = 3  # type: ignore[misc]


def test_spend_adds_cost_exactly() -> None:
    """0.1 + 0.2 is exactly 0.3 in a Spend, as money should be."""
    spent = Spend().add(cost=Decimal("0.1")).add(cost=Decimal("0.2"))
    assert spent.cost == Decimal("0.3")
    assert type(spent.cost) is Decimal


# --- properties -------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=1000)
cents = st.decimals(min_value=0, max_value=10_000, places=2)


@settings(max_examples=200, deadline=None)
@given(counts, counts, counts, cents, cents, cents, counts, counts, counts)
def test_refuse_admits_exactly_the_spends_that_stay_within_every_limit(
    token_limit: int,
    tokens_used: int,
    tokens_added: int,
    cost_limit: Decimal,
    cost_used: Decimal,
    cost_added: Decimal,
    call_limit: int,
    calls_used: int,
    calls_added: int,
) -> None:
    """An action is admitted if and only if every total after it stays at or under its limit."""
    budget = Budget(tokens=token_limit, cost=cost_limit, tool_calls=call_limit)
    spent = Spend(tokens=tokens_used, cost=cost_used, tool_calls=calls_used)
    reason = budget.refuse(
        spent,
        elapsed=0.0,
        action="x",
        tokens=tokens_added,
        cost=cost_added,
        tool_calls=calls_added,
    )
    within = (
        tokens_used + tokens_added <= token_limit
        and cost_used + cost_added <= cost_limit
        and calls_used + calls_added <= call_limit
    )
    assert (reason is None) == within


_ANY_MONEY = st.decimals(allow_nan=False, allow_infinity=False, places=None).filter(
    lambda value: abs(value.adjusted()) < 150
)


@settings(max_examples=300, deadline=None)
@given(_ANY_MONEY, _ANY_MONEY)
@example(Decimal("1E+120"), Decimal("1E-20"))
@example(Decimal("5E+1"), Decimal(0))
@example(Decimal("-0"), Decimal(0))
def test_spend_add_sums_cost_as_money_sum_does(held: Decimal, added: Decimal) -> None:
    """add's cost is money_sum(cost, added), spelt the same (its exponent too); a sum
    that cannot be exact raises money_sum's ValueError, naming the sum."""
    from statemachine._money import money_sum

    spent = Spend.model_construct(cost=held)
    try:
        expected = money_sum(held, added)
    except ValueError as error:
        with pytest.raises(ValueError, match=re.escape(str(error))):
            spent.add(cost=added)
        return
    total = spent.add(cost=added).cost
    assert str(total) == str(expected)
    assert total.as_tuple() == expected.as_tuple()


# What the checkpoint codec stored for a pydantic Spend (commit 7b2495e), byte for byte.
_STORED = {
    "0": '{"tokens":12,"cost":{"$decimal":"0"},"tool_calls":1,"model_calls":2}',
    "0.03": '{"tokens":12,"cost":0.03,"tool_calls":1,"model_calls":2}',
    "0.0300": '{"tokens":12,"cost":0.0300,"tool_calls":1,"model_calls":2}',
    "1E+2": '{"tokens":12,"cost":{"$decimal":"1E+2"},"tool_calls":1,"model_calls":2}',
    "123456789.123456789": (
        '{"tokens":12,"cost":123456789.123456789,"tool_calls":1,"model_calls":2}'
    ),
    "1E-20": '{"tokens":12,"cost":0.00000000000000000001,"tool_calls":1,"model_calls":2}',
    "-0": '{"tokens":12,"cost":{"$decimal":"-0"},"tool_calls":1,"model_calls":2}',
}


@pytest.mark.parametrize("cost", sorted(_STORED))
def test_a_spend_is_stored_as_the_pydantic_spend_was_and_read_back(cost: str) -> None:
    from statemachine._json import dumps, loads
    from statemachine.persist._codec import _decode, _encode

    spent = Spend(tokens=12, cost=Decimal(cost), tool_calls=1, model_calls=2)
    stored = dumps(_encode(spent.model_dump()))
    assert stored == _STORED[cost]
    back = Spend.model_validate(_decode(loads(stored)))
    assert back == spent
    assert back.cost.as_tuple() == spent.cost.as_tuple()


def test_a_spend_is_made_of_whole_counts_and_exact_money() -> None:
    assert Spend(tokens=2, cost=3).cost == Decimal(3)
    assert Spend(cost="1.50").cost == Decimal("1.50")
    with pytest.raises(TypeError, match=r"Spend\.tokens is a whole number"):
        Spend(tokens=True)
    with pytest.raises(TypeError, match=r"Spend\.tool_calls is a whole number"):
        Spend(tool_calls=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="money must be exact"):
        Spend(cost=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no field 'price'"):
        Spend.model_validate({"tokens": 1, "price": 2})
    assert Spend.model_validate({"tokens": 1}) == Spend(tokens=1)
    assert Spend.model_construct(tokens=4) == Spend(tokens=4)
    assert str(Spend()) == "tokens=0 cost=Decimal('0') tool_calls=0 model_calls=0"
