"""``Money``: an exact ``Decimal`` field for pydantic models.

A tool's arguments model declares ``amount: Money``. The field:

- accepts ``Decimal``, ``int`` and numeric strings, and a JSON number read by
  :func:`statemachine._json.loads` (already a ``Decimal``), so ``137.32`` from a
  model becomes ``Decimal("137.32")`` exactly;
- refuses a Python ``float``, whose value is already inexact, with an error that
  says how to pass the amount instead;
- is advertised to the model as a JSON number, not a string.

Statically the field is a ``Decimal``, to read and to pass to the model's constructor
(pyright checks that; mypy's pydantic plugin types no constructor argument without
``init_typed``): code passes ``Decimal("12.50")``, or an ``int`` or text through
``model_validate``. No static type says "Decimal | int | str in, Decimal out" under
both checkers: a descriptor type does for ``amount: Money``, but then pyright refuses
a ``Decimal`` for a ``Money | None`` field and both refuse ``cost: Money = Decimal(0)``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema

__all__ = ["Money", "to_money"]


def to_money(value: Any) -> Decimal:
    """Convert ``value`` to an exact, finite ``Decimal`` or raise ``ValueError``."""
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
    return amount


Money = Annotated[
    Decimal,
    BeforeValidator(to_money),
    # The model is told "number" (validation); pydantic itself writes a Decimal as a
    # string in model_dump_json, and its serialization schema keeps saying so.
    WithJsonSchema({"type": "number"}, mode="validation"),
]
