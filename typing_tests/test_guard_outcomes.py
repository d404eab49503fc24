"""Code that receives a model reply handles all four guard outcomes, or mypy refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import assert_never

from pydantic import BaseModel, ConfigDict

from statemachine import (
    CustomerResponse,
    Diagnostic,
    GuardOutcome,
    Invalid,
    OutputGuard,
    Parsed,
    Refusal,
    Truncated,
)


class Ticket(BaseModel):
    """A schema the rules below are written for."""

    model_config = ConfigDict(frozen=True)

    priority: str
    requires_human: bool


def needs_human(ticket: Ticket, deps: int) -> Iterator[Diagnostic]:
    """A rule for tickets that takes the agent's dependencies."""
    if ticket.priority == "critical" and not ticket.requires_human:
        yield Diagnostic(code="rule.needs_human", message="hand it to a person")


def short_reply(reply: CustomerResponse, deps: object) -> Iterator[Diagnostic]:
    """A rule for customer replies."""
    return iter(())


def forgets_invalid(outcome: GuardOutcome[CustomerResponse]) -> str:
    match outcome:
        case Parsed():
            return outcome.value.text
        case Refusal():
            return "refused"
        case Truncated():
            return "truncated"
        case _:
            # Rule: an unhandled Invalid reaches assert_never, which only Never may.
            assert_never(outcome)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def forgets_refusal(outcome: GuardOutcome[CustomerResponse]) -> str:
    match outcome:
        case Parsed():
            return outcome.value.text
        case Truncated() | Invalid():
            return "retry"
        case _:
            # Rule: an unhandled Refusal reaches assert_never, which only Never may.
            assert_never(outcome)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def handles_all_four(outcome: GuardOutcome[CustomerResponse]) -> str:
    match outcome:
        case Parsed():
            return outcome.value.text
        case Refusal():
            return f"refused ({outcome.finish_reason})"
        case Truncated():
            return outcome.text
        case Invalid():
            return "; ".join(item.message for item in outcome.diagnostics)
        case _:
            assert_never(outcome)


def parsed_value_is_typed(outcome: Parsed[CustomerResponse]) -> None:
    # Rule: the parsed value has the schema's type, so a field it lacks is an error.
    outcome.value.length  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def rules_match_the_schema() -> None:
    _ticket_guard: OutputGuard[Ticket] = OutputGuard(Ticket, rules=[needs_human])
    # Rule: a rule written for another schema cannot guard this one.
    OutputGuard(Ticket, rules=[short_reply])  # type: ignore[list-item]  # pyright: ignore[reportArgumentType]
