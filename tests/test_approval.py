"""statemachine._approval: approvals bound to one exact call, and denials."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pydantic import BaseModel, ValidationError

from statemachine import (
    Approval,
    ApprovalRequest,
    Denial,
    Money,
    ToolRegistry,
    WriteCall,
    write_tool,
)

NOON = datetime(2026, 1, 1, 12, tzinfo=UTC)


class RefundArgs(BaseModel):
    order: str
    amount: Money


@write_tool
async def refund(args: RefundArgs) -> str:
    """Refund an order."""
    return args.order


REGISTRY = ToolRegistry([refund])


def refund_call(amount: str = "20.00") -> WriteCall:
    call = REGISTRY.call("refund", {"order": "A-1", "amount": amount})
    assert isinstance(call, WriteCall)
    return call


def test_an_approval_of_a_call_is_bound_to_its_tool_and_arguments_hash() -> None:
    """Approval.of(call) records the tool, the arguments hash, who and when."""
    call = refund_call()
    approval = Approval.of(call, by="ana", at=NOON)
    assert (approval.tool, approval.args_hash) == ("refund", call.args_hash)
    assert (approval.approved_by, approval.approved_at) == ("ana", NOON)
    assert approval.key == call.key


def test_an_approval_of_a_request_matches_an_approval_of_its_call() -> None:
    """Approving the request a person saw is approving the call it was made from."""
    call = refund_call()
    request = ApprovalRequest.for_call(call, run_id="run-1", agent="support")
    assert Approval.of(request, by="ana", at=NOON) == Approval.of(call, by="ana", at=NOON)
    assert request.key == call.key


def test_an_approval_without_a_time_is_stamped_now_in_utc() -> None:
    """Approval.of without at= records the current UTC time."""
    before = datetime.now(UTC)
    approval = Approval.of(refund_call(), by="ana")
    assert before <= approval.approved_at <= datetime.now(UTC)


def test_the_same_amount_spelled_differently_is_the_same_approval() -> None:
    """An approval of 20 covers 20.00: the amount is one number, so one key."""
    assert Approval.of(refund_call("20"), by="ana").key == refund_call("20.00").key


def test_another_amount_needs_another_approval() -> None:
    """An approval of 20.00 does not cover 2000.00."""
    assert Approval.of(refund_call("20.00"), by="ana").key != refund_call("2000.00").key


def test_an_approval_needs_someone_who_approved() -> None:
    """approved_by cannot be empty: every approval records a person."""
    with pytest.raises(ValidationError):
        Approval.of(refund_call(), by="")


def test_a_denial_needs_a_reason() -> None:
    """The model is told why; an empty reason is refused."""
    with pytest.raises(ValidationError):
        Denial(reason="")
    assert Denial(reason="too much").denied_by == "unknown"


def test_the_request_shows_the_exact_arguments_and_a_readable_summary() -> None:
    """The person sees the Decimal amount as given and the call in canonical form."""
    request = ApprovalRequest.for_call(refund_call("20.50"), run_id="run-1", agent="support")
    assert request.arguments == {"order": "A-1", "amount": Decimal("20.50")}
    assert request.summary == 'refund({"amount":20.5,"order":"A-1"})'


def test_approvals_and_denials_are_immutable() -> None:
    """A recorded decision cannot be edited afterwards."""
    approval = Approval.of(refund_call(), by="ana", at=NOON)
    with pytest.raises(ValidationError):
        approval.approved_by = "mallory"  # type: ignore[misc]
