"""Money's static types: a ``Decimal`` to read; code builds a model with a ``Decimal``.

At run time a ``Money`` field also takes an ``int`` or a numeric string (what a model's
JSON arguments hold) and refuses a ``float``. Statically the field is a ``Decimal``,
which is what pyright types the model's constructor with; mypy's pydantic plugin types
constructor arguments only under ``init_typed``, which this project leaves off, so
mypy checks none of them. An ``int`` or numeric text in code goes through
``model_validate``, which both checkers accept.
"""

from __future__ import annotations

from decimal import Decimal
from typing import assert_type

from pydantic import BaseModel, Field

from statemachine import Money


class RefundArgs(BaseModel):
    """A tool's arguments with a required amount."""

    order_id: str
    amount: Money


class Prices(BaseModel):
    """Money with defaults, a constraint and ``None`` allowed."""

    cost: Money = Decimal(0)
    fee: Money = Field(default=Decimal(0), ge=0)
    cap: Money | None = None


def money_reads_as_a_decimal(args: RefundArgs, prices: Prices) -> Decimal:
    assert_type(args.amount, Decimal)
    assert_type(prices.cost, Decimal)
    assert_type(prices.cap, Decimal | None)
    return args.amount + prices.cost + prices.fee


def code_builds_money_with_a_decimal() -> None:
    RefundArgs(order_id="A-1", amount=Decimal("12.50"))
    Prices(cost=Decimal(1), fee=Decimal("0.30"), cap=None)
    Prices(cap=Decimal(100))


def an_int_or_numeric_text_goes_through_model_validate() -> RefundArgs:
    RefundArgs.model_validate({"order_id": "A-1", "amount": 5})
    return RefundArgs.model_validate({"order_id": "A-1", "amount": "12.50"})


def the_constructor_takes_only_a_decimal() -> None:
    # Rule, pyright only (mypy's plugin leaves constructor arguments untyped): an int is
    # not a Decimal. Pass Decimal(5), or validate {"amount": 5}.
    RefundArgs(order_id="A-1", amount=5)  # pyright: ignore[reportArgumentType]
    # Rule, pyright only: nor is numeric text. Pass Decimal("12.50").
    RefundArgs(order_id="A-1", amount="12.50")  # pyright: ignore[reportArgumentType]
    # Rule, pyright only: a float is refused statically, and at run time by every checker.
    RefundArgs(order_id="A-1", amount=12.5)  # pyright: ignore[reportArgumentType]
    # Rule, pyright only: the same for a field with a default.
    Prices(cost=5)  # pyright: ignore[reportArgumentType]
