"""``Money``: an exact ``Decimal`` field for pydantic models, and exact sums of money.

A tool's arguments model declares ``amount: Money``. The field:

- accepts ``Decimal``, ``int`` and numeric strings, and a JSON number read by
  :func:`statemachine._json.loads` (already a ``Decimal``), so ``137.32`` from a
  model becomes ``Decimal("137.32")`` exactly;
- refuses a Python ``float``, whose value is already inexact, with an error that
  says how to pass the amount instead;
- refuses an amount finer than ``1E-28`` (28 decimal places) or of ``1E+36`` and more,
  so that every sum of money fits, exactly, in the digits :data:`EXACT` has;
- is advertised to the model as a JSON number, not a string.

Arithmetic on ``Decimal`` rounds to the ambient context (``decimal.getcontext()``, 28
digits by default, or whatever a caller's ``localcontext`` says), so ``+`` and ``-``
on money would depend on code far away. Every sum and difference of money in the
library goes through :func:`money_sum` and :func:`money_difference` instead, which
compute in :data:`EXACT`: a context whose every signal, ``Inexact`` and ``Rounded``
among them, is trapped, so a result is exact or the operation raises. Amounts within
the range above have at most 64 digits and the context has 100, so sums of up to
``10**36`` of them never raise. Comparisons need no context: the decimal
specification compares two finite numbers exactly under any context.

Statically the field is a ``Decimal``, to read and to pass to the model's constructor
(pyright checks that; mypy's pydantic plugin types no constructor argument without
``init_typed``): code passes ``Decimal("12.50")``, or an ``int`` or text through
``model_validate``. No static type says "Decimal | int | str in, Decimal out" under
both checkers: a descriptor type does for ``amount: Money``, but then pyright refuses
a ``Decimal`` for a ``Money | None`` field and both refuse ``cost: Money = Decimal(0)``.
"""

from __future__ import annotations

from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_HALF_EVEN,
    Clamped,
    Context,
    Decimal,
    DecimalException,
    DivisionByZero,
    FloatOperation,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
    Subnormal,
    Underflow,
)
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

__all__ = ["EXACT", "MONEY_PLACES", "Money", "money_difference", "money_sum", "to_money"]

#: The most decimal places an amount may have: the smallest amount is ``1E-28``.
MONEY_PLACES = 28
#: Amounts are below ``10**_WHOLE_DIGITS`` in size.
_WHOLE_DIGITS = 36
_SMALLEST = Decimal(f"1E-{MONEY_PLACES}")

#: The context of every sum of money: 100 digits, and a result that would need more
#: (or any other signal) raises instead of rounding. Shared and never changed; the
#: flags a trapped signal sets on it are never read.
EXACT = Context(
    prec=100,
    rounding=ROUND_HALF_EVEN,
    Emin=MIN_EMIN,
    Emax=MAX_EMAX,
    traps=[
        Clamped,
        DivisionByZero,
        FloatOperation,
        Inexact,
        InvalidOperation,
        Overflow,
        Rounded,
        Subnormal,
        Underflow,
    ],
)
# For the check of places only: dropping trailing zeros (Rounded) is fine there.
_PLACES_CHECK = Context(prec=EXACT.prec, Emin=MIN_EMIN, Emax=MAX_EMAX, traps=[Inexact])


def to_money(value: Any) -> Decimal:
    """Convert ``value`` to an exact, finite ``Decimal`` in money's range or raise ``ValueError``.

    The amount keeps the digits it was given, except that zeros past the 28th decimal
    place are dropped (``1.000...0`` with 30 places becomes ``1`` with 28), so that
    it stays within the range every sum can hold exactly.
    """
    if isinstance(value, bool):
        raise ValueError(f"money must be a number, not the boolean {value!r}")
    if isinstance(value, float):
        raise ValueError(
            f"money must be exact, but got the float {value!r}; pass Decimal({str(value)!r}) "
            f"or the string {str(value)!r} (read JSON with statemachine's loads, which "
            "keeps numbers exact)"
        )
    if isinstance(value, Decimal):
        amount = value
    elif isinstance(value, int):
        amount = Decimal(value)
    elif isinstance(value, str):
        try:
            amount = Decimal(value.strip())
        except InvalidOperation:
            raise ValueError(
                f"money must be a number like '137.32', got the text {value!r}"
            ) from None
    else:
        raise ValueError(f"money must be a Decimal, int or numeric string, got {value!r}")
    if not amount.is_finite():
        raise ValueError(f"money must be a finite amount, got {value!r}")
    return _in_range(amount, value)


def _in_range(amount: Decimal, given: Any) -> Decimal:
    if amount and amount.adjusted() >= _WHOLE_DIGITS:
        raise ValueError(
            f"money must be less than 1E+{_WHOLE_DIGITS} in size, got {given!r}; "
            "check where the amount came from"
        )
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -MONEY_PLACES:
        try:
            return amount.quantize(_SMALLEST, context=_PLACES_CHECK)
        except Inexact:
            raise ValueError(
                f"money has at most {MONEY_PLACES} decimal places, but {given!r} has more; "
                f"round it to {MONEY_PLACES} places (the smallest amount is 1E-{MONEY_PLACES})"
            ) from None
    return amount


def money_sum(*amounts: Decimal) -> Decimal:
    """The exact sum of ``amounts``, whatever the ambient ``decimal`` context.

    Raises ``ValueError`` when the sum cannot be exact in :data:`EXACT`'s 100 digits,
    which amounts that passed :func:`to_money` only reach after ``10**36`` of them.
    """
    if not amounts:
        return Decimal(0)
    total = amounts[0]
    try:
        for amount in amounts[1:]:
            total = EXACT.add(total, amount)
    except DecimalException:
        raise ValueError(_inexact("the sum of", amounts)) from None
    return total


def money_difference(minuend: Decimal, subtrahend: Decimal) -> Decimal:
    """The exact ``minuend - subtrahend``, whatever the ambient ``decimal`` context."""
    try:
        return EXACT.subtract(minuend, subtrahend)
    except DecimalException:
        raise ValueError(_inexact("the difference of", (minuend, subtrahend))) from None


def _inexact(what: str, amounts: tuple[Decimal, ...]) -> str:
    spelled = ", ".join(str(amount) for amount in amounts)
    return (
        f"{what} {spelled} cannot be computed exactly in {EXACT.prec} digits; money must "
        f"have at most {MONEY_PLACES} decimal places and be less than 1E+{_WHOLE_DIGITS}: "
        "pass amounts through to_money"
    )


Money = Annotated[
    Decimal,
    BeforeValidator(to_money),
    # The model is told "number" (validation); pydantic itself writes a Decimal as a
    # string in model_dump_json, and its serialization schema keeps saying so.
    WithJsonSchema({"type": "number"}, mode="validation"),
]
