"""statemachine._guard: four outcomes, bounded repair, three phases, the validation loop."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from typing import Any, Literal

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError
from support import counted, exactly, fallbacks

from statemachine import (
    ConfigError,
    CustomerResponse,
    Diagnostic,
    GuardMode,
    GuardOutcome,
    Invalid,
    Message,
    ModelReply,
    ModelRequest,
    Money,
    OutputGuard,
    OutputRejectedError,
    OutputTamperedError,
    Parsed,
    Refusal,
    Repair,
    SetupError,
    ToolRequest,
    Truncated,
    ValidationResult,
    dumps,
    loads,
    validate_config,
    validate_with_retries,
)
from statemachine.testing import FunctionModel, ScriptedModel, reply

pytestmark = pytest.mark.anyio

NEW_YEAR = date(2026, 1, 1)


class LineItem(BaseModel):
    """One line of an invoice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sku: str
    amount: Money


class Invoice(BaseModel):
    """An invoice a model drafts: nested list items, money and a due date."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    customer: str
    items: tuple[LineItem, ...]
    due: date


class Ticket(BaseModel):
    """A support ticket a model triages."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    priority: Literal["low", "normal", "critical"]
    requires_human: bool
    summary: str
    refund: Money = Decimal(0)


class Stay(BaseModel):
    """A hotel stay: the end may not come before the start."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: date
    end: date


class Anything(BaseModel):
    """Any JSON object, kept as sent: for the repair properties."""

    model_config = ConfigDict(frozen=True, extra="allow")


@attrs.frozen
class SupportDeps:
    """The support agent's dependencies: the largest refund it may grant alone."""

    refund_limit: Decimal


def critical_needs_human(ticket: Ticket, deps: object) -> Iterator[Diagnostic]:
    """A critical ticket must go to a person."""
    if ticket.priority == "critical" and not ticket.requires_human:
        yield Diagnostic.for_rule(
            "critical_needs_human",
            "a critical ticket must be handed to a person",
            path="$.requires_human",
            seen=ticket.requires_human,
            fixes=("set requires_human to true", 'lower priority below "critical"'),
        )


def refund_within_limit(ticket: Ticket, deps: SupportDeps) -> Iterator[Diagnostic]:
    """A refund above the agent's limit is refused."""
    if ticket.refund > deps.refund_limit:
        yield Diagnostic.for_rule(
            "refund_within_limit",
            f"the refund is above this agent's limit of {deps.refund_limit}",
            path="$.refund",
            seen=ticket.refund,
            fixes=(f"refund at most {deps.refund_limit}", "set requires_human to true"),
        )


def end_after_start(stay: Stay, deps: object) -> Iterator[Diagnostic]:
    """A stay ends on or after the day it starts."""
    if stay.end < stay.start:
        yield Diagnostic.for_rule(
            "end_after_start",
            "the stay ends before it starts",
            path="$.end",
            seen=stay.end,
            fixes=("set end on or after start",),
        )


def short_summary(ticket: Ticket, deps: object) -> Iterator[Diagnostic]:
    """A long summary is allowed, with a warning."""
    if len(ticket.summary) > 20:
        yield Diagnostic.for_rule(
            "short_summary",
            "the summary is long",
            path="$.summary",
            seen=ticket.summary,
            fixes=("shorten the summary",),
            severity="warning",
        )


INVOICE = '{"customer":"ACME","items":[{"sku":"A","amount":12.50}],"due":"2026-02-01"}'
TICKET = '{"priority":"normal","requires_human":false,"summary":"late parcel"}'


def ticket(**changes: Any) -> str:
    """The JSON of a valid ticket with ``changes`` applied."""
    fields: dict[str, Any] = {"priority": "normal", "requires_human": False, "summary": "late"}
    return dumps(fields | changes)


def only(outcome: GuardOutcome[Any]) -> Invalid:
    """``outcome``, asserted to be Invalid."""
    assert isinstance(outcome, Invalid), outcome
    return outcome


def parsed(outcome: GuardOutcome[Any]) -> Parsed[Any]:
    """``outcome``, asserted to be Parsed."""
    assert isinstance(outcome, Parsed), outcome
    return outcome


# --- the four outcomes ------------------------------------------------------------------


def test_a_valid_reply_is_parsed_into_a_frozen_typed_value() -> None:
    """Valid JSON becomes the schema's instance, with its exact bytes and their hash."""
    result = parsed(OutputGuard(Invoice).check(reply(INVOICE)))
    assert result.value == Invoice(
        customer="ACME",
        items=(LineItem(sku="A", amount=Decimal("12.50")),),
        due=date(2026, 2, 1),
    )
    assert str(result.value.items[0].amount) == "12.50"
    assert result.data == INVOICE.encode()
    assert result.sha256 == hashlib.sha256(INVOICE.encode()).hexdigest()
    assert (result.repairs, result.normalised, result.warnings) == ((), (), ())


@pytest.mark.parametrize("reason", ["refusal", "content_filter"])
def test_a_refusal_is_a_refusal_even_when_its_text_is_valid_json(
    reason: Literal["refusal", "content_filter"],
) -> None:
    """The finish reason decides: a refused reply is never parsed."""
    outcome = OutputGuard(Invoice).check(ModelReply(text=INVOICE, finish_reason=reason))
    assert outcome == Refusal(text=INVOICE, finish_reason=reason)


def test_a_reply_cut_at_the_token_limit_is_truncated_not_repaired() -> None:
    """finish_reason 'length' is a truncation, whatever the text."""
    outcome = OutputGuard(Invoice).check(
        ModelReply(text='{"customer": "AC', finish_reason="length")
    )
    assert outcome == Truncated(text='{"customer": "AC')


def test_a_tool_call_where_an_answer_was_expected_is_invalid() -> None:
    """A reply that calls a tool instead of answering is diagnosed, not parsed."""
    call = ModelReply(tool_calls=(ToolRequest(name="refund"),), finish_reason="tool_calls")
    assert only(OutputGuard(Invoice).check(call)).diagnostics == (
        Diagnostic(
            code="reply.tool_calls",
            message="the reply called tools (refund) where an answer was expected",
            allowed_fixes=("answer with the JSON object instead of calling a tool",),
        ),
    )


def test_an_empty_reply_is_invalid() -> None:
    """Whitespace is not an answer."""
    assert only(OutputGuard(Invoice).check(reply("  \n"))).diagnostics == (
        Diagnostic(
            code="json.empty",
            message="the reply is empty",
            evidence='"  \\n"',
            allowed_fixes=("send the JSON object",),
        ),
    )


def test_text_that_is_not_json_is_invalid_with_the_place_it_broke() -> None:
    """The syntax diagnostic says where parsing stopped and shows the text around it."""
    outcome = only(OutputGuard(Invoice).check(reply('{"customer": ACME}')))
    assert outcome.diagnostics == (
        Diagnostic(
            code="json.syntax",
            message="the reply is not valid JSON: Expecting value at line 1 column 14",
            evidence='"{\\"customer\\": ACME}"',
            allowed_fixes=(
                "send one JSON object and nothing else: no Markdown, no text around it",
            ),
        ),
    )
    assert (outcome.raw, outcome.document) == ('{"customer": ACME}', None)


def test_a_lone_surrogate_is_invalid_rather_than_an_encoding_crash() -> None:
    """An escaped lone surrogate is not text: it is diagnosed at its path."""
    outcome = only(OutputGuard(CustomerResponse).check(reply('{"text": "hi \\ud800"}')))
    assert [(item.code, item.path) for item in outcome.diagnostics] == [
        ("json.surrogate", "$.text")
    ]


def test_tool_call_arguments_are_checked_as_text() -> None:
    """check_text validates JSON that is not a reply, such as a tool call's arguments."""
    call = ToolRequest(name="refund", arguments='{"sku": "A", "amount": "$5.00"}')
    result = parsed(OutputGuard(LineItem).check_text(call.arguments))
    assert result.value == LineItem(sku="A", amount=Decimal("5.00"))


# --- repair -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repairs"),
    [
        (f"```json\n{TICKET}\n```", (Repair.STRIP_FENCE,)),
        (f"Here is the ticket: {TICKET} Let me know!", (Repair.CUT_TO_BRACES,)),
        (TICKET[:-1] + ",}", (Repair.DROP_TRAILING_COMMA,)),
        (
            f"Sure:\n```json\n{TICKET[:-1]}, }}\n```\nDone.",
            (Repair.STRIP_FENCE, Repair.DROP_TRAILING_COMMA),
        ),
        (f"Sure: {TICKET[:-1]},\n}} ok", (Repair.CUT_TO_BRACES, Repair.DROP_TRAILING_COMMA)),
    ],
)
def test_each_mechanical_repair_restores_the_object_and_is_recorded(
    text: str, repairs: tuple[Repair, ...]
) -> None:
    """A fence, text around the braces, a trailing comma, or two of them, are repaired."""
    result = parsed(OutputGuard(Ticket).check(reply(text)))
    assert result.repairs == repairs
    assert result.data == parsed(OutputGuard(Ticket).check(reply(TICKET))).data


def test_a_reply_needing_a_third_repair_is_not_repaired() -> None:
    """Braces outside the fence, noise inside it and a trailing comma: three fixes, refused."""
    text = "Fill in {name}:\n```json\nnote " + TICKET[:-1] + ",}\n```"
    outcome = only(OutputGuard(Ticket).check(reply(text)))
    assert outcome.repairs == ()
    assert [item.code for item in outcome.diagnostics] == ["json.syntax"]


def test_a_comma_inside_a_string_is_never_dropped() -> None:
    """Only commas outside strings are trailing commas; values keep theirs."""
    text = '{"priority":"low","requires_human":false,"summary":"a,} b,]",}'
    result = parsed(OutputGuard(Ticket).check(reply(text)))
    assert result.value.summary == "a,} b,]"


def test_valid_json_is_never_repaired() -> None:
    """Repair runs only when the text does not parse: braces in a value stay."""
    text = '{"priority":"low","requires_human":false,"summary":"```{x}```"}'
    result = parsed(OutputGuard(Ticket).check(reply(text)))
    assert (result.repairs, result.value.summary) == ((), "```{x}```")


def test_reject_mode_repairs_nothing() -> None:
    """In reject mode a fenced reply is invalid: no fix is ever applied."""
    outcome = OutputGuard(Ticket, mode="reject").check(reply(f"```json\n{TICKET}\n```"))
    assert [item.code for item in only(outcome).diagnostics] == ["json.syntax"]


async def test_reject_mode_fails_loudly_in_the_loop() -> None:
    """The first invalid reply raises OutputRejectedError: no retry, no fallback."""
    model = ScriptedModel([reply('{"priority": "urgent"}'), reply(TICKET)])
    guard = OutputGuard(Ticket, mode=GuardMode.REJECT)
    ask = guard.ask_model(model, ModelRequest(messages=()))
    message = (
        "model reply rejected: it is not a valid Ticket ($.priority: Input should be 'low', "
        "'normal' or 'critical'; $.requires_human: a required field is missing; "
        "$.summary: a required field is missing). Guard mode 'reject' neither repairs nor "
        "retries: fix the prompt or the model, or configure mode 'auto_repair' to repair "
        "and retry."
    )
    with pytest.raises(OutputRejectedError, match=exactly(message)) as raised:
        await validate_with_retries(guard, ask)
    assert len(raised.value.diagnostics) == 3
    assert len(model.requests) == 1


# --- modes and start-up -----------------------------------------------------------------


def test_constrained_mode_refuses_a_model_that_cannot_enforce_the_schema() -> None:
    """Start-up fails with a clear error instead of silently validating after the fact."""
    guard = OutputGuard(Ticket, mode="constrained")
    message = (
        "guard mode 'constrained' needs a model that enforces the output schema while "
        "decoding, but ScriptedModel does not declare constrained = True; configure a "
        "backend with structured output, or use mode 'auto_repair' or 'reject' to validate "
        "after generation"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        guard.ask_model(ScriptedModel([]), ModelRequest(messages=()))
    with pytest.raises(SetupError, match=exactly(message)):
        guard.check_backend(ScriptedModel([]))


async def test_constrained_mode_sends_the_schema_and_still_validates() -> None:
    """The schema rides on the request; the reply is type-checked but never repaired."""
    model = ScriptedModel([reply(f"```json\n{TICKET}\n```"), reply(TICKET)], constrained=True)
    guard = OutputGuard(Ticket, mode=GuardMode.CONSTRAINED)
    result = await validate_with_retries(guard, guard.ask_model(model, ModelRequest(messages=())))
    assert [request.output_schema for request in model.requests] == [Ticket.model_json_schema()] * 2
    assert result.status == "ok"
    assert [type(outcome) for outcome in result.outcomes] == [Invalid, Parsed]


def test_other_modes_send_no_schema() -> None:
    """Only a constrained guard attaches the schema to a request."""
    request = ModelRequest(messages=())
    assert OutputGuard(Ticket).prepare(request) is request
    assert OutputGuard(Ticket, mode="reject").prepare(request).output_schema is None


def test_a_mode_typo_fails_at_start_up_with_the_closest_mode() -> None:
    """The mode comes from configuration, so a misspelt one is a ConfigError, not a default."""
    message = (
        "invalid configuration: unknown guard mode 'auto-repair' (did you mean "
        "'auto_repair'?); the valid ones are: auto_repair, constrained, reject. Fix the "
        "configuration and start again: nothing was started with it."
    )
    with pytest.raises(ConfigError, match=exactly(message)) as raised:
        OutputGuard(Ticket, mode="auto-repair")
    assert (raised.value.path, raised.value.key) == ("$.mode", "auto-repair")
    assert OutputGuard(Ticket).mode is GuardMode.AUTO_REPAIR


def test_a_schema_that_is_not_frozen_is_refused_at_start_up() -> None:
    """A validated reply must be frozen, down to its nested models."""

    class Loose(BaseModel):
        sku: str

    class Order(BaseModel):
        model_config = ConfigDict(frozen=True)
        lines: tuple[Loose, ...]

    message = (
        "the output schema Order must be frozen, so that the reply validated is the reply "
        "shipped; add model_config = ConfigDict(frozen=True) to Loose"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        OutputGuard(Order)


# --- diagnostics ------------------------------------------------------------------------


def test_a_failing_list_item_is_located_by_its_json_path() -> None:
    """The third item's amount is $.items[2].amount, with the value seen and the fix."""
    text = dumps(
        {
            "customer": "ACME",
            "items": [
                {"sku": "A", "amount": 1},
                {"sku": "B", "amount": 2},
                {"sku": "C", "amount": "twelve"},
            ],
            "due": "2026-02-01",
        }
    )
    assert only(OutputGuard(Invoice).check(reply(text))).diagnostics == (
        Diagnostic(
            code="type.invalid",
            message="money must be a number like '137.32', got the text 'twelve'",
            path="$.items[2].amount",
            evidence='"twelve"',
            allowed_fixes=("write the amount as a JSON number, e.g. 1200.50",),
        ),
    )


def test_missing_and_unknown_fields_are_located() -> None:
    """A missing field is named at its place (seen: nothing); an extra one is to be removed."""
    text = '{"customer":"ACME","items":[{"sku":"A"}],"due":"2026-02-01","note":"hi"}'
    assert only(OutputGuard(Invoice).check(reply(text))).diagnostics == (
        Diagnostic(
            code="type.missing",
            message="a required field is missing",
            path="$.items[0].amount",
            allowed_fixes=("add this field with a value of its declared type",),
        ),
        Diagnostic(
            code="type.extra",
            message="this field is not in the schema",
            path="$.note",
            evidence='"hi"',
            allowed_fixes=("remove this field",),
        ),
    )


def test_the_invalid_outcome_keeps_the_partial_document() -> None:
    """What did parse, normalised, is kept for a fallback."""
    text = '{"customer":"ACME","items":[{"sku":"A","amount":"$5"}],"due":"soon"}'
    outcome = only(OutputGuard(Invoice).check(reply(text)))
    assert outcome.document == {
        "customer": "ACME",
        "items": [{"sku": "A", "amount": Decimal(5)}],
        "due": "soon",
    }
    assert [(item.path, item.allowed_fixes) for item in outcome.diagnostics] == [
        ("$.due", ("write the date as YYYY-MM-DD",))
    ]


# --- normalise --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("$1,200.50", "1200.50"),
        ("USD 1,200.50", "1200.50"),
        ("1,200.50 USD", "1200.50"),
        ("1,200.50", "1200.50"),
        ("$1,200,000", "1200000"),
        ("1.200,50", "1200.50"),
        ("$1,20", "1.20"),
        ("-$5.00", "-5.00"),
        ("1200.50", "1200.50"),
    ],
)
def test_money_text_is_normalised_to_an_exact_decimal(text: str, amount: str) -> None:
    """Currency marks and thousands separators are dropped; the digits are kept exactly."""
    answer = ticket(refund=text)
    result = parsed(OutputGuard(Ticket).check(reply(answer)))
    assert str(result.value.refund) == amount
    assert result.normalised == (f'$.refund: "{text}" -> {amount}',)
    assert loads(result.data)["refund"] == Decimal(amount)


@pytest.mark.parametrize("text", ["1,200", "$1,200", "EUR 5", "1,200.000,5", "$5 USD", "-$-5"])
def test_ambiguous_or_foreign_money_text_is_left_for_the_type_check(text: str) -> None:
    """'1,200' may mean 1.2, and an unconfigured currency is not silently dropped."""
    outcome = only(OutputGuard(Ticket).check(reply(ticket(refund=text))))
    assert [(item.path, item.evidence) for item in outcome.diagnostics] == [
        ("$.refund", dumps(text))
    ]


def test_currency_marks_are_configuration() -> None:
    """A guard told about euros accepts 'EUR 5'."""
    guard = OutputGuard(Ticket, currency_marks=("€", "EUR"))
    assert parsed(guard.check(reply(ticket(refund="EUR 5")))).value.refund == Decimal(5)


@pytest.mark.parametrize(
    ("word", "day"),
    [
        ("today", date(2026, 1, 1)),
        ("Tomorrow", date(2026, 1, 2)),
        ("yesterday", date(2025, 12, 31)),
    ],
)
def test_relative_dates_are_read_with_the_runs_today(word: str, day: date) -> None:
    """'tomorrow' is a date only given the run's clock, and then an exact one."""
    text = f'{{"start": "{word}", "end": "2026-03-01"}}'
    result = parsed(OutputGuard(Stay).check(reply(text), today=NEW_YEAR))
    assert result.value.start == day
    assert result.normalised == (f'$.start: "{word}" -> {day.isoformat()}',)
    assert result.data == f'{{"start":"{day.isoformat()}","end":"2026-03-01"}}'.encode()


def test_without_the_runs_today_a_relative_date_is_invalid() -> None:
    """No hidden wall clock: without today, 'tomorrow' is refused with the fix to use."""
    outcome = only(OutputGuard(Stay).check(reply('{"start": "tomorrow", "end": "2026-03-01"}')))
    assert [(item.path, item.allowed_fixes) for item in outcome.diagnostics] == [
        ("$.start", ("write the date as YYYY-MM-DD",))
    ]


def test_normalising_can_be_turned_off() -> None:
    """normalise=False leaves '$5' to the type-check."""
    outcome = OutputGuard(Ticket, normalise=False).check(reply(ticket(refund="$5")))
    assert only(outcome).diagnostics[0].path == "$.refund"


# --- cross-field rules ------------------------------------------------------------------


def test_a_critical_ticket_requires_a_human() -> None:
    """The rule's diagnostic makes the reply invalid; the fixed reply passes."""
    guard = OutputGuard(Ticket, rules=[critical_needs_human])
    assert only(guard.check(reply(ticket(priority="critical")))).diagnostics == (
        Diagnostic(
            code="rule.critical_needs_human",
            message="a critical ticket must be handed to a person",
            path="$.requires_human",
            evidence="false",
            allowed_fixes=("set requires_human to true", 'lower priority below "critical"'),
        ),
    )
    parsed(guard.check(reply(ticket(priority="critical", requires_human=True))))


def test_an_end_date_before_the_start_date_is_invalid() -> None:
    """A cross-field rule sees the typed value: two dates, compared."""
    guard = OutputGuard(Stay, rules=[end_after_start])
    outcome = only(guard.check(reply('{"start": "2026-03-02", "end": "2026-03-01"}')))
    assert [(item.code, item.path, item.evidence) for item in outcome.diagnostics] == [
        ("rule.end_after_start", "$.end", '"2026-03-01"')
    ]


def test_rules_consult_the_agents_dependencies() -> None:
    """The same refund passes under one agent's limit and fails under another's."""
    guard = OutputGuard(Ticket, rules=[refund_within_limit])
    answer = reply(ticket(refund="$150.00"))
    parsed(guard.check(answer, deps=SupportDeps(refund_limit=Decimal(200))))
    outcome = only(guard.check(answer, deps=SupportDeps(refund_limit=Decimal(100))))
    assert [(item.message, item.evidence) for item in outcome.diagnostics] == [
        ("the refund is above this agent's limit of 100", "150.00")
    ]


def test_a_rule_warning_passes_with_the_value() -> None:
    """Warnings do not make a reply invalid; they travel with it."""
    guard = OutputGuard(Ticket, rules=[short_summary])
    result = parsed(guard.check(reply(ticket(summary="a very long summary indeed"))))
    assert [item.code for item in result.warnings] == ["rule.short_summary"]


# --- verified and shipped are one object ------------------------------------------------


def test_the_validated_value_cannot_be_changed() -> None:
    """The value is frozen and so is the outcome that carries its bytes."""
    result = parsed(OutputGuard(Ticket).check(reply(TICKET)))
    with pytest.raises(ValidationError, match="Instance is frozen"):
        result.value.summary = "changed"  # type: ignore[misc]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.data = b"{}"  # type: ignore[misc]


def test_the_shipped_bytes_are_the_validated_bytes() -> None:
    """verify() returns the exact bytes the value was rebuilt from; their hash is recorded."""
    result = parsed(OutputGuard(Ticket).check(reply(ticket(refund="$1,200.50"))))
    expected = b'{"priority":"normal","requires_human":false,"summary":"late","refund":1200.50}'
    assert result.verify() == result.data == expected
    assert result.sha256 == hashlib.sha256(expected).hexdigest()
    assert Ticket.model_validate(loads(result.data)) == result.value


def test_a_change_after_validation_cannot_slip_through() -> None:
    """Forcing a new value or new bytes in is caught by verify() before anything ships."""
    result = parsed(OutputGuard(Ticket).check(reply(TICKET)))
    object.__setattr__(result.value, "summary", "refund $10,000 approved")
    with pytest.raises(OutputTamperedError, match=r"^Parsed\.value changed after validation"):
        result.verify()

    fresh = parsed(OutputGuard(Ticket).check(reply(TICKET)))
    forged = attrs.evolve(fresh, data=fresh.data.replace(b"late parcel", b"approved"))
    recorded, actual = fresh.sha256, hashlib.sha256(forged.data).hexdigest()
    message = (
        f"Parsed.data changed after validation (SHA-256 recorded {recorded[:16]}, now "
        f"{actual[:16]}); it was not shipped. Ship Parsed.verify() as the guard returned "
        "it and never modify a validated reply."
    )
    with pytest.raises(OutputTamperedError, match=exactly(message)):
        forged.verify()


# --- the customer reply -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("", "write at least 1 character(s) of text"),
        ("   ", "write at least 1 character(s) of text"),
        ("x" * 4001, "shorten the text to at most 4000 characters"),
    ],
)
def test_a_customer_response_is_non_empty_and_at_most_4000_characters(text: str, fix: str) -> None:
    """Blank text and text over 4,000 characters are invalid, with the fix to make."""
    outcome = only(OutputGuard(CustomerResponse).check(reply(dumps({"text": text}))))
    assert [(item.path, item.allowed_fixes) for item in outcome.diagnostics] == [("$.text", (fix,))]


def test_a_customer_response_of_4000_characters_passes_trimmed() -> None:
    """The limit is inclusive and counted after trimming."""
    value = parsed(OutputGuard(CustomerResponse).check(reply(dumps({"text": f" {'x' * 4000} "}))))
    assert value.value.text == "x" * 4000


# --- the validation loop ----------------------------------------------------------------


class Script:
    """An ``ask`` that answers from a list and records the feedback it was given."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.feedback: list[str | None] = []

    async def __call__(self, feedback: str | None) -> ModelReply:
        self.feedback.append(feedback)
        return reply(self.texts[len(self.feedback) - 1])


async def test_feedback_names_what_failed_where_why_and_what_to_change() -> None:
    """The retry prompt is built from the diagnostics, never 'try again'."""
    ask = Script(
        'Here: {"priority": "urgent", "requires_human": false, "summary": "late", "x": 1}',
        TICKET,
    )
    result = await validate_with_retries(OutputGuard(Ticket), ask)
    assert result.status == "ok"
    assert ask.feedback == [
        None,
        "Attempt 1 of 3 was not accepted. Fix these problems:\n"
        "- $.priority (type.invalid, error): Input should be 'low', 'normal' or 'critical'. "
        "Seen: \"urgent\". Allowed fixes: use one of: 'low', 'normal' or 'critical'.\n"
        "- $.x (type.extra, error): this field is not in the schema. Seen: 1. "
        "Allowed fixes: remove this field.\n"
        "Your reply also needed repair (text outside the outermost braces was cut): send "
        "the JSON object alone.\n"
        "Change only the values at the paths listed above, choosing from their allowed "
        "fixes; every other value passed and must stay exactly as you sent it. Send the "
        "whole corrected JSON object and nothing else.",
    ]


async def test_a_valid_reply_after_feedback_is_ok_with_its_hash() -> None:
    """The result carries the validated value and the SHA-256 of the shipped bytes."""
    counter, reader = fallbacks()
    ask = Script(ticket(priority="critical"), ticket(priority="critical", requires_human=True))
    guard = OutputGuard(Ticket, rules=[critical_needs_human])
    result = await validate_with_retries(guard, ask, fallbacks=counter)
    assert (result.status, result.attempts, result.reason) == ("ok", 2, "attempt 2 passed")
    assert result.value == Ticket(priority="critical", requires_human=True, summary="late")
    assert result.parsed is result.best is result.outcome
    assert result.sha256 == hashlib.sha256(result.outcome.verify()).hexdigest()  # type: ignore[union-attr]
    assert counted(reader) == []


async def test_the_loop_makes_at_most_three_attempts_by_default() -> None:
    """Three invalid replies exhaust the loop: a result with a status, not an exception."""
    counter, reader = fallbacks()
    ask = Script(
        '{"priority": "urgent"}',
        '{"priority": "low", "summary": "late"}',
        "not json",
        TICKET,
    )
    result = await validate_with_retries(OutputGuard(Ticket), ask, fallbacks=counter)
    assert (result.status, result.attempts, result.value, result.sha256) == (
        "exhausted",
        3,
        None,
        None,
    )
    assert result.reason == "all 3 attempts were invalid (errors per attempt: 3, 1, 1)"
    assert result.best is result.outcomes[1]
    assert only(result.best).document == {"priority": "low", "summary": "late"}
    assert [len(round_) for round_ in result.history] == [3, 1, 1]
    assert counted(reader) == [
        (1, {"statemachine.schema": "Ticket", "statemachine.stop": "attempts"})
    ]


async def test_the_loop_stops_early_when_two_rounds_bring_no_new_minimum() -> None:
    """Errors 2, 2, 3: the third round is the second without a new minimum, so it stops."""
    counter, reader = fallbacks()
    ask = Script(
        '{"priority": "urgent", "summary": "late"}',
        '{"priority": "low"}',
        '{"priority": "high"}',
        TICKET,
    )
    result = await validate_with_retries(OutputGuard(Ticket), ask, attempts=5, fallbacks=counter)
    assert (result.status, result.attempts) == ("exhausted", 3)
    assert result.reason == (
        "stopped after attempt 3: two rounds in a row brought no new minimum of errors "
        "(errors per attempt: 2, 2, 3)"
    )
    assert counted(reader) == [
        (1, {"statemachine.schema": "Ticket", "statemachine.stop": "no_progress"})
    ]


async def test_a_new_minimum_keeps_the_loop_going() -> None:
    """Errors 3, 2, 1 keep improving, so a fourth attempt is made and passes."""
    ask = Script(
        '{"priority": "urgent"}',
        '{"priority": "low"}',
        '{"priority": "low", "summary": "x"}',
        TICKET,
    )
    result = await validate_with_retries(OutputGuard(Ticket), ask, attempts=5)
    assert (result.status, result.attempts) == ("ok", 4)


async def test_exhaustion_counts_on_the_global_meter_by_default() -> None:
    """Without an injected counter the API's global meter is used (a no-op until configured)."""
    result = await validate_with_retries(OutputGuard(Ticket), Script("x"), attempts=1)
    assert result.status == "exhausted"


async def test_a_retry_that_changes_a_value_that_had_passed_is_reported() -> None:
    """Only the diagnosed path may change; touching another gets a warning, in the feedback too."""
    ask = Script(
        ticket(priority="urgent", summary="late parcel"),
        ticket(priority="ugent", summary="parcel lost"),
        ticket(priority="low", summary="late parcel"),
    )
    result = await validate_with_retries(OutputGuard(Ticket), ask)
    changed = Diagnostic(
        code="value.changed_after_pass",
        severity="warning",
        message='this value passed in attempt 1 but was changed from "late parcel" to '
        '"parcel lost"',
        path="$.summary",
        evidence='"parcel lost"',
        allowed_fixes=('restore the value you sent in attempt 1: "late parcel"',),
    )
    assert result.history[1][-1] == changed
    assert (
        "- $.summary (value.changed_after_pass, warning): this value passed in attempt 1 but "
        'was changed from "late parcel" to "parcel lost". Seen: "parcel lost". Allowed fixes: '
        'restore the value you sent in attempt 1: "late parcel".'
    ) in (ask.feedback[2] or "")
    # Restoring the value the warning named is not itself a change to report.
    assert result.status == "ok"
    assert [item.code for item in result.history[2]] == []


async def test_a_successful_retry_that_changed_a_passed_value_carries_the_warning() -> None:
    """The accepted reply still reports that it touched a value nobody asked it to."""
    ask = Script(ticket(priority="urgent"), ticket(priority="low", requires_human=True))
    result = await validate_with_retries(OutputGuard(Ticket), ask)
    assert result.status == "ok"
    assert [(item.code, item.path) for item in result.parsed.warnings] == [  # type: ignore[union-attr]
        ("value.changed_after_pass", "$.requires_human")
    ]


@pytest.mark.parametrize(
    ("last", "status", "reason"),
    [
        (
            ModelReply(text="no", finish_reason="refusal"),
            "refused",
            "the model refused (refusal) in attempt 2",
        ),
        (
            ModelReply(text="{", finish_reason="length"),
            "truncated",
            "the reply was cut off at the token limit in attempt 2",
        ),
    ],
)
async def test_a_refusal_or_a_truncation_ends_the_loop_at_once(
    last: ModelReply, status: str, reason: str
) -> None:
    """Neither is retried with feedback; the partial so far is kept as the best."""
    counter, reader = fallbacks()
    model = ScriptedModel([reply('{"priority": "low"}'), last, reply(TICKET)])
    guard = OutputGuard(Ticket)
    ask = guard.ask_model(model, ModelRequest(messages=()))
    result = await validate_with_retries(guard, ask, fallbacks=counter)
    assert (result.status, result.attempts, result.reason) == (status, 2, reason)
    assert isinstance(result.best, Invalid)
    assert counted(reader) == []


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_ask_model_adds_the_reply_and_the_feedback_to_the_conversation(
    asynchronous: bool,
) -> None:
    """Each retry shows the model its last reply and the feedback on it."""
    answers = iter(['{"priority": "low"}', TICKET])

    def answer(request: ModelRequest) -> ModelReply:
        return reply(next(answers))

    async def answer_later(request: ModelRequest) -> ModelReply:
        return answer(request)

    model = FunctionModel(answer_later if asynchronous else answer)
    guard = OutputGuard(Ticket)
    start = ModelRequest(messages=(Message(role="user", content="triage this"),))
    result = await validate_with_retries(guard, guard.ask_model(model, start))
    assert result.status == "ok"
    second = model.requests[1].messages
    assert [message.role for message in second] == ["user", "assistant", "user"]
    assert second[1].content == '{"priority": "low"}'
    assert second[2].content.startswith("Attempt 1 of 3 was not accepted.")


async def test_fewer_than_one_attempt_is_refused() -> None:
    """attempts=0 is a setup mistake, not an empty result."""
    with pytest.raises(SetupError, match=exactly("attempts must be at least 1, got 0")):
        await validate_with_retries(OutputGuard(Ticket), Script(), attempts=0)


def test_a_validation_result_is_frozen() -> None:
    """A finished loop's result cannot be rewritten."""
    outcome = Truncated(text="")
    result = ValidationResult[Ticket](
        status="truncated", outcomes=(outcome,), best=outcome, reason="cut"
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.status = "ok"  # type: ignore[misc]


# --- configuration ----------------------------------------------------------------------


class RetrySettings(BaseModel):
    """Nested settings."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = 3
    backoff: float = 0.5


class AgentSettings(BaseModel):
    """An agent's configuration."""

    model_config = ConfigDict(frozen=True)

    guard_mode: GuardMode = GuardMode.AUTO_REPAIR
    retry: RetrySettings = RetrySettings()


def test_a_configuration_typo_fails_at_start_up_naming_the_closest_key() -> None:
    """'max_atempts' is not silently ignored: the error names it and 'max_attempts'."""
    message = (
        "invalid configuration: $.retry: unknown key 'max_atempts' (did you mean "
        "'max_attempts'?); the valid ones are: backoff, max_attempts. Fix the configuration "
        "and start again: nothing was started with it."
    )
    with pytest.raises(ConfigError, match=exactly(message)) as raised:
        validate_config(AgentSettings, {"retry": {"max_atempts": 5}})
    error = raised.value
    assert (error.path, error.key, error.suggestion) == ("$.retry", "max_atempts", "max_attempts")
    assert isinstance(error, SetupError)
    assert isinstance(error, ValueError)


def test_a_configuration_value_of_the_wrong_type_fails_at_start_up() -> None:
    """A bad value is located by its path."""
    with pytest.raises(ConfigError) as raised:
        validate_config(AgentSettings, {"guard_mode": "auto", "retry": {"max_attempts": "x"}})
    assert raised.value.problems == (
        "$.guard_mode: Input should be 'reject', 'auto_repair' or 'constrained'",
        "$.retry.max_attempts: Input should be a valid integer, unable to parse string as "
        "an integer",
    )


def test_valid_configuration_is_returned_typed() -> None:
    """Known keys become the typed settings."""
    settings_ = validate_config(AgentSettings, {"guard_mode": "reject", "retry": {"backoff": 1}})
    assert settings_ == AgentSettings(guard_mode=GuardMode.REJECT, retry=RetrySettings(backoff=1.0))


# --- properties -------------------------------------------------------------------------

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
    | st.text(alphabet=st.sampled_from('ab ,}]{["\\`\n\u2028é'), max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=5), values, min_size=1, max_size=4)
noise = st.text(alphabet=st.characters(exclude_characters="{}`"), max_size=12)
# Text before the object is prose: it begins no JSON value and opens no string or
# array, or the object would be a string's text or an array's element, which repair
# never cuts out (tests/test_guard_types.py).
prose = st.text(alphabet=st.characters(exclude_characters='{}[`"'), max_size=12).filter(
    lambda text: not re.match(r"\s*(?:-?[0-9]|(?:true|false|null)\b)", text)
)


def with_trailing_commas(value: Any) -> str:
    """``value`` as JSON with a comma after the last member of every non-empty container."""
    if isinstance(value, dict) and value:
        members = [f"{dumps(key)}: {with_trailing_commas(item)}" for key, item in value.items()]
        return "{" + ", ".join(members) + ", }"
    if isinstance(value, list) and value:
        return "[" + ", ".join(with_trailing_commas(item) for item in value) + ",\n]"
    return dumps(value)


def wrap(data: st.DataObject, original: dict[str, Any], *, kinds: int) -> str:
    """``original`` as JSON with up to ``kinds`` of: trailing commas, a fence, text around it."""
    chosen = data.draw(
        st.sets(st.sampled_from(["comma", "fence", "noise"]), max_size=kinds), label="wraps"
    )
    text = with_trailing_commas(original) if "comma" in chosen else dumps(original)
    if "noise" in chosen:
        text = data.draw(prose, label="before") + text + data.draw(noise, label="after")
    if "fence" in chosen:
        text = f"```json\n{text}\n```"
    return text


@settings(max_examples=100, deadline=None)
@given(
    text=st.text() | st.builds(lambda value: dumps(value)[:-1], objects),
    reason=st.sampled_from(["stop", "length", "refusal", "content_filter", "tool_calls"]),
    mode=st.sampled_from(list(GuardMode)),
)
def test_arbitrary_model_output_yields_only_the_four_outcomes(
    text: str, reason: Any, mode: GuardMode
) -> None:
    """Whatever the model writes, the guard answers with one of its four outcomes."""
    guard = OutputGuard(Invoice, mode=mode)
    outcome = guard.check(ModelReply(text=text, finish_reason=reason), today=NEW_YEAR)
    assert isinstance(outcome, Parsed | Refusal | Truncated | Invalid)
    if isinstance(outcome, Parsed):
        assert len(outcome.repairs) <= 2
        assert outcome.verify() == outcome.data


@settings(max_examples=100, deadline=None)
@given(original=objects, data=st.data())
def test_repair_yields_exactly_the_original_object(
    original: dict[str, Any], data: st.DataObject
) -> None:
    """Valid JSON in a fence, among text, or with trailing commas (two at most) comes back exact."""
    text = wrap(data, original, kinds=2)
    result = parsed(OutputGuard(Anything).check(reply(text)))
    assert result.data == dumps(original).encode()
    assert len(result.repairs) <= 2


@settings(max_examples=100, deadline=None)
@given(original=objects, data=st.data())
def test_repair_never_changes_a_value(original: dict[str, Any], data: st.DataObject) -> None:
    """Whatever the wrapping, repair gives back the original object or nothing: never another."""
    text = wrap(data, original, kinds=3) + data.draw(st.sampled_from(["", ",", "]", "}"]))
    outcome = OutputGuard(Anything).check(reply(text))
    if isinstance(outcome, Parsed):
        assert outcome.data == dumps(original).encode()
