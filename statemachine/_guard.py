"""The output guard: every model reply becomes exactly one typed outcome.

:meth:`OutputGuard.check` turns a :class:`ModelReply` into one of four outcomes,
the union :data:`GuardOutcome`, to be handled with an exhaustive ``match``:

- :class:`Parsed`: a frozen, validated instance of the schema, with the exact JSON
  bytes it was rebuilt from and their SHA-256 (what is shipped is what was validated);
- :class:`Refusal`: the model refused (``finish_reason`` ``refusal`` or ``content_filter``);
- :class:`Truncated`: the reply hit the token limit (``finish_reason`` ``length``);
- :class:`Invalid`: anything else, with :class:`Diagnostic` s that say where (a JSON
  path such as ``$.items[2].amount``), what was seen, and which fixes are allowed.

``check`` never raises for anything a model can send. Validation runs in three
phases: *normalise* (``"$1,200.50"`` -> ``Decimal("1200.50")`` for money fields,
while ``"$1.000"`` and ``"1,000"`` are refused as ambiguous unless the guard is told
the decimal separator; ``"tomorrow"`` -> a date given the run's ``today``),
*type-check* (the pydantic schema), and *cross-field rules* (functions of the value
and the agent's dependencies). The :class:`GuardMode` is configuration:

- ``auto_repair`` (default): when the text is not JSON, at most two mechanical fixes
  (strip one Markdown code fence, cut to the outermost braces, drop trailing commas
  outside strings) and never anything cleverer; a fix only deletes characters that
  are not part of a value, so no value is ever changed, and nothing is closed or
  completed. A repair never changes the JSON type of the value the text begins with:
  an unterminated array is not cut to its first object (the reply is invalid, and a
  ``json.not_object`` diagnostic says the schema wants an object);
- ``reject``: no repair; in :func:`validate_with_retries` the first invalid reply
  raises :class:`OutputRejectedError` at once (no retry, no fallback);
- ``constrained``: the schema is sent with the request (``ModelRequest.output_schema``)
  to a backend that enforces it while decoding; a model that does not declare
  ``constrained = True`` fails at start-up (:meth:`OutputGuard.check_backend`) with
  :class:`SetupError` instead of silently falling back to validation. The reply is
  still type-checked and the rules still run; nothing is repaired.

:func:`validate_with_retries` is the validation loop: feedback built from the
diagnostics, at most three attempts, an early stop when two rounds in a row bring no
new minimum of errors, detection of retries that change values which had passed,
and exhaustion as a result with a status (never an exception) that also adds one to
the OpenTelemetry counter ``statemachine.validation.fallbacks``.

:class:`Diagnostic`, the JSON paths, the schema walker and the type diagnostics are
in ``_schema``, with the agent's configuration (:func:`validate_config`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from datetime import date, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeAlias, TypeVar, final

import attrs
from pydantic import BaseModel, StringConstraints, ValidationError

from . import _json
from ._errors import ConfigError, OutputRejectedError, OutputTamperedError, SetupError
from ._model import Message, Model, ModelReply, ModelRequest
from ._schema import (
    Diagnostic,
    Leaf,
    _clip,
    _evidence,
    _find_surrogate,
    _is_model,
    _leaves,
    _models_in,
    _parse_path,
    _Path,
    _related,
    _render,
    _type_diagnostics,
    _unknown,
    _walk,
)

if TYPE_CHECKING:
    from opentelemetry import metrics

__all__ = [
    "Ask",
    "CustomerResponse",
    "GuardMode",
    "GuardOutcome",
    "Invalid",
    "OutputGuard",
    "Parsed",
    "Refusal",
    "Repair",
    "Rule",
    "Truncated",
    "ValidationResult",
    "validate_with_retries",
]

T = TypeVar("T", bound=BaseModel)

FALLBACK_COUNTER = "statemachine.validation.fallbacks"


@functools.cache
def _fallbacks() -> metrics.Counter:
    """The fallback counter of the global meter provider's meter, created on first use.

    Created here rather than at import, so that ``import statemachine`` does not load
    opentelemetry. Before an SDK is installed it is the global provider's proxy, which
    forwards to the SDK installed later, as a counter made at import did.
    """
    from opentelemetry import metrics

    return metrics.get_meter("statemachine").create_counter(
        FALLBACK_COUNTER, unit="1", description="validation loops that ended without a valid reply"
    )


# --- rules -----------------------------------------------------------------------------


Rule: TypeAlias = Callable[[T, Any], Iterable[Diagnostic]]
"""A cross-field rule: ``(value, deps) -> diagnostics``; errors make the reply invalid.

A rule runs only on a value that passed the type-check. A rule that raises is a bug
in the rule, not a problem with the reply: the exception propagates.
"""


# --- outcomes --------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _ship_bytes(value: BaseModel) -> bytes:
    """The JSON bytes of a validated value: exact numbers, field aliases, schema order."""
    return _json.dumps(value.model_dump(mode="python", by_alias=True)).encode()


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


@final
@attrs.frozen(kw_only=True)
class Parsed(Generic[T]):
    """A reply that passed all three phases: verified and shipped are one object.

    ``value`` is frozen and was rebuilt from ``data``, the exact JSON bytes that were
    validated; ``sha256`` is their hash, for the run's history. Ship ``verify()``'s
    result: it refuses (:class:`OutputTamperedError`) if ``value`` or ``data`` no
    longer match what was validated.
    """

    value: T
    data: bytes = attrs.field(repr=False)
    sha256: str
    repairs: tuple[Repair, ...] = ()
    normalised: tuple[str, ...] = ()
    warnings: tuple[Diagnostic, ...] = ()

    def verify(self) -> bytes:
        """The bytes to ship, after checking they are still the ones that were validated."""
        actual = _sha256(self.data)
        if actual != self.sha256:
            raise OutputTamperedError("data", recorded=self.sha256, actual=actual)
        try:
            rebuilt = _sha256(_ship_bytes(self.value))
        except (ValueError, TypeError, RecursionError):
            rebuilt = "(not serialisable)"
        if rebuilt != self.sha256:
            raise OutputTamperedError("value", recorded=self.sha256, actual=rebuilt)
        return self.data


@final
@attrs.frozen(kw_only=True)
class Refusal:
    """The model refused to answer, or its provider's content filter stopped it."""

    text: str
    finish_reason: Literal["refusal", "content_filter"]


@final
@attrs.frozen(kw_only=True)
class Truncated:
    """The reply was cut off at the token limit; ``text`` is what arrived."""

    text: str


@final
@attrs.frozen(kw_only=True)
class Invalid:
    """A reply that failed a phase, with the diagnostics that say what to change.

    ``document`` is the JSON value after repair and normalisation (``None`` when the
    text was not JSON): the partial result a fallback may use.
    """

    raw: str
    diagnostics: tuple[Diagnostic, ...]
    repairs: tuple[Repair, ...] = ()
    document: Any = None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The diagnostics of severity ``error``."""
        return tuple(item for item in self.diagnostics if item.severity == "error")


GuardOutcome: TypeAlias = Parsed[T] | Refusal | Truncated | Invalid
"""Every model reply is exactly one of these; ``match`` on all four."""


# --- repair ----------------------------------------------------------------------------

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
# repair must not change. Text that begins otherwise is prose around a value.
_VALUE_START = re.compile(
    r'(?P<object>\{)|(?P<array>\[)|(?P<string>")|(?P<number>-?[0-9])'
    r"|(?P<boolean>(?:true|false)\b)|(?P<null>null\b)"
)


def _begins(text: str) -> str | None:
    """The JSON type of the value ``text`` begins with (``"array"``...); ``None`` for prose."""
    match = _VALUE_START.match(text.lstrip())
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


# --- normalise -------------------------------------------------------------------------

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


# --- the guard -------------------------------------------------------------------------


class GuardMode(StrEnum):
    """How the guard treats a reply that is not valid: configuration, never assumed."""

    REJECT = "reject"
    AUTO_REPAIR = "auto_repair"
    CONSTRAINED = "constrained"


def _guard_mode(mode: GuardMode | str) -> GuardMode:
    try:
        return GuardMode(mode)
    except ValueError:
        modes = [str(each) for each in GuardMode]
        raise ConfigError(
            (_unknown(repr(mode), "guard mode", modes),), path="$.mode", key=str(mode)
        ) from None


Ask: TypeAlias = Callable[[str | None], Awaitable[ModelReply]]
"""Asks the model once: ``None`` the first time, then the feedback on the last reply."""


@final
@attrs.frozen(init=False)
class OutputGuard(Generic[T]):
    """Turns model replies into :data:`GuardOutcome` values for one frozen schema.

    ``rules`` run after the type-check, with the agent's dependencies. ``normalise``
    (default on) converts money text and relative dates before the type-check;
    ``currency_marks`` are the marks money text may carry (other currencies are not
    silently converted: their amounts fail the type-check and the model is asked for
    a number). ``decimal_separator`` (``"."`` or ``","``) says which separator marks
    decimals in money text, the other grouping thousands; left ``None``, the spelling
    must say: ``"1,000.50"`` and ``"1.000,50"`` are read, while one separator with
    exactly three digits after it (``"1.000"``, ``"$1,000"``) is refused as ambiguous
    (``money.ambiguous``), mark or no mark; set, text spelled otherwise is refused
    (``money.separator``). The schema and every model nested in it must be frozen.
    """

    schema: type[T]
    mode: GuardMode
    rules: tuple[Rule[T], ...]
    normalise: bool
    currency_marks: tuple[str, ...]
    decimal_separator: DecimalSeparator | None

    def __init__(
        self,
        schema: type[T],
        *,
        mode: GuardMode | str = GuardMode.AUTO_REPAIR,
        rules: Iterable[Rule[T]] = (),
        normalise: bool = True,
        currency_marks: Iterable[str] = ("$", "USD"),
        decimal_separator: DecimalSeparator | None = None,
    ) -> None:
        if not _is_model(schema):
            raise SetupError(
                f"OutputGuard needs a pydantic model class as its schema, got {schema!r}"
            )
        thawed = [
            model.__name__
            for model in _models_in(schema, set())
            if not model.model_config.get("frozen")
        ]
        if thawed:
            raise SetupError(
                f"the output schema {schema.__name__} must be frozen, so that the reply "
                "validated is the reply shipped; add model_config = ConfigDict(frozen=True) "
                f"to {', '.join(thawed)}"
            )
        marks = tuple(currency_marks)
        if any(not mark.strip() or any(char.isdigit() for char in mark) for mark in marks):
            raise SetupError(f"currency marks must be non-blank and hold no digits: {marks!r}")
        if decimal_separator not in (None, ".", ","):
            raise SetupError(
                f"decimal_separator must be '.', ',' or None (read it off the spelling), "
                f"got {decimal_separator!r}"
            )
        # attrs writes __attrs_init__ for init=False; mypy's attrs plugin knows it, pyright not.
        self.__attrs_init__(  # pyright: ignore[reportAttributeAccessIssue]
            schema=schema,
            mode=_guard_mode(mode),
            rules=tuple(rules),
            normalise=normalise,
            currency_marks=marks,
            decimal_separator=decimal_separator,
        )

    def check(
        self, reply: ModelReply, *, deps: Any = None, today: date | None = None
    ) -> GuardOutcome[T]:
        """The outcome of one reply; never raises for anything a model can send.

        ``today`` is the run's date, for ``"today"``/``"tomorrow"``/``"yesterday"``;
        without it those words are left for the type-check to refuse. ``deps`` is
        passed to the rules (a rule that raises is a bug in the rule: it propagates).
        """
        return self._check(reply, deps, today)[0]

    def check_text(
        self, text: str, *, deps: Any = None, today: date | None = None
    ) -> Parsed[T] | Invalid:
        """Validate JSON text that is not a reply: a tool call's arguments, say."""
        return self._check_text(text, deps, today)[0]

    def check_backend(self, model: Model) -> None:
        """At start-up: in ``constrained`` mode, refuse a model that cannot enforce a schema."""
        if self.mode is GuardMode.CONSTRAINED and getattr(model, "constrained", False) is not True:
            raise SetupError(
                f"guard mode 'constrained' needs a model that enforces the output schema "
                f"while decoding, but {type(model).__name__} does not declare "
                "constrained = True; configure a backend with structured output, or use "
                "mode 'auto_repair' or 'reject' to validate after generation"
            )

    @property
    def output_schema(self) -> dict[str, Any]:
        """The JSON schema of the output, as a constrained backend receives it."""
        return self.schema.model_json_schema()

    def prepare(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the output schema attached in ``constrained`` mode."""
        if self.mode is not GuardMode.CONSTRAINED:
            return request
        return request.model_copy(update={"output_schema": self.output_schema})

    def ask_model(self, model: Model, request: ModelRequest) -> Ask:
        """An :data:`Ask` for :func:`validate_with_retries` that calls ``model``.

        Checks the backend at once (a constrained guard and an unconstrained model
        fail here, at start-up). Each retry adds the previous reply and the feedback
        to the conversation.
        """
        self.check_backend(model)
        prepared = self.prepare(request)
        conversation = list(prepared.messages)
        replies: list[ModelReply] = []

        async def ask(feedback: str | None) -> ModelReply:
            if feedback is not None and replies:
                conversation.append(Message(role="assistant", content=replies[-1].text))
                conversation.append(Message(role="user", content=feedback))
            answer = await model.complete(
                prepared.model_copy(update={"messages": tuple(conversation)})
            )
            replies.append(answer)
            return answer

        return ask

    def _check(
        self, reply: ModelReply, deps: Any, today: date | None
    ) -> tuple[GuardOutcome[T], _Loaded | None]:
        match reply.finish_reason:
            case "refusal" | "content_filter" as reason:
                return Refusal(text=reply.text, finish_reason=reason), None
            case "length":
                return Truncated(text=reply.text), None
        if reply.finish_reason == "tool_calls" or reply.tool_calls:
            names = ", ".join(call.name for call in reply.tool_calls) or "(none named)"
            problem = Diagnostic(
                code="reply.tool_calls",
                message=f"the reply called tools ({names}) where an answer was expected",
                allowed_fixes=("answer with the JSON object instead of calling a tool",),
            )
            return Invalid(raw=reply.text, diagnostics=(problem,)), None
        return self._check_text(reply.text, deps, today)

    def _check_text(
        self, text: str, deps: Any, today: date | None
    ) -> tuple[Parsed[T] | Invalid, _Loaded | None]:
        parsed = _parse(text, repair=self.mode is GuardMode.AUTO_REPAIR)
        if isinstance(parsed, Diagnostic):
            shape = _not_an_object(text)
            problems = (parsed,) if shape is None else (parsed, shape)
            return Invalid(raw=text, diagnostics=problems), None
        loaded, repairs = parsed
        surrogate = _find_surrogate(loaded.value)
        if surrogate is not None:
            problem = Diagnostic(
                code="json.surrogate",
                message="this text holds a lone UTF-16 surrogate, which is not a character",
                path=_render(surrogate),
                allowed_fixes=("write the text without \\ud800-\\udfff escapes",),
            )
            invalid = Invalid(raw=text, diagnostics=(problem,), repairs=repairs)
            return invalid, None
        notes: list[str] = []
        unread: list[Diagnostic] = []
        document = loaded.value
        try:
            if self.normalise:
                marks, decimal = self.currency_marks, self.decimal_separator
                leaf = _normaliser(today, marks, decimal, notes, unread)
                document = _walk(self.schema, document, (), leaf=leaf)
            candidate = self.schema.model_validate(document)
        except ValidationError as error:
            said = {item.path for item in unread}
            typed = _type_diagnostics(error, document, self.schema)
            diagnostics = (*unread, *(item for item in typed if item.path not in said))
            invalid = Invalid(raw=text, diagnostics=diagnostics, repairs=repairs, document=document)
            return invalid, _Loaded(document)
        except (ArithmeticError, RecursionError) as error:
            problem = Diagnostic(
                code="type.invalid",
                message=f"the reply could not be checked: {type(error).__name__}",
                allowed_fixes=("send plain values of the declared types",),
            )
            return Invalid(raw=text, diagnostics=(problem,), repairs=repairs), None
        if unread:  # Money read the text as a plain number; the model must say which
            invalid = Invalid(
                raw=text, diagnostics=tuple(unread), repairs=repairs, document=document
            )
            return invalid, _Loaded(document)
        shipped = self._round_trip(candidate)
        if isinstance(shipped, Diagnostic):
            invalid = Invalid(raw=text, diagnostics=(shipped,), repairs=repairs, document=document)
            return invalid, _Loaded(document)
        value, data = shipped
        found = tuple(item for rule in self.rules for item in rule(value, deps))
        if any(item.severity == "error" for item in found):
            invalid = Invalid(raw=text, diagnostics=found, repairs=repairs, document=document)
            return invalid, _Loaded(document)
        outcome = Parsed(
            value=value,
            data=data,
            sha256=_sha256(data),
            repairs=repairs,
            normalised=tuple(notes),
            warnings=found,
        )
        return outcome, _Loaded(document)

    def _round_trip(self, candidate: T) -> tuple[T, bytes] | Diagnostic:
        """The value rebuilt from its own JSON bytes: what is shipped is what was checked."""
        try:
            data = _ship_bytes(candidate)
            value = self.schema.model_validate(_json.loads(data))
        except (ValueError, TypeError, ArithmeticError, RecursionError) as error:
            first_line = (str(error).splitlines() or [""])[0]
            reason = f"{type(error).__name__}: {first_line}"
        else:
            if value == candidate:
                return value, data
            reason = "the value read back differs from the value written"
        return Diagnostic(
            code="schema.round_trip",
            message=f"the validated value cannot be shipped as JSON ({reason})",
            allowed_fixes=("send plain JSON values of the declared types",),
        )


@final
class CustomerResponse(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """The reply a customer reads: text, non-empty after trimming, at most 4,000 characters."""

    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]


# --- the validation loop ---------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class ValidationResult(Generic[T]):
    """How a validation loop ended: a status, every outcome, and the best partial.

    ``status`` is ``ok`` (the last outcome is :class:`Parsed`), ``exhausted`` (attempts
    used up, or two rounds in a row without a new minimum of errors), ``refused`` or
    ``truncated``. ``best`` is the outcome with the fewest errors (JSON that parsed
    beats text that did not); ``reason`` says in words why the loop stopped.
    """

    status: Literal["ok", "exhausted", "refused", "truncated"]
    outcomes: tuple[GuardOutcome[T], ...]
    best: GuardOutcome[T]
    reason: str

    @property
    def outcome(self) -> GuardOutcome[T]:
        """The last attempt's outcome."""
        return self.outcomes[-1]

    @property
    def attempts(self) -> int:
        """How many times the model was asked."""
        return len(self.outcomes)

    @property
    def history(self) -> tuple[tuple[Diagnostic, ...], ...]:
        """The diagnostics of each attempt, warnings included."""
        return tuple(_diagnostics_of(outcome) for outcome in self.outcomes)

    @property
    def parsed(self) -> Parsed[T] | None:
        """The validated reply, when the status is ``ok``."""
        last = self.outcomes[-1]
        return last if isinstance(last, Parsed) else None

    @property
    def value(self) -> T | None:
        """The validated, frozen value, when the status is ``ok``."""
        parsed = self.parsed
        return None if parsed is None else parsed.value

    @property
    def sha256(self) -> str | None:
        """SHA-256 of the shipped bytes, for the run's history, when the status is ``ok``."""
        parsed = self.parsed
        return None if parsed is None else parsed.sha256


def _diagnostics_of(outcome: GuardOutcome[Any]) -> tuple[Diagnostic, ...]:
    match outcome:
        case Parsed():
            return outcome.warnings
        case Invalid():
            return outcome.diagnostics
        case Refusal() | Truncated():
            return ()


def _score(outcome: GuardOutcome[Any], document: _Loaded | None) -> tuple[int, int]:
    """Lower is better: a valid reply, then JSON by its error count, then the rest."""
    match outcome:
        case Parsed():
            return (0, 0)
        case Invalid():
            return (1 if document is not None else 2, len(outcome.errors))
        case Refusal() | Truncated():
            return (3, 0)


def _changed_after_pass(
    before: Any, diagnosed: Iterable[Diagnostic], after: Any, previous: int
) -> tuple[Diagnostic, ...]:
    """Warnings for values outside every diagnosed path that differ from the last attempt."""
    paths = [_parse_path(item.path) for item in diagnosed]
    old, new = _leaves(before), _leaves(after)
    changes = []
    for path in sorted(old.keys() | new.keys(), key=lambda each: [str(step) for step in each]):
        if old.get(path) == new.get(path) or any(_related(path, each) for each in paths):
            continue
        if path not in new:
            message = f"this value passed in attempt {previous} but was removed"
            fix = f"restore the value you sent in attempt {previous}: {old[path]}"
        elif path not in old:
            message = f"this value was added, but nothing here was diagnosed in attempt {previous}"
            fix = "remove this value"
        else:
            message = (
                f"this value passed in attempt {previous} but was changed from {old[path]} "
                f"to {new[path]}"
            )
            fix = f"restore the value you sent in attempt {previous}: {old[path]}"
        changes.append(
            Diagnostic(
                code="value.changed_after_pass",
                severity="warning",
                message=message,
                path=_render(path),
                evidence=new.get(path),
                allowed_fixes=(fix,),
            )
        )
    return tuple(changes)


def _feedback(invalid: Invalid, attempt: int, attempts: int) -> str:
    """What the model is told after an invalid reply: what, where, why, and what to change."""
    lines = [f"Attempt {attempt} of {attempts} was not accepted. Fix these problems:"]
    warnings = [item for item in invalid.diagnostics if item.severity == "warning"]
    for item in (*invalid.errors, *warnings):
        seen = "nothing" if item.evidence is None else item.evidence
        fixes = "; ".join(item.allowed_fixes) or "none given"
        lines.append(
            f"- {item.path} ({item.code}, {item.severity}): {item.message.rstrip('.')}. "
            f"Seen: {seen}. Allowed fixes: {fixes}."
        )
    if invalid.repairs:
        done = "; ".join(_REPAIR_WORDS[repair] for repair in invalid.repairs)
        lines.append(f"Your reply also needed repair ({done}): send the JSON object alone.")
    lines.append(
        "Change only the values at the paths listed above, choosing from their allowed "
        "fixes; every other value passed and must stay exactly as you sent it. Send the "
        "whole corrected JSON object and nothing else."
    )
    return "\n".join(lines)


async def validate_with_retries(
    guard: OutputGuard[T],
    ask: Ask,
    *,
    attempts: int = 3,
    deps: Any = None,
    today: date | None = None,
    fallbacks: metrics.Counter | None = None,
) -> ValidationResult[T]:
    """Ask until a reply passes ``guard``, at most ``attempts`` times; never raises on exhaustion.

    After an invalid reply, ``ask`` receives feedback built from its diagnostics. The
    loop stops early when two rounds in a row bring no new minimum of errors. A retry
    that changes a value outside every diagnosed path gets a ``value.changed_after_pass``
    warning. Exhaustion returns status ``exhausted`` with the best partial and adds one
    to ``fallbacks`` (default: the ``statemachine.validation.fallbacks`` counter of the
    global OpenTelemetry meter provider). A refusal or a truncation ends the loop at
    once. In ``reject`` mode an invalid reply raises :class:`OutputRejectedError`.
    """
    if attempts < 1:
        raise SetupError(f"attempts must be at least 1, got {attempts}")
    outcomes: list[GuardOutcome[T]] = []
    scores: list[tuple[int, int]] = []
    feedback: str | None = None
    previous: tuple[Any, tuple[Diagnostic, ...]] | None = None
    lowest: tuple[int, int] | None = None
    stale = 0
    reason = ""
    for attempt in range(1, attempts + 1):
        outcome, document = guard._check(await ask(feedback), deps, today)
        outcome = _with_changes(outcome, document, previous, attempt)
        outcomes.append(outcome)
        scores.append(_score(outcome, document))
        if not isinstance(outcome, Invalid):
            status, said = _ending(outcome, attempt)
            return _result(status, outcomes, scores, said)
        if guard.mode is GuardMode.REJECT:
            raise OutputRejectedError(guard.schema.__name__, outcome.diagnostics)
        if lowest is None or scores[-1] < lowest:
            lowest, stale = scores[-1], 0
        else:
            stale += 1
        counts = ", ".join(str(score[1]) for score in scores)
        if stale >= 2 and attempt < attempts:
            reason = (
                f"stopped after attempt {attempt}: two rounds in a row brought no new "
                f"minimum of errors (errors per attempt: {counts})"
            )
            break
        reason = f"all {attempts} attempts were invalid (errors per attempt: {counts})"
        previous = (document.value, outcome.diagnostics) if document is not None else None
        feedback = _feedback(outcome, attempt, attempts)
    _count_fallback(fallbacks, guard.schema, stopped_early=len(outcomes) < attempts)
    return _result("exhausted", outcomes, scores, reason)


def _with_changes(
    outcome: GuardOutcome[T],
    document: _Loaded | None,
    previous: tuple[Any, tuple[Diagnostic, ...]] | None,
    attempt: int,
) -> GuardOutcome[T]:
    """``outcome`` with a ``value.changed_after_pass`` warning for each value that changed.

    Only values outside every path the last attempt's diagnostics named count; nothing
    is added on the first attempt, or when either reply was not JSON.
    """
    if previous is None or document is None:
        return outcome
    before, diagnosed = previous
    changes = _changed_after_pass(before, diagnosed, document.value, attempt - 1)
    if isinstance(outcome, Parsed):
        return attrs.evolve(outcome, warnings=outcome.warnings + changes)
    if isinstance(outcome, Invalid):
        return attrs.evolve(outcome, diagnostics=outcome.diagnostics + changes)
    return outcome


def _count_fallback(
    fallbacks: metrics.Counter | None, schema: type[BaseModel], *, stopped_early: bool
) -> None:
    """Add one to the fallback counter (``fallbacks``, else the global one) for ``schema``."""
    counter = _fallbacks() if fallbacks is None else fallbacks
    counter.add(
        1,
        {
            "statemachine.schema": schema.__name__,
            "statemachine.stop": "no_progress" if stopped_early else "attempts",
        },
    )


def _ending(
    outcome: Parsed[Any] | Refusal | Truncated, attempt: int
) -> tuple[Literal["ok", "refused", "truncated"], str]:
    match outcome:
        case Parsed():
            return "ok", f"attempt {attempt} passed"
        case Refusal():
            return "refused", f"the model refused ({outcome.finish_reason}) in attempt {attempt}"
        case Truncated():
            return "truncated", f"the reply was cut off at the token limit in attempt {attempt}"


def _result(
    status: Literal["ok", "exhausted", "refused", "truncated"],
    outcomes: list[GuardOutcome[T]],
    scores: list[tuple[int, int]],
    reason: str,
) -> ValidationResult[T]:
    best = min(range(len(outcomes)), key=lambda index: (scores[index], index))
    return ValidationResult(
        status=status, outcomes=tuple(outcomes), best=outcomes[best], reason=reason
    )
