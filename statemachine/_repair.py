"""Reading a reply's text as JSON, with at most two mechanical repairs.

:func:`_parse` reads the text (``_load``: empty, not JSON, a number too long, nesting
too deep, each a :class:`Diagnostic`) and, when the guard's mode allows it, tries the
:data:`_REPAIR_PLANS` in order: strip one Markdown code fence, cut to the outermost
braces, drop trailing commas outside strings, or two of them. A fix only deletes
characters that are not part of a value, and a repaired value keeps the JSON type of
the value the text began with (``_begins``); :func:`_not_an_object` says so when
unreadable text begins a value other than an object. :class:`Repair` names each fix.

``_guard`` is the one user of this module: its ``OutputGuard`` reads every reply here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import attrs

from . import _json
from ._schema import Diagnostic, _evidence

__all__ = ["_REPAIR_WORDS", "Repair", "_Loaded", "_not_an_object", "_parse"]


class Repair(StrEnum):
    """A mechanical fix ``auto_repair`` may apply; it deletes only characters outside values."""

    STRIP_FENCE = "strip_fence"
    CUT_TO_BRACES = "cut_to_braces"
    DROP_TRAILING_COMMA = "drop_trailing_comma"


_REPAIR_WORDS = {
    Repair.STRIP_FENCE: "a Markdown code fence was stripped",
    Repair.CUT_TO_BRACES: "text outside the outermost braces was cut",
    Repair.DROP_TRAILING_COMMA: "trailing commas were dropped",
}


_LANGUAGE_TAG = re.compile(r"[\w.+-]*")
# A whole JSON string (skipped unchanged), or a comma that only whitespace separates
# from a closing brace or bracket. JSON strings hold no raw newlines, so '.' suffices.
_STRING_OR_TRAILING_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|,(?=[ \t\r\n]*[}\]])')


def _strip_fence(text: str) -> str | None:
    """The body of the one fenced block in ``text``; ``None`` unless there is exactly one.

    Lines are split on ``\\n`` only: JSON strings may hold U+2028 or U+0085 raw, and
    they must come back unchanged. No JSON line starts with a backtick.
    """
    lines = text.split("\n")
    fences = [index for index, line in enumerate(lines) if line.lstrip().startswith("```")]
    if len(fences) != 2:
        return None
    opening, closing = fences
    tag = lines[opening].strip()[3:].strip()
    if lines[closing].strip() != "```" or not _LANGUAGE_TAG.fullmatch(tag):
        return None
    return "\n".join(lines[opening + 1 : closing])


def _cut_to_braces(text: str) -> str | None:
    """``text`` from its first ``{`` to its last ``}``; ``None`` if that changes nothing.

    Also ``None`` when the first ``{`` is inside a string, or inside a ``[`` still open
    there: the braces are then a string's text (``Note: "use {}"``) or an array's
    element (``Here: [{...}, {...}``), and cutting to them would change the value's
    type.
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start or (start == 0 and end == len(text) - 1):
        return None
    open_brackets, in_string, escaped = 0, False, False
    for char in text[:start]:
        if in_string:
            in_string, escaped = escaped or char != '"', not escaped and char == "\\"
        elif char == '"':
            in_string = True
        elif char == "[":
            open_brackets += 1
        elif char == "]" and open_brackets:
            open_brackets -= 1
    if in_string or open_brackets:
        return None
    return text[start : end + 1]


def _drop_trailing_commas(text: str) -> str | None:
    """``text`` without commas before ``}`` or ``]`` outside strings; ``None`` if none."""
    dropped = False

    def keep_strings(match: re.Match[str]) -> str:
        nonlocal dropped
        if match[0] == ",":
            dropped = True
            return ""
        return match[0]

    result = _STRING_OR_TRAILING_COMMA.sub(keep_strings, text)
    return result if dropped else None


_FIXES: dict[Repair, Callable[[str], str | None]] = {
    Repair.STRIP_FENCE: _strip_fence,
    Repair.CUT_TO_BRACES: _cut_to_braces,
    Repair.DROP_TRAILING_COMMA: _drop_trailing_commas,
}
# Fewest fixes first, the least invasive first; within a pair, in the order applied.
_REPAIR_PLANS: tuple[tuple[Repair, ...], ...] = (
    (Repair.STRIP_FENCE,),
    (Repair.DROP_TRAILING_COMMA,),
    (Repair.CUT_TO_BRACES,),
    (Repair.STRIP_FENCE, Repair.DROP_TRAILING_COMMA),
    (Repair.STRIP_FENCE, Repair.CUT_TO_BRACES),
    (Repair.CUT_TO_BRACES, Repair.DROP_TRAILING_COMMA),
)


# The JSON value a text begins with, by its first character (or literal): what a
# repair must not change. Text that begins otherwise is prose around a value. A literal
# counts with whatever follows it (``null1{}``, ``truex{}``: a literal cut short or run
# into noise, as a number's first digit counts): a word that merely begins with one
# (``nullable {...}``) is then not repaired, and the model is asked again, rather than a
# null read as an object.
_VALUE_START = re.compile(
    r'(?P<object>\{)|(?P<array>\[)|(?P<string>")|(?P<number>-?[0-9])'
    r"|(?P<boolean>true|false)|(?P<null>null)"
)


def _begins(text: str) -> str | None:
    """The JSON type of the value ``text`` begins with (``"array"``...); ``None`` for prose.

    An opening code fence line is looked past: the value is what the fenced text begins
    with (so cutting a fenced ``null{}`` to its braces is a change of type, as it is
    without the fence).
    """
    start = text.lstrip()
    if start.startswith("```"):
        _, _, start = start.partition("\n")
        start = start.lstrip()
    match = _VALUE_START.match(start)
    return None if match is None else match.lastgroup


def _json_type(value: Any) -> str:
    """The JSON type of a value read by ``_json.loads``, named as :func:`_begins` names it."""
    match value:
        case dict():
            return "object"
        case list():
            return "array"
        case str():
            return "string"
        case bool():
            return "boolean"
        case None:
            return "null"
        case _:
            return "number"


@attrs.frozen
class _Loaded:
    """A parsed JSON document (which may itself be ``null``)."""

    value: Any


def _load(text: str) -> _Loaded | Diagnostic:
    if not text.strip():
        return Diagnostic(
            code="json.empty",
            message="the reply is empty",
            evidence=_evidence(text),
            allowed_fixes=("send the JSON object",),
        )
    try:
        return _Loaded(_json.loads(text, bounded=True))
    except json.JSONDecodeError as error:
        start = max(0, error.pos - 20)
        return Diagnostic(
            code="json.syntax",
            message=f"the reply is not valid JSON: {error.msg} at line {error.lineno} "
            f"column {error.colno}",
            evidence=_evidence(text[start : error.pos + 20]),
            allowed_fixes=(
                "send one JSON object and nothing else: no Markdown, no text around it",
            ),
        )
    except ValueError as error:
        return Diagnostic(
            code="json.number",
            message=str(error),
            allowed_fixes=("write every number with at most 400 digits",),
        )
    except RecursionError:
        return Diagnostic(
            code="json.too_deep",
            message="the reply is nested too deeply to read",
            allowed_fixes=("send the object the schema describes, without extra nesting",),
        )


def _parse(text: str, *, repair: bool) -> tuple[_Loaded, tuple[Repair, ...]] | Diagnostic:
    """Read ``text`` as JSON, with at most two mechanical fixes when ``repair`` is set.

    A repaired value has the JSON type of the value the text began with, before and
    after each fix (prose and a fence line begin no value): text that begins an array
    is never repaired into an object, nor a string into a number.
    """
    first = _load(text)
    if isinstance(first, _Loaded) or not repair:
        return (first, ()) if isinstance(first, _Loaded) else first
    for plan in _REPAIR_PLANS:
        fixed: str | None = text
        begun = {_begins(text)}
        for fix in plan:
            assert fixed is not None
            fixed = _FIXES[fix](fixed)
            if fixed is None:  # this fix does not apply: the plan is not tried
                break
            begun.add(_begins(fixed))
        if fixed is not None:
            loaded = _load(fixed)
            if isinstance(loaded, _Loaded) and begun - {None} <= {_json_type(loaded.value)}:
                return loaded, plan
    return first


def _not_an_object(text: str) -> Diagnostic | None:
    """A diagnostic when unreadable ``text`` begins a JSON value other than an object.

    The body of its one fenced block, if it has one, is what counts. The schema is a
    model, so it always wants one object.
    """
    kind = _begins(_strip_fence(text) or text)
    if kind is None or kind == "object":
        return None
    named = "JSON null" if kind == "null" else f"a JSON {kind}"
    return Diagnostic(
        code="json.not_object",
        message=f"the reply begins with {named}, but the schema wants one JSON object",
        allowed_fixes=(f"send one JSON object instead of {named}",),
    )
