"""The support agent's scenarios, each offline on a scripted model and a scripted person.

Every scenario works in ``workdir``: the payments service's ledger
(``payments.sqlite3``) and, for the durable one, the runs' checkpoints
(``runs.sqlite3``) are files there, two separate databases.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from pathlib import Path

import anyio
import attrs

from statemachine import (
    ApprovalRequest,
    Approve,
    Denial,
    ModelReply,
    Pending,
    Runner,
    RunResult,
    SQLiteCheckpointer,
)
from statemachine.testing import ScriptedGate, ScriptedModel, reply, tool_call

from ._agent import SupportContext, SupportDesk, support_agent
from ._payments import PaymentsService, Receipt

__all__ = [
    "LaterGate",
    "Outcome",
    "approved_refund",
    "denied_then_retried",
    "duplicate_refund",
    "waits_then_resumes",
]

ADA = SupportContext(customer_id="C-17")
ASK = "My espresso machine (order 1001) arrived broken. My code is 4417. Refund it, please."
# The model's arguments as JSON text: 137.32 is a JSON number, read as Decimal("137.32").
REFUND = '{"order_id": 1001, "amount": 137.32, "reason": "arrived broken"}'
APPROVER = "lin@refunds.example"

Sleep = Callable[[float], Awaitable[None]]


def _script(*turns: ModelReply) -> ScriptedModel:
    return ScriptedModel(turns)


LOOKUP = tool_call("lookup_order", {"order_id": 1001})
VERIFY = tool_call("verify_customer", {"customer_id": "C-17", "code": "4417"})
PAY = tool_call("refund", REFUND)


class LaterGate:
    """A person who answers later: every request is ``Pending``, and kept."""

    def __init__(self) -> None:
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        """Not yet."""
        self.requests.append(request)
        return Pending(reason="sent to the refunds desk")


@attrs.frozen
class Outcome:
    """What one scenario did: its run(s), the refunds paid, who was asked what."""

    title: str
    results: tuple[RunResult[SupportContext], ...]
    refunds: tuple[Receipt, ...]
    approvals_asked: int
    verifications_asked: int

    @property
    def result(self) -> RunResult[SupportContext]:
        """The last run (the resumed one, for a run that was resumed)."""
        return self.results[-1]

    @property
    def refunded(self) -> list[Decimal]:
        """The amounts refunded, in order."""
        return [receipt.amount for receipt in self.refunds]


async def _once(
    title: str,
    workdir: Path,
    model: ScriptedModel,
    gate: ScriptedGate,
    *,
    sleep: Sleep,
) -> Outcome:
    with PaymentsService(workdir / "payments.sqlite3") as payments:
        desk = SupportDesk(payments=payments)
        runner = Runner(support_agent(), model=model, gate=gate, sleep=sleep, seed=7)
        result = await runner.run(ADA, ASK, deps=desk)
        return Outcome(
            title=title,
            results=(result,),
            refunds=tuple(payments.receipts()),
            approvals_asked=len(gate.requests),
            verifications_asked=len(desk.verifier.asked),
        )


async def approved_refund(workdir: Path, *, sleep: Sleep = anyio.sleep) -> Outcome:
    """Look up, verify, refund $137.32: a person approves it and it is paid once."""
    model = _script(LOOKUP, VERIFY, PAY, reply("Refunded $137.32 (RF-0001)."))
    gate = ScriptedGate([True], by=APPROVER)
    return await _once("an approved refund, paid once", workdir, model, gate, sleep=sleep)


async def duplicate_refund(workdir: Path, *, sleep: Sleep = anyio.sleep) -> Outcome:
    """The model asks for the same refund twice: the second is suppressed, never asked about."""
    model = _script(LOOKUP, VERIFY, PAY, PAY, reply("Refunded $137.32 once (RF-0001)."))
    gate = ScriptedGate([True], by=APPROVER)
    return await _once("a duplicate refund, suppressed", workdir, model, gate, sleep=sleep)


async def denied_then_retried(workdir: Path, *, sleep: Sleep = anyio.sleep) -> Outcome:
    """Four of five tool iterations used, one a refund the person denied.

    The fifth is the model trying the denied refund again: suppressed (it was
    refused), and with the cap reached the model must answer, with no tools.
    """
    model = _script(
        LOOKUP,
        VERIFY,
        PAY,
        tool_call("lookup_order", {"order_id": 1002}),
        PAY,
        reply("The refund was not approved, so nothing was refunded."),
    )
    gate = ScriptedGate([False], by=APPROVER)
    title = "a denied refund, tried again: suppressed, within 5 tool iterations"
    return await _once(title, workdir, model, gate, sleep=sleep)


async def waits_then_resumes(workdir: Path, *, sleep: Sleep = anyio.sleep) -> Outcome:
    """The person answers later; the run resumes in a "new process" and pays once.

    The first process runs to ``AwaitApproval`` and stops there (the gate answers
    ``Pending``), checkpointed in SQLite. The second has nothing of the first but
    the two database files: a new desk (so nobody is verified in its sessions), a
    new model object, a new runner. It resumes with the person's approval; before
    the refund runs the agent asks the verification service again, then pays once.
    """
    runs = workdir / "runs.sqlite3"
    ledger = workdir / "payments.sqlite3"
    later = LaterGate()
    with PaymentsService(ledger) as payments:
        desk = SupportDesk(payments=payments)
        first_model = _script(LOOKUP, VERIFY, PAY)
        async with SQLiteCheckpointer(runs) as store:
            runner = Runner(
                support_agent(), model=first_model, gate=later, sleep=sleep, checkpointer=store
            )
            first = await runner.run(ADA, ASK, run_id="support-1", deps=desk)
        asked_before = len(desk.verifier.asked)
    # A person approves the exact call they were shown, later, elsewhere.
    approval = Approve.of(later.requests[-1], by=APPROVER)
    with PaymentsService(ledger) as payments:
        desk = SupportDesk(payments=payments)  # a new process: empty sessions
        model = _script(reply("Refunded $137.32 (RF-0001)."))
        async with SQLiteCheckpointer(runs) as store:
            runner = Runner(
                support_agent(), model=model, gate=LaterGate(), sleep=sleep, checkpointer=store
            )
            # The desk is not in the checkpoint: the resumed run is given this process's.
            resumed = await runner.resume("support-1", decision=approval, deps=desk)
        return Outcome(
            title="waits for a person, resumed in a new process, paid once",
            results=(first, resumed),
            refunds=tuple(payments.receipts()),
            approvals_asked=len(later.requests),
            verifications_asked=asked_before + len(desk.verifier.asked),
        )
