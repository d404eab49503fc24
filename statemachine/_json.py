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


def loads(text: str | bytes) -> Any:
    """Parse JSON, reading non-integer numbers as exact ``Decimal``."""
    return json.loads(text, parse_float=Decimal)


def to_plain(value: Any) -> Any:
    """Turn pydantic models into plain dicts, keeping ``Decimal`` as ``Decimal``."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    return value


def _number(value: Decimal, *, canonical: bool) -> str:
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number; money and amounts must be finite")
    if canonical:
        value = value.normalize()
        if value == value.to_integral_value():
            return str(int(value))
    text = format(value, "f")
    return text


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
        out.append(str(value))
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
    return hashlib.sha256(canonical(value).encode()).hexdigest()
