"""statemachine._approval: approvals made by the runtime, bound to one call of one run."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import attrs
import pytest
from pydantic import BaseModel, ValidationError

from statemachine import (
    Approval,
    ApprovalRequest,
    Approve,
    Denial,
    Money,
    Runtime,
    SetupError,
    ToolRegistry,
    WriteCall,
    write_tool,
)
from statemachine.testing import AutoApproveGate, ScriptedGate, ScriptedModel

pytestmark = pytest.mark.anyio

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


def request_for(call: WriteCall, *, run_id: str = "run-1") -> ApprovalRequest:
    return ApprovalRequest.for_call(call, run_id=run_id, agent="support", call_id="call-3")


def runtime(gate: Any, run_id: str = "run-1") -> Runtime:
    return Runtime(run_id=run_id, model=ScriptedModel([]), gate=gate)


async def test_the_runtime_makes_an_approval_bound_to_run_call_tool_and_arguments() -> None:
    """A gate's yes becomes an Approval of that run, call id, tool and arguments hash."""
    call = refund_call()
    approval = await runtime(AutoApproveGate(by="ana", at=NOON)).decide(request_for(call))
    assert isinstance(approval, Approval)
    assert (approval.run_id, approval.call_id) == ("run-1", "call-3")
    assert (approval.tool, approval.args_hash, approval.key) == ("refund", call.args_hash, call.key)
    assert (approval.approved_by, approval.approved_at) == ("ana", NOON)
    again = await runtime(AutoApproveGate(by="ana", at=NOON)).decide(request_for(call))
    assert isinstance(again, Approval)
    assert again.id != approval.id  # every approval is its own


async def test_an_approval_without_a_time_is_stamped_now_in_utc() -> None:
    """A yes without at= is dated when the runtime records it, in UTC."""
    before = datetime.now(UTC)
    approval = await runtime(ScriptedGate([Approve(by="ana")])).decide(request_for(refund_call()))
    assert isinstance(approval, Approval)
    assert before <= approval.approved_at <= datetime.now(UTC)


def test_approval_has_no_public_constructor() -> None:
    """Nobody but the runtime makes an Approval: the constructor refuses, saying what to do."""
    with pytest.raises(SetupError, match="Approval has no public constructor"):
        Approval(  # type: ignore[call-arg]
            id="x",
            run_id="run-1",
            call_id="call-3",
            tool="refund",
            args_hash="0" * 64,
            approved_by="me",
            approved_at=NOON,
            note="",
        )
    assert not hasattr(Approval, "of")


async def test_a_yes_bound_to_another_request_is_a_denial() -> None:
    """Approve.of(request) answers only that request: for any other it is a no."""
    other = request_for(refund_call("99.00"))
    decision = await runtime(ScriptedGate([Approve.of(other, by="mallory")])).decide(
        request_for(refund_call())
    )
    assert isinstance(decision, Denial)
    assert decision.reason.startswith("the approval given was for another call (it was given")


async def test_a_gate_that_answers_anything_but_a_decision_is_refused() -> None:
    """A gate that hands back an Approval of its own making is refused, not honoured."""

    class Forger:
        async def decide(self, request: ApprovalRequest) -> Any:
            return "yes"

    with pytest.raises(SetupError, match="a gate answers Approve"):
        await runtime(Forger()).decide(request_for(refund_call()))


async def test_a_request_of_another_run_is_refused_by_the_runtime() -> None:
    """The runtime asks only about its own run's calls."""
    with pytest.raises(SetupError, match="is for run 'run-2'"):
        await runtime(AutoApproveGate()).decide(request_for(refund_call(), run_id="run-2"))


def test_the_same_amount_spelled_differently_is_the_same_request() -> None:
    """A request for 20 is a request for 20.00: the amount is one number, so one key."""
    assert request_for(refund_call("20")).key == refund_call("20.00").key


def test_another_amount_is_another_request() -> None:
    """A request for 20.00 is not one for 2000.00."""
    assert request_for(refund_call("20.00")).key != refund_call("2000.00").key


def test_a_yes_needs_someone_who_approved() -> None:
    """by cannot be empty: every approval records a person."""
    with pytest.raises(ValidationError):
        Approve(by="")


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


async def test_approvals_and_decisions_are_immutable() -> None:
    """A recorded decision cannot be edited afterwards."""
    approval = await runtime(AutoApproveGate()).decide(request_for(refund_call()))
    assert isinstance(approval, Approval)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        approval.approved_by = "mallory"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Approve(by="ana").by = "mallory"  # type: ignore[misc]
