"""What a decided write call and a finished answer become: the bodies of
``AwaitApproval.approve`` and ``deny`` and of ``Responding.finish``.

The phases keep the transitions (their names, annotations and docstrings, which the
type checkers and the graph read); the work is here, as ``_planning`` and ``_calling``
hold the work of ``Planning`` and ``ToolCalling``. This module imports the phases for
the type checkers only: ``_phases`` imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._approval import Approval, _approve
from ._errors import ApprovalMismatchError, OutputTamperedError, SetupError
from ._fast._messages import _appended
from ._guard import CustomerResponse
from ._model import Message

if TYPE_CHECKING:
    from ._phases import AwaitApproval, Done, Planning, Responding, ToolCalling

__all__ = ["_approved", "_denied", "_finished"]


def _approved(phase: AwaitApproval[Any, Any], approval: Approval[Any]) -> ToolCalling[Any]:
    """``phase.approve(approval)``: the call, approved, goes to ``ToolCalling``."""
    if type(approval) is not Approval:
        raise SetupError(
            f"approve takes the Approval that rt.decide(request) gave, got "
            f"{type(approval).__name__}"
        )
    if approval.key != phase.call.key:
        raise ApprovalMismatchError(approved=approval.key, presented=phase.call.key)
    if approval.call_id != phase.call_id:
        raise ApprovalMismatchError(
            approved=f"{approval.key} (call {approval.call_id})",
            presented=f"{phase.call.key} (call {phase.call_id})",
        )
    phase._leave("approve")
    return phase._next(
        phase.agent.phases.tool_calling,
        call=_approve(phase.call, approval),
        call_id=phase.call_id,
        pending=phase.pending,
    )


def _denied(phase: AwaitApproval[Any, Any], reason: str) -> Planning[Any]:
    """``phase.deny(reason)``: the model is told the call was not run, and why."""
    phase._leave("deny")
    told = Message(
        role="tool",
        content=(
            f"Not approved: {phase.call.describe()} was not run and nothing was charged. "
            f"Reason: {reason}. Do not call it again unless the customer asks anew."
        ),
        tool_call_id=phase.call_id,
        name=phase.call.name,
    )
    return phase._next(
        phase.agent.phases.planning,
        transcript=_appended(phase.transcript, told),
        loop=phase.loop.settle(phase.call_id, "refused", reason),
        pending=phase.pending,
    )


def _finished(phase: Responding[Any], done: type[Done[Any]]) -> Done[Any]:
    """``phase.finish()``: the answer, checked once more when it was verified, is ``done``."""
    phase._leave("finish")
    sha256 = ""
    verified = phase.verified
    if verified is not None:
        shipped = verified.verify()
        sha256 = verified.sha256
        if verified.data != shipped or not _ships(phase, shipped):
            raise OutputTamperedError("text", recorded=sha256, actual="(the text changed)")
    said = Message(role="assistant", content=phase.text)
    return phase._next(
        done,
        answer=phase.text,
        verified=verified,
        answer_sha256=sha256,
        transcript=_appended(phase.transcript, said),
    )


def _ships(phase: Responding[Any], data: bytes) -> bool:
    """Whether the phase's text is what the validated bytes say (the text, or the JSON)."""
    value = phase.verified.value if phase.verified is not None else None
    if isinstance(value, CustomerResponse):
        return value.text == phase.text
    return data.decode() == phase.text
