"""What the SDK-based adapters share: numbers made sendable, the server's words, waits.

The providers' SDKs write request bodies with the standard library's JSON encoder,
which knows no ``Decimal`` (the library reads every number as one); they raise
errors that carry the HTTP response, whose ``retry-after`` header says how long the
service asked to wait.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from decimal import Decimal
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = ["EXCERPT_CHARS", "clip", "retry_after", "wire"]

EXCERPT_CHARS = 300


def wire(value: Any) -> Any:
    """``value`` with every ``Decimal`` made a number the SDK's JSON encoder writes.

    A whole ``Decimal`` goes as an integer, any other as a float (17 significant digits).
    """
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {key: wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return value


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The seconds a response's headers ask to wait before asking again; ``None``: no ask.

    ``retry-after-ms`` (OpenAI's, in milliseconds) wins over ``retry-after``, which is
    seconds or an HTTP date (then the seconds from ``now``, the epoch time, until it).
    A value that is negative, not finite or not readable is no ask.
    """
    milliseconds = _number(headers.get("retry-after-ms", ""))
    if milliseconds is not None:
        return milliseconds / 1000
    said = headers.get("retry-after", "").strip()
    seconds = _number(said)
    if seconds is not None or not said:
        return seconds
    try:
        when = parsedate_to_datetime(said)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is not one
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def clip(text: str) -> str:
    """``text``, cut to :data:`EXCERPT_CHARS` characters (and ``...``) when longer."""
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."
