"""Test doubles for users' own agents: a scripted model and scripted approval gates.

Everything here runs offline and deterministically. :func:`capture` collects the
spans, log events and metrics of a run (it needs ``opentelemetry-sdk``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, final

from . import _json
from ._approval import Approval, ApprovalRequest, Denial
from ._capture import Capture, CapturedSpan, MetricPoint, capture
from ._errors import ScriptExhaustedError
from ._model import ModelReply, ModelRequest, ToolRequest, Usage
from ._money import to_money
from ._store import MemoryCheckpointer

__all__ = [
    "AutoApproveGate",
    "AutoDenyGate",
    "Capture",
    "CapturedSpan",
    "FunctionModel",
    "MemoryCheckpointer",
    "MetricPoint",
    "ScriptedGate",
    "ScriptedModel",
    "capture",
    "reply",
    "tool_call",
]


def reply(text: str, *, tokens: int = 0, cost: Decimal | str = "0") -> ModelReply:
    """A scripted model turn that answers with ``text``."""
    return ModelReply(text=text, usage=Usage(output_tokens=tokens, cost=to_money(cost)))


def tool_call(
    name: str,
    arguments: Mapping[str, Any] | str = "{}",
    *,
    tokens: int = 0,
    cost: Decimal | str = "0",
) -> ModelReply:
    """A scripted model turn that calls tool ``name``; arguments as JSON text or a dict."""
    text = arguments if isinstance(arguments, str) else _json.dumps(arguments)
    return ModelReply(
        tool_calls=(ToolRequest(name=name, arguments=text),),
        finish_reason="tool_calls",
        usage=Usage(output_tokens=tokens, cost=to_money(cost)),
    )


@final
class ScriptedModel:
    """A model that replays a list of turns, one per call, and records each request.

    ``constrained=True`` makes it claim to enforce ``ModelRequest.output_schema``, as a
    structured-output backend does, so a guard in ``constrained`` mode accepts it.
    """

    def __init__(self, turns: Iterable[ModelReply], *, constrained: bool = False) -> None:
        self.turns = list(turns)
        self.constrained = constrained
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The next scripted turn; :class:`ScriptExhaustedError` when none is left."""
        if len(self.requests) >= len(self.turns):
            raise ScriptExhaustedError("scripted model", len(self.turns))
        self.requests.append(request)
        return self.turns[len(self.requests) - 1]


@final
class FunctionModel:
    """A model whose replies come from a function of the request, sync or async.

    Each request is recorded; ``constrained`` is the same claim as on ScriptedModel.
    """

    def __init__(
        self,
        reply_to: Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]],
        *,
        constrained: bool = False,
    ) -> None:
        self.reply_to = reply_to
        self.constrained = constrained
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        """What ``reply_to`` answers for ``request`` (awaited if it is a coroutine)."""
        self.requests.append(request)
        answer = self.reply_to(request)
        if isinstance(answer, ModelReply):
            return answer
        if not inspect.isawaitable(answer):
            raise TypeError(
                f"FunctionModel's function returned {answer!r}; return a ModelReply "
                "(or await to one)"
            )
        return await answer


@final
class AutoDenyGate:
    """An approval gate that denies every write call, recording each request."""

    def __init__(self, reason: str = "automatic denial: no person approved this call") -> None:
        self.reason = reason
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approval | Denial:
        """Deny."""
        self.requests.append(request)
        return Denial(reason=self.reason, denied_by="auto-deny")


@final
class AutoApproveGate:
    """An approval gate that approves every write call as ``by``, recording each request."""

    def __init__(self, by: str = "test-approver", at: datetime | None = None) -> None:
        self.by = by
        self.at = at or datetime(2026, 1, 1, tzinfo=UTC)
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approval | Denial:
        """Approve the exact call asked about."""
        self.requests.append(request)
        return Approval.of(request, by=self.by, at=self.at)


@final
class ScriptedGate:
    """An approval gate that answers from a list of decisions, one per request.

    A decision is ``True`` (approve this exact call), ``False`` (deny), or a ready
    ``Approval`` / ``Denial`` (to test, say, an approval for another call).
    """

    def __init__(
        self, decisions: Iterable[bool | Approval | Denial], *, by: str = "tester"
    ) -> None:
        self.decisions = list(decisions)
        self.by = by
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approval | Denial:
        """The next scripted decision; :class:`ScriptExhaustedError` when none is left."""
        if len(self.requests) >= len(self.decisions):
            raise ScriptExhaustedError("scripted approval gate", len(self.decisions))
        self.requests.append(request)
        decision = self.decisions[len(self.requests) - 1]
        if decision is True:
            return Approval.of(request, by=self.by, at=datetime(2026, 1, 1, tzinfo=UTC))
        if decision is False:
            return Denial(reason="denied by the script", denied_by=self.by)
        return decision
