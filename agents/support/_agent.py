"""The support agent: order look-ups and customer verification (read), refunds (write).

What the run's state holds and what it does not:

- the state (checkpointed after every transition) holds the conversation, including
  the ``verify_customer`` call and its answer, the spend and the governor's memory;
- *which customer is verified* is a live fact of the verification service, held by
  this process in :class:`VerifiedSessions` (keyed by run id), never checkpointed.
  A refund is paid only for a customer this process saw verified in this run.

After a resume in a fresh process the sessions are empty. Before it goes on, the
agent re-establishes them itself, by code and not by the model: the first
``Planning`` or ``ToolCalling`` of the run in this process finds the last successful
``verify_customer`` call in the transcript and asks the verification service again
with the same customer and code (:func:`reestablish`). The service, not the
transcript, has the last word: a code revoked in the meantime leaves the customer
unverified, and the refund is refused. ``ToolCalling`` re-establishes too because a
run resumed from ``AwaitApproval`` goes straight to the refund, with no planning
step in between; asking right before money moves is also what a run that waited
overnight for its approval needs.

The desk (order book, payments, verification service, sessions) is the agent's
dependencies (``deps_type=SupportDesk``): not part of the agent, not checkpointed, given
to every run and every resume (``Runner(support_agent(), ..., deps=desk)``). The tools
take it, with the run id, from their ``RunContext``; the two phases read it from the
runtime (``rt.deps_as(SupportDesk)``).
"""

from __future__ import annotations

from contextvars import ContextVar
from decimal import Decimal
from typing import Any, cast

import attrs
from pydantic import BaseModel, Field

from statemachine import (
    Agent,
    AwaitApproval,
    Budget,
    Failed,
    ModelRetrying,
    Money,
    Observing,
    Phases,
    Planning,
    Responding,
    Retrying,
    RetryPolicy,
    RunContext,
    Runtime,
    ToolCalling,
    ToolError,
    Transcript,
    loads,
    read_tool,
    write_tool,
)

from ._payments import IdempotencyConflictError, PaymentsService, RefundRefusedError

__all__ = [
    "INSTRUCTIONS",
    "ORDERS",
    "LookupArgs",
    "Order",
    "RefundArgs",
    "SupportContext",
    "SupportDesk",
    "SupportPlanning",
    "SupportToolCalling",
    "VerificationService",
    "VerifiedSessions",
    "VerifyArgs",
    "reestablish",
    "support_agent",
]


@attrs.frozen
class Order:
    """An order in the shop's order book."""

    order_id: int
    customer_id: str
    item: str
    paid: Decimal


ORDERS: dict[int, Order] = {
    order.order_id: order
    for order in (
        Order(1001, "C-17", "espresso machine", Decimal("137.32")),
        Order(1002, "C-17", "milk frother", Decimal("24.90")),
        Order(1003, "C-42", "grinder", Decimal("289.00")),
    )
}

CODES = {"C-17": "4417", "C-42": "0042"}


@attrs.define
class VerificationService:
    """The identity service: checks a customer's code; records every question it is asked.

    ``revoked`` customers fail every check (a code reset since the run began).
    """

    codes: dict[str, str] = attrs.field(factory=lambda: dict(CODES))
    revoked: set[str] = attrs.field(factory=set[str])
    asked: list[str] = attrs.field(factory=list[str])

    def verify(self, customer_id: str, code: str) -> bool:
        """Whether ``code`` is ``customer_id``'s current code."""
        self.asked.append(customer_id)
        if customer_id in self.revoked:
            return False
        return self.codes.get(customer_id) == code


@attrs.define
class VerifiedSessions:
    """Which customer this process saw verified, per run. Process memory: never saved."""

    _by_run: dict[str, str] = attrs.field(factory=dict[str, str], alias="by_run")

    def verified(self, run_id: str | None) -> str | None:
        """The customer verified in run ``run_id`` (in this process), or ``None``."""
        return None if run_id is None else self._by_run.get(run_id)

    def remember(self, run_id: str, customer_id: str) -> None:
        """``customer_id`` was verified in run ``run_id``."""
        self._by_run[run_id] = customer_id

    def clear(self) -> None:
        """Forget everything: what a new process starts with."""
        self._by_run.clear()


@attrs.define
class SupportDesk:
    """What the support agent works with: the order book and three services."""

    payments: PaymentsService
    verifier: VerificationService = attrs.field(factory=VerificationService)
    sessions: VerifiedSessions = attrs.field(factory=VerifiedSessions)
    orders: dict[int, Order] = attrs.field(factory=lambda: dict(ORDERS))


# The customer verified in the run a SupportPlanning is planning for, while its advance
# runs: what its instructions() (which is given no runtime) tells the model.
_VERIFIED: ContextVar[str | None] = ContextVar("support_verified", default=None)


@attrs.frozen
class SupportContext:
    """Who the support agent is talking to: the support agent's context type."""

    customer_id: str


class LookupArgs(BaseModel):
    """Arguments of lookup_order."""

    order_id: int


class VerifyArgs(BaseModel):
    """Arguments of verify_customer: the customer and the code they gave."""

    customer_id: str = Field(min_length=1)
    code: str = Field(min_length=1)


class RefundArgs(BaseModel):
    """Arguments of refund; ``amount`` is exact (a JSON number, read as ``Decimal``)."""

    order_id: int
    amount: Money = Field(gt=0)
    reason: str = Field(min_length=1)


def _last_verification(transcript: Transcript) -> VerifyArgs | None:
    """The arguments of the last ``verify_customer`` call the service answered yes to."""
    asked: dict[str, str] = {}
    found: VerifyArgs | None = None
    for message in transcript:
        for request in message.tool_calls:
            if request.name == "verify_customer" and request.id:
                asked[request.id] = request.arguments
        if message.role != "tool" or message.tool_call_id not in asked:
            continue
        try:
            answer = loads(message.content)
            if isinstance(answer, dict) and cast("dict[str, Any]", answer).get("verified") is True:
                found = VerifyArgs.model_validate(loads(asked[message.tool_call_id]))
        except ValueError:  # a suppressed call's words, not the service's answer
            continue
    return found


def reestablish(desk: SupportDesk, run_id: str, transcript: Transcript) -> bool:
    """Make sure this process knows who was verified in run ``run_id``; whether anyone was.

    Nothing to do when the session knows already. Otherwise (a fresh process after a
    resume) the verification service is asked again with the customer and code of
    the last successful ``verify_customer`` call in ``transcript``: the model is not
    asked, and a code the service no longer accepts leaves the run unverified.
    """
    if desk.sessions.verified(run_id) is not None:
        return True
    earlier = _last_verification(transcript)
    if earlier is None:
        return False
    if not desk.verifier.verify(earlier.customer_id, earlier.code):
        return False
    desk.sessions.remember(run_id, earlier.customer_id)
    return True


class SupportPlanning(Planning[SupportContext]):
    """Planning that re-establishes the verification first and tells the model about it.

    The desk is the run's dependencies (``rt.deps_as(SupportDesk)``).
    """

    def instructions(self) -> str:
        """The system prompt: the agent's, the customer, and whether they are verified."""
        verified = _VERIFIED.get() == self.ctx.customer_id
        status = "verified" if verified else "not verified yet: verify before any refund"
        return f"{self.agent.instructions}\nCustomer: {self.ctx.customer_id} ({status})."

    async def advance(
        self, rt: Runtime
    ) -> (
        ToolCalling[SupportContext]
        | AwaitApproval[SupportContext]
        | Responding[SupportContext]
        | Planning[SupportContext]
        | ModelRetrying[SupportContext]
        | Failed[SupportContext]
    ):
        """Re-establish who is verified (if this process does not know), then plan."""
        desk = rt.deps_as(SupportDesk)
        reestablish(desk, rt.run_id, self.transcript)
        token = _VERIFIED.set(desk.sessions.verified(rt.run_id))
        try:
            return await super().advance(rt)
        finally:
            _VERIFIED.reset(token)


class SupportToolCalling(ToolCalling[SupportContext]):
    """ToolCalling that re-establishes the verification before the tool runs (or its
    recorded result is replayed), with the desk the run was given."""

    async def execute(
        self, rt: Runtime
    ) -> Observing[SupportContext] | Retrying[SupportContext] | Failed[SupportContext]:
        """Re-establish who is verified (if this process does not know), then run the tool."""
        reestablish(rt.deps_as(SupportDesk), rt.run_id, self.transcript)
        return await super().execute(rt)


INSTRUCTIONS = (
    "You are the support agent of an online shop. Before a refund, look the order up "
    "and verify the customer with the code they give you (verify_customer). Refund at "
    "most what was paid, never the same thing twice; a person approves every refund."
)


@read_tool(timeout=5.0)
async def lookup_order(args: LookupArgs, ctx: RunContext[SupportDesk]) -> dict[str, object]:
    """Look an order up: who placed it, what it was, what was paid and refunded."""
    desk = ctx.deps
    order = desk.orders.get(args.order_id)
    if order is None:
        return {"order_id": args.order_id, "found": False}
    return {
        "order_id": order.order_id,
        "found": True,
        "customer_id": order.customer_id,
        "item": order.item,
        "paid": order.paid,
        "refunded": desk.payments.refunded(order.order_id),
    }


@read_tool(timeout=5.0)
async def verify_customer(args: VerifyArgs, ctx: RunContext[SupportDesk]) -> dict[str, object]:
    """Check the verification code the customer gave; required before any refund."""
    verified = ctx.deps.verifier.verify(args.customer_id, args.code)
    if verified:
        ctx.deps.sessions.remember(ctx.run_id, args.customer_id)
    return {"customer_id": args.customer_id, "verified": verified}


@write_tool(cost=lambda args: args.amount, idempotent=True, timeout=5.0)
async def refund(args: RefundArgs, ctx: RunContext[SupportDesk]) -> dict[str, object]:
    """Refund (part of) an order to a verified customer. A person approves every refund."""
    desk = ctx.deps
    order = desk.orders.get(args.order_id)
    if order is None:
        raise ToolError(f"order {args.order_id} does not exist", retryable=False)
    verified = desk.sessions.verified(ctx.run_id)
    if verified != order.customer_id:
        raise ToolError(
            f"customer {order.customer_id} is not verified in this conversation; "
            "nothing was refunded",
            retryable=False,
        )
    key = ctx.idempotency_key
    if key is None:
        raise ToolError("a refund needs an idempotency key; none was given", retryable=False)
    try:
        receipt = desk.payments.refund(
            order.order_id, args.amount, args.reason, key=key, limit=order.paid
        )
    except (RefundRefusedError, IdempotencyConflictError) as error:
        raise ToolError(str(error), retryable=False) from error
    return {
        "reference": receipt.reference,
        "order_id": receipt.order_id,
        "refunded": receipt.amount,
    }


def support_agent(
    *, budget: Budget | None = None, retry: RetryPolicy | None = None
) -> Agent[SupportContext, SupportDesk]:
    """The support agent: five tool iterations, every refund approved by a person.

    Its runs are given a :class:`SupportDesk` as their dependencies (``deps=desk``).
    """
    return Agent(
        name="support",
        deps_type=SupportDesk,
        tools=[lookup_order, verify_customer, refund],
        instructions=INSTRUCTIONS,
        budget=budget or Budget(),
        retry=retry or RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=1.0),
        max_tool_iterations=5,
        phases=Phases(planning=SupportPlanning, tool_calling=SupportToolCalling),
    )
