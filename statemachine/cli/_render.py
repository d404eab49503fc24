"""How the commands print: aligned text for a person, or one JSON document for a script."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from .. import RunRecord, dumps

__all__ = [
    "age",
    "count",
    "emit_json",
    "money",
    "pairs",
    "percent",
    "record_json",
    "seconds",
    "share",
    "table",
    "when",
]


def emit_json(value: Any) -> None:
    """Print ``value`` as one JSON document (money as exact JSON numbers)."""
    print(dumps(value))


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    body = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in body
    )


def pairs(rows: Iterable[tuple[str, str]], indent: str = "") -> str:
    """Labels and values, the values aligned."""
    items = list(rows)
    width = max((len(label) for label, _ in items), default=0)
    return "\n".join(f"{indent}{label.ljust(width)}  {value}" for label, value in items)


def when(moment: datetime) -> str:
    """A moment in UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def seconds(value: float) -> str:
    """A span of time: ``1.250s``, ``4m05s``, ``2h07m``."""
    if value < 60:
        return f"{value:.3f}s"
    minutes, rest = divmod(value, 60)
    if minutes < 60:
        return f"{int(minutes)}m{rest:02.0f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes):02d}m"


def age(span: timedelta) -> str:
    """A whole span in its largest whole unit, as a duration is written: ``30d``, ``90m``."""
    whole = int(span.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def count(number: Any, noun: str) -> str:
    """``1 token``, ``36 tokens``."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def money(value: Any) -> str:
    """``$137.32`` for an amount; anything else as it is."""
    return f"${value}" if isinstance(value, Decimal | int) else str(value)


def share(part: float, whole: float) -> float | None:
    """``part / whole`` to six places; ``None`` when there is no whole."""
    return None if whole == 0 else round(part / whole, 6)


def percent(value: float | None) -> str:
    """A share as a percentage, ``-`` for none."""
    return "-" if value is None else f"{value * 100:.1f}%"


def record_json(record: RunRecord) -> dict[str, Any]:
    """A run's registry row as JSON."""
    return {
        "run_id": record.run_id,
        "agent": record.agent,
        "status": record.status.value,
        "phase": record.phase,
        "waiting_for": record.waiting_for,
        "updated_at": record.updated_at.isoformat(),
        "seq": record.seq,
        "stop_requested": record.stop_requested,
        "decision_pending": record.decision_pending,
        "held": record.held,
        "reason": record.reason,
        "failures": record.failures,
        "retry_at": None if record.retry_at is None else record.retry_at.isoformat(),
    }
