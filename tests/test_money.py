"""statemachine._money: a pydantic field that holds exact amounts and refuses floats."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from support import exactly

from statemachine import Money, dumps, loads, to_money


class Refund(BaseModel):
    order: str
    amount: Money


def refusal(amount: Any) -> str:
    """The message pydantic reports for a refused ``Refund.amount``."""
    with pytest.raises(ValidationError) as caught:
        Refund(order="A-1", amount=amount)
    (error,) = caught.value.errors(include_url=False)
    assert error["loc"] == ("amount",)
    return str(error["msg"])


FLOAT_REFUSAL = (
    "money must be exact, but got the float 137.32; pass Decimal('137.32') or the string "
    "'137.32' (read JSON with statemachine's loads, which keeps numbers exact)"
)


@pytest.mark.parametrize(
    ("given_amount", "spelled"),
    [
        (Decimal("137.32"), "137.32"),
        (Decimal("899.90"), "899.90"),
        (137, "137"),
        (-5, "-5"),
        ("137.32", "137.32"),
        (" 137.32 ", "137.32"),
        ("1E+3", "1E+3"),
    ],
)
def test_money_accepts_decimal_int_and_numeric_text_exactly(
    given_amount: Any, spelled: str
) -> None:
    """Decimal, int and numeric text become a Decimal with exactly the digits given."""
    amount = Refund(order="A-1", amount=given_amount).amount
    assert type(amount) is Decimal
    assert str(amount) == spelled


@pytest.mark.parametrize(("given_amount", "spelled"), [(137, "137"), ("137.32", "137.32")])
def test_model_validate_takes_an_int_or_numeric_text(given_amount: int | str, spelled: str) -> None:
    """The way code passes an int or text (the constructor's static type is Decimal)."""
    amount = Refund.model_validate({"order": "A-1", "amount": given_amount}).amount
    assert type(amount) is Decimal
    assert str(amount) == spelled


def test_model_validate_refuses_a_float_too() -> None:
    """A float is refused whichever way it is passed."""
    with pytest.raises(ValidationError, match="money must be exact"):
        Refund.model_validate({"order": "A-1", "amount": 137.32})


def test_money_refuses_a_float_with_a_message_that_says_what_to_pass() -> None:
    """A float is already inexact, so it is refused, and the message says how to pass it."""
    assert refusal(137.32) == "Value error, " + FLOAT_REFUSAL
    with pytest.raises(ValueError, match=exactly(FLOAT_REFUSAL)):
        to_money(137.32)


def test_money_refuses_a_float_even_when_it_looks_whole() -> None:
    """5.0 is refused too: the rule is about the type, not whether this value happens to fit."""
    assert refusal(5.0) == (
        "Value error, money must be exact, but got the float 5.0; pass Decimal('5.0') or the "
        "string '5.0' (read JSON with statemachine's loads, which keeps numbers exact)"
    )


@pytest.mark.parametrize("flag", [True, False])
def test_money_refuses_a_boolean(flag: bool) -> None:
    """True is an int to Python but not an amount; it is refused by name."""
    assert refusal(flag) == f"Value error, money must be a number, not the boolean {flag!r}"


def test_money_refuses_text_that_is_not_a_number() -> None:
    """Words are refused with an example of what a number looks like."""
    assert refusal("lots") == (
        "Value error, money must be a number like '137.32', got the text 'lots'"
    )


@pytest.mark.parametrize(
    ("amount", "shown"),
    [("NaN", "'NaN'"), ("Infinity", "'Infinity'"), (Decimal("-Infinity"), "Decimal('-Infinity')")],
)
def test_money_refuses_amounts_that_are_not_finite(amount: Any, shown: str) -> None:
    """NaN and Infinity are not amounts, as text or as Decimal."""
    assert refusal(amount) == f"Value error, money must be a finite amount, got {shown}"


@pytest.mark.parametrize(("amount", "shown"), [(None, "None"), ([1], "[1]")])
def test_money_refuses_other_types(amount: Any, shown: str) -> None:
    """Anything else is refused with the kinds of value that are accepted."""
    assert refusal(amount) == (
        f"Value error, money must be a Decimal, int or numeric string, got {shown}"
    )


def test_money_is_advertised_as_a_json_number() -> None:
    """The model is shown a number, not a string, so it writes 137.32 and not "137.32"."""
    assert TypeAdapter(Money).json_schema() == {"type": "number"}
    field = Refund.model_json_schema()["properties"]["amount"]
    assert field == {"title": "Amount", "type": "number"}


def test_a_json_number_read_by_loads_stays_exact_in_a_money_field() -> None:
    """A model's 137.32, read with statemachine.loads, is Decimal("137.32") in the field."""
    refund = Refund.model_validate(loads('{"order": "A-1", "amount": 137.32}'))
    assert refund.amount == Decimal("137.32")
    assert str(refund.amount) == "137.32"


def test_a_money_field_is_written_as_the_same_json_number() -> None:
    """dumps of a model writes the amount as the exact number it holds."""
    assert dumps(Refund(order="A-1", amount="0.10")) == '{"order":"A-1","amount":0.10}'


def test_pydantic_json_parsing_refuses_a_json_number_rather_than_round_it() -> None:
    """pydantic's own JSON parser reads 137.32 as a float, so Money refuses it, never rounds."""
    with pytest.raises(ValidationError) as caught:
        Refund.model_validate_json('{"order": "A-1", "amount": 137.32}')
    (error,) = caught.value.errors(include_url=False)
    assert error["msg"] == "Value error, " + FLOAT_REFUSAL


def test_model_dump_json_round_trips_money_exactly() -> None:
    """A model written with model_dump_json and read with model_validate_json keeps the amount."""
    refund = Refund(order="A-1", amount=Decimal("0.1000000000000000000000000001"))
    back = Refund.model_validate_json(refund.model_dump_json())
    assert back.amount == refund.amount


def test_serialization_schema_describes_what_model_dump_json_writes() -> None:
    """The serialization schema of a Money field names the JSON type model_dump_json writes."""
    refund = Refund(order="A-1", amount=Decimal("137.32"))
    written = loads(refund.model_dump_json())["amount"]
    json_type = "string" if isinstance(written, str) else "number"
    schema = Refund.model_json_schema(mode="serialization")["properties"]["amount"]
    assert schema["type"] == json_type


# Money's range: at most 28 decimal places, less than 1E+36 in size, spelled any way.
amounts_in_range = st.builds(
    lambda coefficient, exponent: Decimal(f"{coefficient}E{exponent}"),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=-28, max_value=5),
)


@settings(max_examples=200, deadline=None)
@given(amounts_in_range)
def test_any_amount_in_range_round_trips_through_money_unchanged(amount: Decimal) -> None:
    """An amount in money's range keeps its value and its exact digits and exponent."""
    held = Refund(order="A-1", amount=amount).amount
    assert held == amount
    assert held.as_tuple() == amount.as_tuple()


@settings(max_examples=200, deadline=None)
@given(
    st.decimals(
        # Written out: 1E+36 - 0.01 in the default 28-digit context rounds to 1E+36.
        min_value=Decimal("-999999999999999999999999999999999999.99"),
        max_value=Decimal("999999999999999999999999999999999999.99"),
        allow_nan=False,
        allow_infinity=False,
        places=2,
    )
)
def test_any_cent_amount_survives_dumps_and_loads_through_money(amount: Decimal) -> None:
    """An amount in cents (within money's range, under 1E+36) written with dumps and read
    with loads is the same Decimal."""
    refund = Refund(order="A-1", amount=amount)
    assert Refund.model_validate(loads(dumps(refund))).amount == amount
