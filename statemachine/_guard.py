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
in ``_schema``, with the agent's configuration (:func:`validate_config`). Reading the
text as JSON and the repairs (:class:`Repair`) are in ``_repair``; the normalisation
of money text and relative dates is in ``_normalise``.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Awaitable, Callable, Iterable
from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeAlias, TypeVar, final

import attrs
from pydantic import BaseModel, StringConstraints, ValidationError

from . import _json
from ._errors import ConfigError, OutputRejectedError, OutputTamperedError, SetupError
from ._model import Message, Model, ModelReply, ModelRequest
from ._normalise import DecimalSeparator, _normaliser
from ._repair import _REPAIR_WORDS, Repair, _Loaded, _not_an_object, _parse
from ._schema import (
    Diagnostic,
    _find_surrogate,
    _is_model,
    _leaves,
    _models_in,
    _parse_path,
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
        ruled = self._ruled(text, candidate, deps, repairs=repairs, notes=notes, document=document)
        return ruled, _Loaded(document)

    def _ruled(
        self,
        text: str,
        candidate: T,
        deps: Any,
        *,
        repairs: tuple[Repair, ...],
        notes: list[str],
        document: Any,
    ) -> Parsed[T] | Invalid:
        """The outcome of a value that passed the type-check.

        The value is rebuilt from its own JSON bytes (:meth:`_round_trip`), then the
        cross-field rules run; ``Parsed`` when both pass.
        """
        shipped = self._round_trip(candidate)
        if isinstance(shipped, Diagnostic):
            return Invalid(raw=text, diagnostics=(shipped,), repairs=repairs, document=document)
        value, data = shipped
        found = tuple(item for rule in self.rules for item in rule(value, deps))
        if any(item.severity == "error" for item in found):
            return Invalid(raw=text, diagnostics=found, repairs=repairs, document=document)
        return Parsed(
            value=value,
            data=data,
            sha256=_sha256(data),
            repairs=repairs,
            normalised=tuple(notes),
            warnings=found,
        )

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
