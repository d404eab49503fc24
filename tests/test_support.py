"""The support agent: refunds approved by a person, paid exactly once, durable across processes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from decimal import Decimal
from pathlib import Path

import pytest
from support import RecordingSleep

from agents.support import (
    IdempotencyConflictError,
    LaterGate,
    PaymentsService,
    Receipt,
    RefundRefusedError,
    SupportContext,
    SupportDesk,
    approved_refund,
    denied_then_retried,
    duplicate_refund,
    support_agent,
    waits_then_resumes,
)
from statemachine import Approve, Done, Failed, Runner, RunStatus, SQLiteCheckpointer
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, scope="module", params=["lexical", "embedding"])
def similarity(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs with each of the governor's semantic-tier similarities (chosen by
    ``STATEMACHINE_SIMILARITY``): the agent behaves the same with either (issue 22)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STATEMACHINE_SIMILARITY", request.param)
        yield request.param


ADA = SupportContext(customer_id="C-17")
ASK = "Order 1001 arrived broken. My code is 4417. Refund it, please."
LOOKUP = tool_call("lookup_order", {"order_id": 1001})
VERIFY = tool_call("verify_customer", {"customer_id": "C-17", "code": "4417"})
PAY = tool_call("refund", '{"order_id": 1001, "amount": 137.32, "reason": "arrived broken"}')

BEFORE_APPROVAL = (
    "Idle",
    "Planning",
    "ToolCalling",
    "Observing",
    "Planning",
    "ToolCalling",
    "Observing",
    "Planning",
    "AwaitApproval",
)
PAID_AND_ANSWERED = ("ToolCalling", "Observing", "Planning", "Responding", "Done")


async def test_an_approved_refund_is_paid_once_for_the_exact_amount(tmp_path: Path) -> None:
    """Look up, verify, refund: one approval, one refund of exactly $137.32."""
    outcome = await approved_refund(tmp_path, sleep=RecordingSleep())
    assert outcome.result.history == BEFORE_APPROVAL + PAID_AND_ANSWERED
    assert outcome.refunded == [Decimal("137.32")]
    assert outcome.approvals_asked == 1
    assert outcome.result.final.spent.cost == Decimal("137.32")  # the cost budget counts money


async def test_a_duplicate_refund_is_suppressed_and_nobody_is_asked_twice(tmp_path: Path) -> None:
    """The same refund asked for twice: the second never reaches the person or the service."""
    outcome = await duplicate_refund(tmp_path, sleep=RecordingSleep())
    assert outcome.result.history == (
        *BEFORE_APPROVAL,
        "ToolCalling",
        "Observing",
        "Planning",
        "Planning",
        "Responding",
        "Done",
    )
    assert outcome.result.trace().count("-[suppress: exact]->") == 1
    assert outcome.refunded == [Decimal("137.32")]
    assert outcome.approvals_asked == 1
    told = [m.content for m in outcome.result.final.transcript if m.role == "tool"][-1]
    assert "refund changes things, so it will not be done twice" in told


async def test_seed_a_denied_refund_cannot_be_retried_in_the_last_iteration(
    tmp_path: Path,
) -> None:
    """4 of 5 iterations used, one a denied refund: one more iteration, the retry suppressed.

    After the fifth iteration the model is asked once more with no tools, so the
    refund cannot be tried a third time either.
    """
    outcome = await denied_then_retried(tmp_path, sleep=RecordingSleep())
    assert outcome.result.history == (
        *BEFORE_APPROVAL,
        "Planning",  # denied
        "ToolCalling",
        "Observing",
        "Planning",  # iteration 4: lookup_order(1002)
        "Planning",  # iteration 5: the denied refund again, suppressed
        "Responding",  # the cap: finalize, no tools
        "Done",
    )
    trace = outcome.result.trace()
    assert "-[suppress: exact]-> Planning -[finalize: tool_iterations]-> Responding" in trace
    final = outcome.result.final
    assert final.loop.tool_iterations == 5
    assert [a.outcome for a in final.loop.actions if a.tool == "refund"] == [
        "refused",
        "suppressed",
    ]
    assert outcome.refunded == []
    assert outcome.approvals_asked == 1


async def test_a_waiting_run_resumes_in_a_new_process_and_pays_once(tmp_path: Path) -> None:
    """Pending, checkpointed; resumed by a new runner, model and desk: paid exactly once."""
    outcome = await waits_then_resumes(tmp_path, sleep=RecordingSleep())
    first, resumed = outcome.results
    assert first.status == "paused"
    assert first.history == (*BEFORE_APPROVAL, "AwaitApproval")
    assert resumed.history == ("AwaitApproval", *PAID_AND_ANSWERED)
    assert outcome.refunded == [Decimal("137.32")]
    assert outcome.verifications_asked == 2  # once by the model, once again after the resume
    async with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
        assert (await store.record("support-1")).status == RunStatus.COMPLETED


async def test_decimal_137_32_from_the_model_stays_exact_in_the_payments_ledger(
    tmp_path: Path,
) -> None:
    """The JSON number 137.32 is Decimal("137.32") in the tool, the ledger and its file."""
    outcome = await approved_refund(tmp_path, sleep=RecordingSleep())
    (receipt,) = outcome.refunds
    assert receipt.amount == Decimal("137.32")
    assert isinstance(receipt.amount, Decimal)
    with closing(sqlite3.connect(tmp_path / "payments.sqlite3")) as db:
        assert db.execute("SELECT amount, typeof(amount) FROM refunds").fetchall() == [
            ("137.32", "text")
        ]


def test_the_payments_service_never_pays_twice_for_one_key(tmp_path: Path) -> None:
    """A key seen before returns its receipt, even from another connection; nothing more is paid."""
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        first = payments.refund(1001, Decimal("10.10"), "broken", key="k-1")
        again = payments.refund(1001, Decimal("10.10"), "broken", key="k-1")
        with PaymentsService(tmp_path / "payments.sqlite3") as other:
            from_elsewhere = other.refund(1001, Decimal("10.10"), "broken", key="k-1")
        assert (again.reference, again.replayed) == (first.reference, True)
        assert from_elsewhere.reference == first.reference
        assert payments.count() == 1
        assert payments.total() == Decimal("10.10")
        with pytest.raises(IdempotencyConflictError):
            payments.refund(1001, Decimal("99"), "broken", key="k-1")
        payments.refund(1001, Decimal("10.10"), "second part", key="k-2")
        assert payments.count() == 2
        assert payments.total() == Decimal("20.20")


def test_the_payments_service_refuses_more_than_is_left_but_replays_a_paid_key(
    tmp_path: Path,
) -> None:
    """The limit caps new refunds; a key already paid still gets its receipt back."""
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        payments.refund(1001, Decimal("137.32"), "broken", key="k-1", limit=Decimal("137.32"))
        with pytest.raises(RefundRefusedError, match=r"only 0\.00 is left to refund"):
            payments.refund(1001, Decimal("0.01"), "more", key="k-2", limit=Decimal("137.32"))
        replay = payments.refund(1001, Decimal("137.32"), "broken", key="k-1", limit=Decimal(1))
        assert replay.replayed
        assert payments.count() == 1


async def _pause_before_refund(desk: SupportDesk, store: SQLiteCheckpointer) -> Approve:
    """Run to AwaitApproval with a person who answers later; the approval they then give."""
    later = LaterGate()
    runner = Runner(
        support_agent(),
        model=ScriptedModel([LOOKUP, VERIFY, PAY]),
        gate=later,
        checkpointer=store,
        deps=desk,
    )
    result = await runner.run(ADA, ASK, run_id="run-1")
    assert result.status == "paused"
    return Approve.of(later.requests[-1], by="lin@refunds.example")


async def test_resume_re_establishes_the_verification_before_paying(tmp_path: Path) -> None:
    """A new process (sessions cleared) asks the verification service again, then pays once."""
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        desk = SupportDesk(payments=payments)
        async with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
            approval = await _pause_before_refund(desk, store)
            assert desk.sessions.verified("run-1") == "C-17"
            assert desk.verifier.asked == ["C-17"]
            desk.sessions.clear()  # what a new process starts with
            runner = Runner(
                support_agent(),
                model=ScriptedModel([reply("Refunded $137.32.")]),
                gate=LaterGate(),
                checkpointer=store,
                deps=desk,
            )
            resumed = await runner.resume("run-1", decision=approval)
        assert isinstance(resumed.final, Done)
        assert desk.verifier.asked == ["C-17", "C-17"]  # asked again, by code, not the model
        assert desk.sessions.verified("run-1") == "C-17"
        assert payments.count() == 1


async def test_a_code_revoked_before_the_resume_leaves_the_refund_refused(tmp_path: Path) -> None:
    """The service has the last word: no longer verified, the refund is refused, nothing paid."""
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        desk = SupportDesk(payments=payments)
        async with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
            approval = await _pause_before_refund(desk, store)
            desk.sessions.clear()
            desk.verifier.revoked.add("C-17")
            runner = Runner(
                support_agent(),
                model=ScriptedModel([]),
                gate=LaterGate(),
                checkpointer=store,
                deps=desk,
            )
            resumed = await runner.resume("run-1", decision=approval)
        assert isinstance(resumed.final, Failed)
        assert resumed.final.reason == (
            "refund failed: ToolError: customer C-17 is not verified in this conversation; "
            "nothing was refunded"
        )
        assert payments.count() == 0


class ProcessKilled(BaseException):
    """The process dies: no ``except Exception`` in the library sees it."""


class DiesAfterPaying(PaymentsService):
    """A payments service whose caller's process dies right after the refund is made."""

    def refund(
        self,
        order_id: int,
        amount: Decimal,
        reason: str,
        *,
        key: str,
        limit: Decimal | None = None,
    ) -> Receipt:
        super().refund(order_id, amount, reason, key=key, limit=limit)
        raise ProcessKilled


async def test_a_crash_after_paying_is_replayed_with_the_same_key_and_pays_once(
    tmp_path: Path,
) -> None:
    """Paid, then the process died before the result was recorded: resumed, paid once."""
    ledger = tmp_path / "payments.sqlite3"
    async with SQLiteCheckpointer(tmp_path / "runs.sqlite3") as store:
        with DiesAfterPaying(ledger) as dying:
            runner = Runner(
                support_agent(),
                model=ScriptedModel([LOOKUP, VERIFY, PAY]),
                gate=AutoApproveGate(by="lin@refunds.example"),
                checkpointer=store,
                deps=SupportDesk(payments=dying),
            )
            with pytest.raises(ProcessKilled):
                await runner.run(ADA, ASK, run_id="run-2")
        with PaymentsService(ledger) as payments:
            desk = SupportDesk(payments=payments)  # a new process
            runner = Runner(
                support_agent(),
                model=ScriptedModel([reply("Refunded $137.32.")]),
                gate=AutoApproveGate(),
                checkpointer=store,
                deps=desk,
            )
            resumed = await runner.resume("run-2")
            assert resumed.history == PAID_AND_ANSWERED
            assert payments.count() == 1
            assert payments.total() == Decimal("137.32")
            assert desk.verifier.asked == ["C-17"]  # re-established before the replay


async def test_a_refund_for_an_unverified_customer_is_refused_by_the_tool(tmp_path: Path) -> None:
    """The model skips verification; approved or not, the tool refuses and nothing is paid."""
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        runner = Runner(
            support_agent(),
            model=ScriptedModel([LOOKUP, PAY]),
            gate=AutoApproveGate(),
            deps=SupportDesk(payments=payments),
        )
        result = await runner.run(ADA, ASK)
        assert isinstance(result.final, Failed)
        assert "customer C-17 is not verified" in result.final.reason
        assert payments.count() == 0


async def test_more_than_was_paid_is_refused_before_any_money_moves(tmp_path: Path) -> None:
    """$200 on an order that paid $137.32: refused by the service, the run fails, nothing paid."""
    too_much = tool_call(
        "refund", '{"order_id": 1001, "amount": 200.00, "reason": "arrived broken"}'
    )
    with PaymentsService(tmp_path / "payments.sqlite3") as payments:
        runner = Runner(
            support_agent(),
            model=ScriptedModel([LOOKUP, VERIFY, too_much]),
            gate=AutoApproveGate(),
            deps=SupportDesk(payments=payments),
        )
        result = await runner.run(ADA, ASK)
        assert isinstance(result.final, Failed)
        assert "only 137.32 is left to refund" in result.final.reason
        assert payments.count() == 0


async def test_the_demo_splits_the_cost_and_counts_in_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m agents.support` says what its cost is made of, in cents, in plain counts."""
    from agents.support.__main__ import main

    await main()
    out = capsys.readouterr().out
    assert out.count("spent:     3 tool calls, $137.32 (tools $137.32, model $0.00)") == 3
    assert "spent:     3 tool calls, $0.00 (tools $0.00, model $0.00)" in out
    assert out.count("verified:  the verification service was asked 1 time\n") == 3
    assert "verified:  the verification service was asked 2 times\n" in out
    assert "(s)" not in out
