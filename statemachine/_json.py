"""JSON that keeps money exact.

``loads`` reads every JSON number with a fraction or exponent as ``Decimal``, so
``137.32`` from a model stays ``Decimal("137.32")``. ``dumps`` writes ``Decimal`` as
a plain JSON number (never a string, never through ``float``). ``canonical`` is the
form that approvals and idempotency keys hash: sorted keys, no spaces, numbers in
one spelling (``5``, ``5.0`` and ``5.00`` are the same number).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

__all__ = ["canonical", "canonical_hash", "dumps", "loads", "to_plain"]

_encode_str = json.JSONEncoder(ensure_ascii=False).encode
# Beyond this many digits a number is written in exponent form (1E+5000), so that
# neither writing nor reading it expands thousands of zeros.
_PLAIN_DIGITS = 400


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send a finite number")


def _bounded_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if abs(value.adjusted()) > _PLAIN_DIGITS:
        raise ValueError(f"the number {text[:40]} is too large or too small to be an argument")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > _PLAIN_DIGITS:
        raise ValueError(f"the number {text[:40]}... has more than {_PLAIN_DIGITS} digits")
    return int(text)


def loads(text: str | bytes, *, bounded: bool = False) -> Any:
    """Parse JSON, reading non-integer numbers as exact ``Decimal``.

    ``NaN`` and ``Infinity`` (which Python's ``json`` accepts) are refused with
    ``ValueError``. ``bounded=True``, for what a model sends, also refuses numbers
    of more than 400 digits or with an exponent beyond 400: no argument is that
    large, and turning one into an ``int`` would stall the process.
    """
    if bounded:
        return json.loads(
            text,
            parse_float=_bounded_decimal,
            parse_int=_bounded_int,
            parse_constant=_refuse_constant,
        )
    return json.loads(text, parse_float=Decimal, parse_constant=_refuse_constant)


def to_plain(value: Any) -> Any:
    """Turn pydantic models into plain dicts, keeping ``Decimal`` as ``Decimal``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    return value


def _number(value: Decimal, *, canonical: bool) -> str:
    """A finite ``Decimal`` as a JSON number, exactly.

    Canonical form drops trailing zeros by hand: ``Decimal.normalize`` would round
    to the context's 28 digits and make two different amounts spell the same.
    """
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number; money and amounts must be finite")
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, so not 'n', 'N' or 'F'
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0" if canonical or exponent < -_PLAIN_DIGITS else format(value, "f")
    if canonical:
        stripped = digits.rstrip("0")
        exponent += len(digits) - len(stripped)
        digits = stripped
    minus = "-" if sign else ""
    point = len(digits) + exponent  # where the decimal point falls in ``digits``
    if exponent >= 0 and point <= _PLAIN_DIGITS:
        return minus + digits + "0" * exponent
    if exponent < 0 and point > 0:
        return minus + digits[:point] + "." + digits[point:]
    if exponent < 0 and -point <= _PLAIN_DIGITS:
        return minus + "0." + "0" * -point + digits
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{minus}{mantissa}E{point - 1:+d}"


def _integer(value: int, *, canonical: bool) -> str:
    if -(10**_PLAIN_DIGITS) < value < 10**_PLAIN_DIGITS:
        return str(value)
    return _number(Decimal(value), canonical=canonical)


def _write(value: Any, out: list[str], *, canonical: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, int):
        out.append(_integer(value, canonical=canonical))
    elif isinstance(value, Decimal):
        out.append(_number(value, canonical=canonical))
    elif isinstance(value, float):
        out.append(_number(Decimal(repr(value)), canonical=canonical))
    elif isinstance(value, BaseModel):
        _write(value.model_dump(mode="python"), out, canonical=canonical)
    elif isinstance(value, Mapping):
        items = sorted(value.items()) if canonical else value.items()
        out.append("{")
        for index, (key, item) in enumerate(items):
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            if index:
                out.append(",")
            out.append(_encode_str(key))
            out.append(":")
            _write(item, out, canonical=canonical)
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _write(item, out, canonical=canonical)
        out.append("]")
    else:
        # Dates, enums, UUIDs: fall back to pydantic's JSON form of the value.
        from pydantic_core import to_jsonable_python

        _write(to_jsonable_python(value), out, canonical=canonical)


def dumps(value: Any) -> str:
    """Write JSON compactly, with ``Decimal`` as an exact JSON number."""
    out: list[str] = []
    _write(value, out, canonical=False)
    return "".join(out)


def canonical(value: Any) -> str:
    """The one spelling of a JSON value: sorted keys, normalised numbers."""
    out: list[str] = []
    _write(value, out, canonical=True)
    return "".join(out)


def canonical_hash(value: Any) -> str:
    """SHA-256 (hex) of the canonical spelling of ``value``."""
    # A lone surrogate is not text: encoding raises UnicodeEncodeError (a ValueError).
    return hashlib.sha256(canonical(value).encode()).hexdigest()
