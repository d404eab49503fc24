"""Approval of write calls by a person, and the gate that asks for it.

An :class:`Approval` is bound to one exact call: the tool's name and the hash of
its canonical arguments. It records who approved and when. ``AwaitApproval``
refuses an approval made for any other call. An :class:`ApprovalGate` is
whatever asks the person: a queue, a chat message, a CLI; ``statemachine.testing``
ships scripted ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field, ValidationError

from ._errors import DecisionRefusedError
from ._tools import WriteCall

__all__ = [
    "Approval",
    "ApprovalGate",
    "ApprovalRequest",
    "Denial",
    "Pending",
    "dump_decision",
    "load_decision",
]


class ApprovalRequest(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """What the person is asked to approve: one exact write call."""

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


class Approval(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A person's yes to one exact call."""

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


class Denial(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """A person's no, with the reason the model will be told."""

    reason: str = Field(min_length=1)
    denied_by: str = "unknown"


class Pending(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """No decision yet: the person was asked and will answer later.

    The run stops, interrupted, until it is resumed with the person's decision.
    """

    reason: str = Field(default="waiting for a person's decision", min_length=1)


@runtime_checkable
class ApprovalGate(Protocol):
    """Asks a person about one write call: ``Approval``, ``Denial``, or ``Pending``."""

    async def decide(self, request: ApprovalRequest) -> Approval | Denial | Pending:
        """The person's decision about ``request``."""
        ...


def dump_decision(decision: Approval | Denial) -> dict[str, Any]:
    """A person's decision as a plain JSON document, to store or send to another process.

    ``{"kind": "approval", "tool": ..., "args_hash": ..., "approved_by": ...,
    "approved_at": "<ISO 8601>"}`` or ``{"kind": "denial", "reason": ..., "denied_by": ...}``;
    :func:`load_decision` gives it back equal.
    """
    if isinstance(decision, Approval):
        return {"kind": "approval", **decision.model_dump(mode="json")}
    if isinstance(decision, Denial):
        return {"kind": "denial", **decision.model_dump(mode="json")}
    raise DecisionRefusedError(
        f"dump_decision takes an Approval or a Denial, got {type(decision).__name__}"
    )


def load_decision(document: Mapping[str, Any], *, run_id: str | None = None) -> Approval | Denial:
    """The :class:`Approval` or :class:`Denial` a :func:`dump_decision` document holds.

    A document of another shape raises :class:`DecisionRefusedError` (naming ``run_id``
    when given) that says what is wrong.
    """
    if not isinstance(document, Mapping):
        raise DecisionRefusedError(
            f"a decision is a JSON object, got {type(document).__name__}; "
            "write it with dump_decision()",
            run_id=run_id,
        )
    fields = dict(document)
    kind = fields.pop("kind", None)
    model: type[Approval] | type[Denial]
    if kind == "approval":
        model = Approval
    elif kind == "denial":
        model = Denial
    else:
        raise DecisionRefusedError(
            f"its kind is {kind!r}; a decision's kind is 'approval' or 'denial' "
            "(write it with dump_decision())",
            run_id=run_id,
        )
    try:
        return model.model_validate(fields)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or kind}: {item['msg']}"
            for item in error.errors()
        )
        raise DecisionRefusedError(
            f"it is not a valid {kind} ({problems}); write it with dump_decision()",
            run_id=run_id,
        ) from None
