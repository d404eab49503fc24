"""Approval of write calls by a person, and the gate that asks for it.

An :class:`Approval` is bound to one exact call: the tool's name and the hash of
its canonical arguments. It records who approved and when. ``AwaitApproval``
refuses an approval made for any other call. An :class:`ApprovalGate` is
whatever asks the person: a queue, a chat message, a CLI; ``statemachine.testing``
ships scripted ones.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from ._tools import WriteCall

__all__ = ["Approval", "ApprovalGate", "ApprovalRequest", "Denial", "Pending"]


class ApprovalRequest(BaseModel):
    """What the person is asked to approve: one exact write call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    agent: str
    tool: str
    arguments: dict[str, Any]
    args_hash: str
    summary: str = Field(description="the call as a person reads it")

    @classmethod
    def for_call(cls, call: WriteCall, *, run_id: str, agent: str) -> ApprovalRequest:
        """The request for ``call``."""
        return cls(
            run_id=run_id,
            agent=agent,
            tool=call.name,
            arguments=call.args.model_dump(mode="python"),
            args_hash=call.args_hash,
            summary=call.describe(),
        )

    @property
    def key(self) -> str:
        """``tool:hash``: what an approval of this request is bound to."""
        return f"{self.tool}:{self.args_hash}"


class Approval(BaseModel):
    """A person's yes to one exact call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args_hash: str
    approved_by: str = Field(min_length=1)
    approved_at: datetime

    @classmethod
    def of(
        cls,
        call: WriteCall | ApprovalRequest,
        *,
        by: str,
        at: datetime | None = None,
    ) -> Approval:
        """Approve ``call`` (or the call a request names) as ``by``, now or ``at``."""
        tool = call.name if isinstance(call, WriteCall) else call.tool
        return cls(
            tool=tool,
            args_hash=call.args_hash,
            approved_by=by,
            approved_at=at or datetime.now(UTC),
        )

    @property
    def key(self) -> str:
        """``tool:hash`` of the call this approval is for."""
        return f"{self.tool}:{self.args_hash}"


class Denial(BaseModel):
    """A person's no, with the reason the model will be told."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(min_length=1)
    denied_by: str = "unknown"


class Pending(BaseModel):
    """No decision yet: the person was asked and will answer later.

    The run stops, interrupted, until it is resumed with the person's decision.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = Field(default="waiting for a person's decision", min_length=1)


@runtime_checkable
class ApprovalGate(Protocol):
    """Asks a person about one write call: ``Approval``, ``Denial``, or ``Pending``."""

    async def decide(self, request: ApprovalRequest) -> Approval | Denial | Pending:
        """The person's decision about ``request``."""
        ...
