"""Test doubles for users' own agents: a scripted model and scripted approval gates.

Everything here runs offline and deterministically. :func:`capture` collects the
spans, log events and metrics of a run (it needs ``opentelemetry-sdk``).

:func:`hand_built` and :func:`hand_approval` are for unit tests that drive phases by
hand, without a :class:`~statemachine.Runner`: a phase built with them is refused by
every ``Runner``, and such an approval is honoured only by a ``Runtime`` built by hand.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast, final

from . import _json
from ._approval import _HAND_GRANTS, _MINT, Approval, ApprovalRequest, Approve, Denial, _Grant
from ._errors import ScriptExhaustedError
from ._lazy import lazy_names
from ._model import ModelChunk, ModelReply, ModelRequest, ToolRequest, Usage
from ._money import to_money
from ._phases import AwaitApproval, Phase
from ._seal import _Ticket
from ._tools import AM

if TYPE_CHECKING:
    from ._capture import Capture, CapturedSpan, MetricPoint, capture
    from .persist._memory import MemoryCheckpointer

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
    "hand_approval",
    "hand_built",
    "reply",
    "tool_call",
]

# Loaded on first use: a test that drives a scripted run loads neither the stores nor
# the capture's classes (and logging with them).
_LAZY: Final[dict[str, str]] = {
    "Capture": "statemachine._capture",
    "CapturedSpan": "statemachine._capture",
    "MemoryCheckpointer": "statemachine.persist._memory",
    "MetricPoint": "statemachine._capture",
    "capture": "statemachine._capture",
}

if not TYPE_CHECKING:  # hidden from the type checkers, so a misspelt name stays an error
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)

P = TypeVar("P", bound=Phase[Any])


def hand_built(cls: type[P], /, **fields: Any) -> P:
    """A ``cls`` phase made from ``fields``, for a unit test that drives phases by hand.

    What ``cls(**fields)`` would make if phases had a public constructor. A ``Runner``
    refuses it (:class:`~statemachine.PhaseForgedError`), and so does every runner it
    leads to: it is for testing a phase's own methods, not for running agents.
    """
    return cls(**fields, ticket=_Ticket(None, "hand"))


def hand_approval(
    waiting: AwaitApproval[Any, AM],
    *,
    by: str = "test-approver",
    at: datetime | None = None,
    run_id: str = "",
) -> Approval[AM]:
    """An approval of the call ``waiting`` holds, for a unit test that drives it by hand.

    Pass it to ``waiting.approve(...)``. Only a ``Runtime`` built by hand honours it
    (``ToolCalling.execute`` refuses it in a ``Runner``'s run), for run ``run_id`` (by
    default any run driven by hand), once, as the runtime's own approvals are.
    """
    call = waiting.call
    approval = Approval[AM](
        id=f"hand-{uuid.uuid4().hex}",
        run_id=run_id,
        call_id=waiting.call_id,
        tool=call.name,
        args_hash=call.args_hash,
        approved_by=by,
        approved_at=at or datetime(2026, 1, 1, tzinfo=UTC),
        note="made by statemachine.testing.hand_approval",
        _token=_MINT,
    )
    _HAND_GRANTS[approval.id] = _Grant(approval)
    return approval


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


def _stream_chunks(chunks: int) -> int:
    if isinstance(chunks, bool) or chunks < 1:
        raise ValueError(f"stream_chunks must be a whole number of 1 or more, got {chunks!r}")
    return chunks


async def _streamed(reply: object, chunks: int) -> AsyncIterator[ModelChunk]:
    """``reply``'s text in ``chunks`` pieces as long as each other (give or take one
    character), then ``reply`` itself; what is not a reply is yielded as it is."""
    if not isinstance(reply, ModelReply):
        yield cast("ModelChunk", reply)  # not a chunk: the run refuses it, naming the model
        return
    text = reply.text
    size = -(-len(text) // chunks)
    for start in range(0, len(text), max(size, 1)):
        yield ModelChunk(text=text[start : start + size])
    yield ModelChunk(reply=reply)


@final
class ScriptedModel:
    """A model that replays a list of turns, one per call, and records each request.

    ``constrained=True`` makes it claim to enforce ``ModelRequest.output_schema``, as a
    structured-output backend does, so a guard in ``constrained`` mode accepts it.
    It streams too (a run asks it to while someone listens, ``Runner.events``): each
    turn's text in ``stream_chunks`` pieces, then the turn itself.
    """

    def __init__(
        self, turns: Iterable[ModelReply], *, constrained: bool = False, stream_chunks: int = 1
    ) -> None:
        self.turns = list(turns)
        self.constrained = constrained
        self.stream_chunks = _stream_chunks(stream_chunks)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The next scripted turn; :class:`ScriptExhaustedError` when none is left."""
        if len(self.requests) >= len(self.turns):
            raise ScriptExhaustedError("scripted model", len(self.turns))
        self.requests.append(request)
        return self.turns[len(self.requests) - 1]

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """The next scripted turn, its text in ``stream_chunks`` pieces, then the turn."""
        if len(self.requests) >= len(self.turns):
            raise ScriptExhaustedError("scripted model", len(self.turns))
        self.requests.append(request)
        return _streamed(self.turns[len(self.requests) - 1], self.stream_chunks)


@final
class FunctionModel:
    """A model whose replies come from a function of the request, sync or async.

    Each request is recorded; ``constrained`` and ``stream_chunks`` are as on
    ScriptedModel (when it streams, the function is called, and awaited, first).
    """

    def __init__(
        self,
        reply_to: Callable[[ModelRequest], ModelReply | Awaitable[ModelReply]],
        *,
        constrained: bool = False,
        stream_chunks: int = 1,
    ) -> None:
        self.reply_to = reply_to
        self.constrained = constrained
        self.stream_chunks = _stream_chunks(stream_chunks)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        """What ``reply_to`` answers for ``request`` (awaited if it is awaitable).

        Whatever else it answers is passed on as it is, so that a run turns it into a
        :class:`ModelResponseError` naming this model, as for any model.
        """
        self.requests.append(request)
        answer = self.reply_to(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """What ``reply_to`` answers for ``request``, its text in ``stream_chunks`` pieces."""
        answer = await self.complete(request)
        async for chunk in _streamed(answer, self.stream_chunks):
            yield chunk


@final
class AutoDenyGate:
    """An approval gate that denies every write call, recording each request."""

    def __init__(self, reason: str = "automatic denial: no person approved this call") -> None:
        self.reason = reason
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approve | Denial:
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

    async def decide(self, request: ApprovalRequest) -> Approve | Denial:
        """Approve the exact call asked about."""
        self.requests.append(request)
        return Approve(by=self.by, at=self.at)


@final
class ScriptedGate:
    """An approval gate that answers from a list of decisions, one per request.

    A decision is ``True`` (approve the call asked about), ``False`` (deny), or a ready
    ``Approve`` / ``Denial`` (to test, say, a yes bound to another call with
    ``Approve.of(other_request, by=...)``).
    """

    def __init__(self, decisions: Iterable[bool | Approve | Denial], *, by: str = "tester") -> None:
        self.decisions = list(decisions)
        self.by = by
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approve | Denial:
        """The next scripted decision; :class:`ScriptExhaustedError` when none is left."""
        if len(self.requests) >= len(self.decisions):
            raise ScriptExhaustedError("scripted approval gate", len(self.decisions))
        self.requests.append(request)
        decision = self.decisions[len(self.requests) - 1]
        if decision is True:
            return Approve(by=self.by, at=datetime(2026, 1, 1, tzinfo=UTC))
        if decision is False:
            return Denial(reason="denied by the script", denied_by=self.by)
        return decision
