"""The support agent for workers: many runs, one runner, a scripted desk and a refunds policy.

``python -m statemachine worker --agent agents.support`` calls :func:`worker_runner`
with the worker's store. The runner it builds answers every run offline, whatever
the run: :class:`DeskModel` reads the conversation so far (not a script position)
and takes the next step a support agent would - look the order up, verify the
customer, ask for the refund, answer - so any worker can go on with any run from
any checkpoint. :class:`RefundPolicy` approves refunds up to a limit at once and
sends larger ones to a person (the run waits, ``interrupted``, until a decision is
submitted to the store; a worker then goes on with it).

Refunds go to the :class:`PaymentsService` at ``$SUPPORT_PAYMENTS_DB``, else
``payments.sqlite3`` beside the runs' SQLite file (or in the working directory):
one file that every worker on the machine shares, so no refund is paid twice
whichever worker sends it, however often.

:func:`support_requests` makes a mix of customers' requests to submit
(``python -m agents.support submit --db PATH --count N``).
"""

from __future__ import annotations

import os
import random
import re
import weakref
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, cast

from statemachine import (
    ApprovalRequest,
    Approve,
    Checkpointer,
    Denial,
    Model,
    ModelReply,
    ModelRequest,
    Pending,
    Runner,
    SQLiteCheckpointer,
    Transcript,
    loads,
    money_difference,
)
from statemachine.testing import reply, tool_call

from ._agent import ORDERS, Order, SupportContext, SupportDesk, support_agent
from ._payments import PaymentsService

__all__ = [
    "AUTO_APPROVE_UP_TO",
    "PAYMENTS_VAR",
    "WORKER_ORDERS",
    "DeskModel",
    "RefundPolicy",
    "support_requests",
    "worker_runner",
]

PAYMENTS_VAR: Final = "SUPPORT_PAYMENTS_DB"
AUTO_APPROVE_UP_TO: Final = Decimal("50.00")
# Orders 2000-2999 of customer C-17, one per request, so that each refund is its own.
WORKER_ORDERS: Final[dict[int, Order]] = {
    number: Order(number, "C-17", "gift box", Decimal(f"{10 + number % 80}.{number % 100:02d}"))
    for number in range(2000, 3000)
}
_ORDER = re.compile(r"order\s+(\d+)", re.IGNORECASE)
_CODE = re.compile(r"code\s+(?:is\s+)?(\d+)", re.IGNORECASE)
_CUSTOMER = re.compile(r"Customer:\s+(\S+)")


def _said(messages: Transcript, role: str) -> str:
    return next((message.content for message in messages if message.role == role), "")


def _answers(messages: Transcript, tool: str) -> list[str]:
    """What each call of ``tool`` answered (or what the run was told instead), in order."""
    return [
        message.content for message in messages if message.role == "tool" and message.name == tool
    ]


def _json(text: str) -> dict[str, Any]:
    try:
        value = loads(text)
    except ValueError:
        return {}
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


class DeskModel:
    """A scripted model that works from the conversation: the next step of any support run.

    Look the order up; for a refund, verify the customer with the code they gave, ask
    for the refund of what the order cost, then answer with what happened; for any
    other question, answer with the order's details. It keeps nothing between calls.
    """

    async def complete(self, request: ModelRequest) -> ModelReply:
        """The next step for the conversation in ``request``."""
        messages = request.messages
        asked = _said(messages, "user")
        order_match = _ORDER.search(asked)
        if order_match is None:
            return reply("Which order is it about? Please give me its number.")
        order_id = int(order_match[1])
        looked_up = _answers(messages, "lookup_order")
        if not looked_up:
            return tool_call("lookup_order", {"order_id": order_id})
        order = _json(looked_up[-1])
        if not order.get("found"):
            return reply(f"I could not find order {order_id}.")
        if "refund" not in asked.lower():
            return reply(f"Order {order_id}: {order.get('item')}, paid ${order.get('paid')}.")
        code = _CODE.search(asked)
        customer = _CUSTOMER.search(_said(messages, "system"))
        verified = _answers(messages, "verify_customer")
        if not verified:
            if code is None or customer is None:
                return reply("To refund an order I need the verification code you were sent.")
            return tool_call("verify_customer", {"customer_id": customer[1], "code": code[1]})
        if _json(verified[-1]).get("verified") is not True:
            return reply("I could not verify you with that code, so I cannot refund the order.")
        refunds = _answers(messages, "refund")
        if not refunds:
            paid = Decimal(str(order.get("paid")))
            amount = money_difference(paid, Decimal(str(order.get("refunded") or 0)))
            if amount <= 0:
                return reply(f"Order {order_id} has been refunded in full already.")
            arguments = {"order_id": order_id, "amount": amount, "reason": "customer request"}
            return tool_call("refund", arguments)
        receipt = _json(refunds[-1])
        if "reference" in receipt:
            return reply(f"Refunded ${receipt['refunded']} ({receipt['reference']}).")
        return reply(f"Nothing was refunded: {refunds[-1][:200]}")


class RefundPolicy:
    """The approval gate: refunds up to ``up_to`` are approved at once; a person decides the rest.

    A larger refund gets ``Pending``: the run waits (``interrupted``) until a person's
    decision is submitted to the store (``python -m statemachine runs approve ID``).
    """

    def __init__(self, up_to: Decimal = AUTO_APPROVE_UP_TO) -> None:
        self.up_to = up_to

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        """Approve a small refund by policy; send any other write call to a person."""
        amount = request.arguments.get("amount")
        if request.tool == "refund" and isinstance(amount, Decimal) and amount <= self.up_to:
            return Approve(by=f"policy: refunds up to ${self.up_to}")
        return Pending(reason="sent to the refunds desk")


def _payments_path(checkpointer: Checkpointer) -> Path:
    given = os.environ.get(PAYMENTS_VAR, "")
    if given:
        return Path(given)
    if isinstance(checkpointer, SQLiteCheckpointer):
        return checkpointer.path.parent / "payments.sqlite3"
    return Path("payments.sqlite3")


def worker_runner(
    checkpointer: Checkpointer,
    *,
    payments: PaymentsService | None = None,
    up_to: Decimal = AUTO_APPROVE_UP_TO,
    model: Model | None = None,
) -> Runner[SupportContext, SupportDesk]:
    """A runner of the support agent for a worker on ``checkpointer``.

    The model is a :class:`DeskModel` (or ``model``) and the gate a
    :class:`RefundPolicy` approving up to ``up_to``. ``payments`` defaults to the
    shared service file (see the module).
    The order book holds the shop's orders and :data:`WORKER_ORDERS`.
    """
    service = payments if payments is not None else PaymentsService(_payments_path(checkpointer))
    desk = SupportDesk(payments=service, orders={**ORDERS, **WORKER_ORDERS})
    runner = Runner(
        support_agent(),
        model=DeskModel() if model is None else model,
        gate=RefundPolicy(up_to),
        checkpointer=checkpointer,
        keep_states=False,  # a worker reads the store, not the phases in memory
        deps=desk,  # every run this runner drives or resumes is given the desk
    )
    if payments is None:
        # The service opened here has no owner but the desk (the worker command only
        # builds the runner): it is closed when the desk is gone, not left open.
        weakref.finalize(desk, service.close)
    return runner


def support_requests(count: int, *, seed: int = 0) -> list[tuple[SupportContext, str]]:
    """``count`` customers' requests, mixed: refunds (small, approved by policy; larger,
    waiting for a person) and questions, each refund about an order of its own."""
    rng = random.Random(seed)
    requests: list[tuple[SupportContext, str]] = []
    for index in range(count):
        order = 2000 + (index * 37) % len(WORKER_ORDERS)  # 37 and 1000: no repeat for 1000
        if rng.random() < 0.25:
            text = f"Where is my order {order}?"
        else:
            text = f"Order {order} never arrived. My code is 4417. Refund it, please."
        requests.append((SupportContext(customer_id="C-17"), text))
    return requests
