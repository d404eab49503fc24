"""Money is exact whatever the ambient decimal context, and budget limits are never negative.

Every property runs the library's money operations (budget checks, reservations,
commits and releases, ``Spend.add``, ``Budget.left``) inside a random ``decimal``
context (1 to 28 digits, any rounding, any traps, small exponent limits) and compares
the result with exact arithmetic on ``Fraction`` computed outside it. A trapped signal
in the ambient context would also show any operation that still used it.
"""

from __future__ import annotations

import decimal
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from support import exactly

from statemachine import (
    Agent,
    Budget,
    BudgetMeter,
    ConfigError,
    Money,
    Spend,
    read_tool,
    to_money,
)
from statemachine._money import money_difference, money_sum

SIGNALS = (
    decimal.Clamped,
    decimal.DivisionByZero,
    decimal.FloatOperation,
    decimal.Inexact,
    decimal.InvalidOperation,
    decimal.Overflow,
    decimal.Rounded,
    decimal.Subnormal,
    decimal.Underflow,
)
ROUNDINGS = (
    decimal.ROUND_05UP,
    decimal.ROUND_CEILING,
    decimal.ROUND_DOWN,
    decimal.ROUND_FLOOR,
    decimal.ROUND_HALF_DOWN,
    decimal.ROUND_HALF_EVEN,
    decimal.ROUND_HALF_UP,
    decimal.ROUND_UP,
)


def _context(
    prec: int, rounding: str, traps: list[type[decimal.DecimalException]], emax: int
) -> decimal.Context:
    return decimal.Context(prec=prec, rounding=rounding, traps=traps, Emax=emax, Emin=-emax)


# The ambient context a caller might have set: any precision up to the default, any
# rounding, any traps, and exponent limits that amounts of money overflow.
contexts = st.builds(
    _context,
    st.integers(min_value=1, max_value=28),
    st.sampled_from(ROUNDINGS),
    st.lists(st.sampled_from(SIGNALS), unique=True),
    st.sampled_from([3, 20, 999_999]),
)

SMALLEST = Decimal("1E-28")
LARGEST = Decimal("1E+18")


def _amount(exponent: int) -> st.SearchStrategy[Decimal]:
    # Any coefficient that keeps the amount at or under 1E+18: up to 47 digits.
    return st.integers(min_value=1, max_value=10 ** (18 - exponent)).map(
        lambda coefficient: Decimal(f"{coefficient}E{exponent}")
    )


# Positive amounts from 1E-28 to 1E+18, with every number of digits between.
amounts = st.sampled_from([SMALLEST, LARGEST, Decimal("4E-28"), Decimal("0.004")]) | st.integers(
    min_value=-28, max_value=18
).flatmap(_amount)
amounts_or_zero = st.just(Decimal(0)) | amounts

# Exact arithmetic for the oracle, far from any context the tests set.
ORACLE = decimal.Context(prec=200, traps=[decimal.Inexact, decimal.Rounded])


def exact(amount: Decimal | Fraction) -> Fraction:
    return Fraction(amount)


# --- the two cases ----------------------------------------------------------------


def test_a_full_budget_admits_no_fraction_of_a_cent_under_six_digits() -> None:
    """Under prec=6, a $1000.00 budget fully spent refuses another 0.004 (it used to admit it)."""
    budget = Budget(cost=Decimal("1000.00"))
    with decimal.localcontext(prec=6):
        reason = budget.refuse(
            Spend(cost=Decimal("1000.00")), elapsed=0.0, action="x", cost=Decimal("0.004")
        )
        meter = BudgetMeter(budget, Spend(cost=Decimal("1000.00")))
        assert meter.try_reserve(cost=Decimal("0.004")) is None
    assert reason == (
        "cost budget: x would bring the run's cost to $1000.004 of $1000.00 allowed "
        "($1000.00 spent so far)"
    )


def test_a_full_dollar_admits_no_reservation_of_4e_28() -> None:
    """Under the default 28 digits, a spent $1 budget admits none of 1,000 reservations of 4E-28."""
    meter = BudgetMeter(Budget(cost=Decimal(1)), Spend(cost=Decimal(1)))
    admitted = [meter.try_reserve(cost=Decimal("4E-28")) for _ in range(1000)]
    assert admitted.count(None) == 1000
    assert meter.reserved.cost == 0


# --- properties under random contexts -----------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(context=contexts, limit=amounts_or_zero, extra=amounts)
def test_a_full_budget_admits_nothing_more(
    context: decimal.Context, limit: Decimal, extra: Decimal
) -> None:
    """With the whole cost limit spent, neither a check nor a reservation admits any amount."""
    budget = Budget(cost=limit)
    with decimal.localcontext(context):
        refused = budget.refuse(Spend(cost=limit), elapsed=0.0, action="x", cost=extra)
        tiniest = budget.refuse(Spend(cost=limit), elapsed=0.0, action="x", cost=SMALLEST)
        meter = BudgetMeter(budget, Spend(cost=limit))
        reservation = meter.try_reserve(cost=extra)
        model_call = budget.refuse(Spend(cost=limit), elapsed=0.0, action="x", open_ended=True)
    assert refused is not None
    assert tiniest is not None
    assert reservation is None
    assert model_call is not None


@settings(max_examples=200, deadline=None)
@given(context=contexts, spent=amounts_or_zero, add=amounts_or_zero, limit=amounts_or_zero)
def test_a_check_admits_exactly_the_charges_whose_exact_total_fits(
    context: decimal.Context, spent: Decimal, add: Decimal, limit: Decimal
) -> None:
    """refuse() and try_reserve() admit a charge if and only if its exact total fits."""
    budget = Budget(cost=limit)
    with decimal.localcontext(context):
        refused = budget.refuse(Spend(cost=spent), elapsed=0.0, action="x", cost=add)
        reservation = BudgetMeter(budget, Spend(cost=spent)).try_reserve(cost=add)
    fits = exact(spent) + exact(add) <= exact(limit)
    assert (refused is None) == fits
    assert (reservation is not None) == fits
    if refused is not None:
        total = ORACLE.add(spent, add)
        assert f"to ${total} of ${limit} allowed" in refused


@settings(max_examples=100, deadline=None)
@given(
    context=contexts,
    spent=amounts_or_zero,
    tiny=amounts,
    fitting=st.integers(min_value=0, max_value=40),
    slack=st.integers(min_value=0, max_value=10**46),
)
def test_many_tiny_reservations_sum_exactly(
    context: decimal.Context, spent: Decimal, tiny: Decimal, fitting: int, slack: int
) -> None:
    """With room for k reservations and a remainder smaller than one, exactly k are admitted."""
    # A remainder of whole 1E-28 units strictly below one reservation.
    remainder = Decimal(slack % int(tiny.scaleb(28, ORACLE))).scaleb(-28, ORACLE)
    room = ORACLE.add(ORACLE.multiply(tiny, fitting), remainder)
    limit = ORACLE.add(spent, room)
    meter = BudgetMeter(Budget(cost=limit), Spend(cost=spent))
    with decimal.localcontext(context):
        held = [meter.try_reserve(cost=tiny) for _ in range(fitting + 3)]
        reserved = meter.reserved.cost
        left_before = Budget(cost=limit).left(meter.spent)["cost"]
    admitted = [reservation for reservation in held if reservation is not None]
    assert len(admitted) == fitting
    assert exact(reserved) == fitting * exact(tiny)
    assert exact(Decimal(left_before)) == exact(limit) - exact(spent)
    with decimal.localcontext(context):
        for reservation in admitted:
            reservation.release()
        released = meter.reserved.cost
    assert released == 0


@settings(max_examples=100, deadline=None)
@given(
    context=contexts,
    spent=amounts_or_zero,
    work=st.lists(
        st.tuples(amounts, st.integers(min_value=0, max_value=10**6), st.booleans()),
        max_size=12,
    ),
)
def test_charges_and_releases_are_exact(
    context: decimal.Context, spent: Decimal, work: list[tuple[Decimal, int, bool]]
) -> None:
    """Commits add exactly what was used, releases give back exactly what was held."""
    meter = BudgetMeter(Budget(), Spend(cost=spent))
    expected = exact(spent)
    with decimal.localcontext(context):
        held = [
            (meter.reserve(cost=estimate), estimate, part, done) for estimate, part, done in work
        ]
        reserved_all = meter.reserved.cost
    assert exact(reserved_all) == sum((exact(estimate) for estimate, _, _ in work), Fraction(0))
    for reservation, estimate, part, done in held:
        # A used amount at most the estimate: a whole number of millionths of it, in 1E-28s.
        used = ORACLE.multiply(estimate, Decimal(part).scaleb(-6)).quantize(
            SMALLEST, rounding=decimal.ROUND_DOWN, context=decimal.Context(prec=200)
        )
        with decimal.localcontext(context):
            if done:
                reservation.commit(cost=used)
            else:
                reservation.release()
        if done:
            expected += exact(used)
    with decimal.localcontext(context):
        after = meter.spent.cost
        still_reserved = meter.reserved.cost
    assert exact(after) == expected
    assert still_reserved == 0


@settings(max_examples=150, deadline=None)
@given(context=contexts, start=amounts_or_zero, charges=st.lists(amounts, max_size=20))
def test_spend_adds_exactly(
    context: decimal.Context, start: Decimal, charges: list[Decimal]
) -> None:
    """Spend.add gives the exact sum of the charges, in any ambient context."""
    spent = Spend(cost=start)
    with decimal.localcontext(context):
        for charge in charges:
            spent = spent.add(cost=charge, tool_calls=1)
    assert exact(spent.cost) == exact(start) + sum(map(exact, charges), Fraction(0))
    assert spent.tool_calls == len(charges)


@settings(max_examples=150, deadline=None)
@given(context=contexts, limit=amounts_or_zero, spent=amounts_or_zero)
def test_left_is_the_exact_difference(
    context: decimal.Context, limit: Decimal, spent: Decimal
) -> None:
    """Budget.left reports the exact difference of the limit and the spend."""
    with decimal.localcontext(context):
        left = Budget(cost=limit).left(Spend(cost=spent))["cost"]
    assert exact(Decimal(left)) == exact(limit) - exact(spent)


@settings(max_examples=150, deadline=None)
@given(context=contexts, a=amounts_or_zero, b=amounts_or_zero)
def test_the_helpers_equal_exact_arithmetic(
    context: decimal.Context, a: Decimal, b: Decimal
) -> None:
    """money_sum and money_difference equal Fraction arithmetic in any ambient context."""
    with decimal.localcontext(context):
        total = money_sum(a, b, SMALLEST)
        difference = money_difference(a, b)
    assert exact(total) == exact(a) + exact(b) + exact(SMALLEST)
    assert exact(difference) == exact(a) - exact(b)


# --- money's range ------------------------------------------------------------------------


class Refund(BaseModel):
    amount: Money


@pytest.mark.parametrize(
    ("given_amount", "kept"),
    [
        ("1E-28", "1E-28"),
        ("1E+18", "1E+18"),
        ("-999999999999999999999999999999999999.99", "-999999999999999999999999999999999999.99"),
        # Zeros past the 28th place carry no value and are dropped.
        ("1.000000000000000000000000000000", "1.0000000000000000000000000000"),
        ("0E-1000", "0E-28"),
    ],
)
def test_money_takes_amounts_from_1e_28_to_under_1e_36(given_amount: str, kept: str) -> None:
    """The range ends are money; zeros past the 28th place are dropped, not the value."""
    assert str(to_money(given_amount)) == kept
    assert str(Refund.model_validate({"amount": given_amount}).amount) == kept


def test_money_finer_than_28_places_is_refused_with_what_to_do() -> None:
    """1E-29 cannot be summed exactly with money, so it is refused, saying how to round it."""
    message = (
        "money has at most 28 decimal places, but '1E-29' has more; round it to 28 places "
        "(the smallest amount is 1E-28)"
    )
    with pytest.raises(ValueError, match=exactly(message)):
        to_money("1E-29")


def test_money_of_1e_36_and_more_is_refused() -> None:
    """An amount of 1E+36 or more is refused, naming it."""
    message = (
        "money must be less than 1E+36 in size, got '-1E+36'; check where the amount came from"
    )
    with pytest.raises(ValueError, match=exactly(message)):
        to_money("-1E+36")


def test_a_sum_outside_money_s_range_raises_instead_of_rounding() -> None:
    """Amounts that bypassed to_money and need more than 100 digits raise, naming them."""
    message = (
        "the sum of 1E+80, 1E-28 cannot be computed exactly in 100 digits; money must have "
        "at most 28 decimal places and be less than 1E+36: pass amounts through to_money"
    )
    with pytest.raises(ValueError, match=exactly(message)):
        money_sum(Decimal("1E+80"), SMALLEST)


# --- limits that are not limits -----------------------------------------------------------

NEGATIVE = ": give the most the run may use (0 allows nothing), or None for no limit"
NO_TIME = ": give the most seconds the run may take, or None for no limit"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("cost", Decimal("-5"), "a cost budget must not be negative, got -5" + NEGATIVE),
        ("cost", "-0.01", "a cost budget must not be negative, got -0.01" + NEGATIVE),
        ("cost", Decimal("NaN"), "money must be a finite amount, got Decimal('NaN')"),
        ("cost", "Infinity", "money must be a finite amount, got 'Infinity'"),
        ("cost", Decimal("-Infinity"), "money must be a finite amount, got Decimal('-Infinity')"),
        ("tokens", -1, "a token budget must not be negative, got -1" + NEGATIVE),
        ("tool_calls", -3, "a tool-call budget must not be negative, got -3" + NEGATIVE),
        (
            "wall_clock",
            float("nan"),
            "a wall-clock budget must be a finite number of seconds above 0, got nan" + NO_TIME,
        ),
        (
            "wall_clock",
            float("inf"),
            "a wall-clock budget must be a finite number of seconds above 0, got inf" + NO_TIME,
        ),
        (
            "wall_clock",
            -1.0,
            "a wall-clock budget must be a finite number of seconds above 0, got -1.0" + NO_TIME,
        ),
    ],
)
def test_a_limit_that_is_negative_or_not_finite_is_refused_naming_the_field(
    field: str, value: Any, message: str
) -> None:
    """Every budget dimension refuses a negative, NaN or infinite limit, with the field's name."""
    with pytest.raises(ValidationError) as caught:
        Budget(**{field: value})
    (error,) = caught.value.errors(include_url=False)
    assert error["loc"] == (field,)
    assert error["msg"] == "Value error, " + message


def test_zero_limits_are_limits() -> None:
    """0 tokens, $0 and 0 tool calls are allowed: a budget that admits nothing."""
    budget = Budget(tokens=0, cost=Decimal(0), tool_calls=0)
    assert budget.refuse(Spend(), elapsed=0.0, action="x", cost=SMALLEST) is not None


def test_a_negative_cost_in_configuration_is_a_config_error() -> None:
    """Through Agent.from_config the refusal is a ConfigError naming $.budget.cost."""
    message = (
        "invalid configuration: $.budget.cost: a cost budget must not be negative, got -5"
        + NEGATIVE
        + ". Fix the configuration and start again: nothing was started with it."
    )
    with pytest.raises(ConfigError, match=exactly(message)):
        Agent[None].from_config({"budget": {"cost": "-5"}}, name="support")


class Order(BaseModel):
    amount: Money


def test_a_negative_price_is_refused_naming_the_tool() -> None:
    """A cost function that prices a call below zero would give budget back: it raises."""

    @read_tool(cost=lambda args: args.amount)
    async def quote(args: Order) -> None:
        return None

    message = (
        "the cost function of tool 'quote' priced a call at -0.50, below zero: a price must "
        "not be negative, or calls would give budget back; return Decimal(0) for a free call"
    )
    with pytest.raises(ValueError, match=exactly(message)):
        quote.price(Order(amount=Decimal("-0.50")))
    assert quote.price(Order(amount=Decimal("0.50"))) == Decimal("0.50")
