"""The guard's first phase: money text and relative dates become typed values.

:func:`_normaliser` makes the leaf function the schema walker (``_schema._walk``)
calls on each value; it converts the strings the schema types as ``Decimal`` or
``date`` and leaves everything else as it is. Money text
(``"$1,200.50"``) is read exactly (:func:`_money`), with thousands separators only
in groups of three and at most one currency mark; a spelling that does not say which
separator marks decimals (``"$1.000"``, ``"1,000"``) is refused as ambiguous unless
the guard is told the :data:`DecimalSeparator`, and text against a configured one is
refused too. ``"today"``, ``"tomorrow"`` and ``"yesterday"`` become dates given the
run's ``today``. Every conversion is noted, and every refusal is a
:class:`Diagnostic` that the guard reports instead of the type-check's.

``_guard`` is the one user of this module.
"""

from __future__ import annotations

import functools
import re
from datetime import date, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeAlias

import attrs

from ._schema import Diagnostic, Leaf, _clip, _evidence, _Path, _render

__all__ = ["DecimalSeparator", "_normaliser"]

_RELATIVE_DAYS = {"today": 0, "tomorrow": 1, "yesterday": -1}
_MONEY_CHARS = 400  # the bound _json.loads(bounded=True) puts on a model's numbers


@functools.lru_cache(maxsize=32)
def _money_pattern(marks: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(mark) for mark in sorted(marks, key=len, reverse=True))
    mark = f"(?:{alternatives})" if alternatives else "(?!)"
    return re.compile(
        rf"(?P<sign>[-+]?) ?(?:(?P<prefix>{mark}) ?)?(?P<sign2>[-+]?)"
        r"(?P<number>\d[\d.,]*\d|\d|[.,]\d+)"
        rf"(?: ?(?P<suffix>{mark}))?"
    )


DecimalSeparator: TypeAlias = Literal[".", ","]
# A group that may lead a number written with thousands separators: "1", "12", "123".
_LEADING_GROUP = re.compile(r"(?!0)\d{1,3}")
_GROUP = re.compile(r"\d{3}")


def _decimal_separator(number: str) -> DecimalSeparator | None:
    """The separator that marks decimals in ``number``, read off its spelling.

    ``None`` when the spelling does not say: one separator with exactly three digits
    after it and a group of one to three digits (not starting with 0) before it, as in
    ``1.000`` or ``2,500``, is a thousands separator in some countries and a decimal
    point in others. Every other spelling says: both separators (the last one written
    marks decimals: ``1,000.50``, ``1.000,50``), one separator written twice or more
    (grouping: ``1,000,000``), or one separator that cannot group thousands (``1.5``,
    ``1,50``, ``0.001``, ``1234.567``).
    """
    written = [char for char in number if char in ".,"]
    last: DecimalSeparator = "," if written and written[-1] == "," else "."
    if len(set(written)) == 2:
        return last
    if len(written) > 1:
        return "." if last == "," else ","
    whole, _, fraction = number.partition(last)
    if _GROUP.fullmatch(fraction) and _LEADING_GROUP.fullmatch(whole):
        return None
    return last


def _plain_digits(number: str, decimal: DecimalSeparator) -> str | None:
    """``number`` without grouping and with ``.`` for decimals; ``None`` if malformed.

    The other separator may only group the whole part in threes (``1,000,000``).
    """
    grouping = "," if decimal == "." else "."
    whole, point, fraction = number.partition(decimal)
    if (point and not fraction) or any(char in ".," for char in fraction):
        return None
    if grouping in whole:
        leading, *groups = whole.split(grouping)
        if not (_LEADING_GROUP.fullmatch(leading) and all(map(_GROUP.fullmatch, groups))):
            return None
        whole = leading + "".join(groups)
    return f"{whole}.{fraction}" if point else whole


@attrs.frozen
class _Unread:
    """Money text the guard will not read, and why: a diagnostic's code and message."""

    code: str
    message: str


def _money(
    text: str, marks: tuple[str, ...], decimal: DecimalSeparator | None
) -> Decimal | _Unread | None:
    """An amount written as text, exactly; :class:`_Unread` when its spelling is unclear.

    Accepted: a plain number, one currency mark before or after it, and thousands
    separators grouped in threes. With ``decimal`` configured, it marks decimals and
    the other separator groups thousands; text against that is unread
    (``money.separator``). Without it, the spelling must say which is which
    (:func:`_decimal_separator`): ``"1,200"``, ``"1.200"``, ``"$1.000"`` and
    ``"$1,000"`` are unread (``money.ambiguous``), with or without a mark. ``None``
    for text that is not money, and, like a JSON number from a model, for text of
    more than 400 characters.
    """
    if len(text) > _MONEY_CHARS:
        return None
    match = _money_pattern(marks).fullmatch(text.strip())
    if match is None or (match["sign"] and match["sign2"]) or (match["prefix"] and match["suffix"]):
        return None
    sign, number = match["sign"] or match["sign2"], match["number"]
    separator = decimal if decimal is not None else _decimal_separator(number)
    if separator is None:  # one separator, three digits after it: drop it, or read a point
        written = "," if "," in number else "."
        grouped, pointed = number.replace(written, ""), number.replace(written, ".")
        return _Unread(
            "money.ambiguous",
            f"the amount {_evidence(text)} is ambiguous: it may mean "
            f"{Decimal(sign + grouped)} or {Decimal(sign + pointed)}",
        )
    digits = _plain_digits(number, separator)
    if digits is not None:
        return Decimal(sign + digits)
    if decimal is None:  # malformed: Money refuses it too ("12,34,567")
        return None
    return _Unread(
        "money.separator",
        f"the amount {_evidence(text)} is not written with {decimal!r} as its decimal "
        "separator, as configured",
    )


def _normaliser(
    today: date | None,
    marks: tuple[str, ...],
    decimal: DecimalSeparator | None,
    notes: list[str],
    unread: list[Diagnostic],
) -> Leaf:
    """Converts money text and relative dates; notes each conversion and each refusal.

    Money text it will not read is left unchanged and reported in ``unread``: the
    caller reports it instead of the type-check, as ``Money`` itself would read
    ``"1.000"`` as the number 1.000.
    """

    def normalise(annotation: Any, value: Any, path: _Path) -> Any:
        if not isinstance(value, str):
            return value
        result: Decimal | date | None = None
        if annotation is Decimal:
            read = _money(value, marks, decimal)
            if isinstance(read, _Unread):
                unread.append(
                    Diagnostic(
                        code=read.code,
                        message=read.message,
                        path=_render(path),
                        evidence=_evidence(value),
                        allowed_fixes=("write the amount as a JSON number, e.g. 1200.50",),
                    )
                )
                return value
            result = read
        elif annotation is date and today is not None:
            days = _RELATIVE_DAYS.get(value.strip().lower())
            if days is not None:
                try:
                    result = today + timedelta(days=days)
                except OverflowError:
                    result = None
        if result is None:
            return value
        shown = _clip(result.isoformat() if isinstance(result, date) else str(result))
        notes.append(f"{_render(path)}: {_evidence(value)} -> {shown}")
        return result

    return normalise
