"""One process of the support agent's crash-injection test (tests/test_crash.py).

``python tests/crash_support.py start DIR SCENARIO [--kill-at K | --kill-in-refund]``
runs the support agent with its checkpoints (``DIR/runs.sqlite3``, or the PostgreSQL
store ``--dsn DSN`` names) and the payments ledger (``DIR/payments.sqlite3``) in
``DIR``. ``--kill-at K`` kills this process with SIGKILL right after the K-th
transition was saved; ``--kill-in-refund`` kills it inside the refund call, after the
payments service committed the refund and before the tool returned (so before its
result reached the side-effect ledger). Without either it runs to the end and prints
one JSON line describing every phase.

``python tests/crash_support.py resume DIR SCENARIO [--dsn DSN]`` is a new process on
the same files (and database): it reads the last checkpoint, resumes the run and
prints one JSON line.

The model is a function of the conversation it is shown, so a new process continues
where the old one stopped. SCENARIO is ``approve`` (a person approves the refund) or
``deny`` (the person refuses it; the model then asks for the same refund once more).
Every question to the person is appended to ``DIR/gate.log`` (and synced), so the
test can count them across processes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from agents.support import PaymentsService, SupportContext, SupportDesk, support_agent
from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    Denial,
    EffectUncertainError,
    ModelReply,
    ModelRequest,
    Phase,
    PostgresCheckpointer,
    RunClaimedError,
    Runner,
    RunResult,
    SQLiteCheckpointer,
    current_idempotency_key,
    load_phase,
    loads,
)
from statemachine.testing import FunctionModel, reply, tool_call

RUN_ID = "crash-1"
ADA = SupportContext(customer_id="C-17")
START_LEASE = timedelta(seconds=1)
ASK = "My espresso machine (order 1001) arrived broken. My code is 4417. Refund it, please."
DENIED = "the refunds desk does not refund this order"


def _told(request: ModelRequest, tool: str) -> list[str]:
    """What the tool messages named ``tool`` said, in order."""
    return [m.content for m in request.messages if m.role == "tool" and m.name == tool]


def decide(request: ModelRequest) -> ModelReply:
    """The next model turn, from the conversation alone (nothing kept between calls)."""
    looked = _told(request, "lookup_order")
    if not looked:
        return tool_call("lookup_order", {"order_id": 1001}, tokens=10, cost="0.01")
    if not _told(request, "verify_customer"):
        return tool_call(
            "verify_customer", {"customer_id": "C-17", "code": "4417"}, tokens=10, cost="0.01"
        )
    order = loads(looked[-1])
    refund = (
        f'{{"order_id": {order["order_id"]}, "amount": {order["paid"]}, '
        '"reason": "arrived broken"}'
    )
    refunds = _told(request, "refund")
    if not refunds:
        return tool_call("refund", refund, tokens=10, cost="0.01")
    if len(refunds) == 1 and refunds[0].startswith("Not approved"):
        # The person said no; the model tries the very same refund once more.
        return tool_call("refund", refund, tokens=10, cost="0.01")
    for said in refunds:
        if said.startswith("{") and "reference" in (answer := loads(said)):
            return reply(
                f"Refunded ${answer['refunded']} ({answer['reference']}).", tokens=5, cost="0.01"
            )
    return reply("The refund was not approved, so nothing was refunded.", tokens=5, cost="0.01")


class LoggingGate:
    """Approves (or denies) every request, appending it to ``log`` first (synced)."""

    def __init__(self, log: Path, *, approve: bool) -> None:
        self.log = log
        self.approve = approve

    async def decide(self, request: ApprovalRequest) -> Approve | Denial:
        """Log the question, then answer it."""
        with self.log.open("a") as file:
            file.write(f"{os.getpid()} {request.key}\n")
            file.flush()
            os.fsync(file.fileno())
        if self.approve:
            return Approve(by="lin@refunds.example", at=datetime(2026, 1, 1, tzinfo=UTC))
        return Denial(reason=DENIED, denied_by="lin@refunds.example")


def _spent(state: Phase[Any]) -> dict[str, Any]:
    spent = state.spent
    return {
        "tokens": spent.tokens,
        "cost": str(spent.cost),
        "tool_calls": spent.tool_calls,
        "model_calls": spent.model_calls,
    }


def _phase(state: Phase[Any]) -> dict[str, Any]:
    return {"kind": state.kind, "step": state.step, "spent": _spent(state)}


def _refunds(state: Phase[Any]) -> list[str]:
    """What became of each refund the model asked for (the governor's memory)."""
    return [a.outcome for a in state.loop.actions if a.tool == "refund"]


def _denied_in_transcript(state: Phase[Any]) -> bool:
    return any(
        m.role == "tool" and m.name == "refund" and m.content.startswith("Not approved")
        for m in state.transcript
    )


def _final(result: RunResult[SupportContext]) -> dict[str, Any]:
    final = result.final
    return {
        "status": result.status,
        **_phase(final),
        "answer": getattr(final, "answer", ""),
        "refunds": _refunds(final),
        "denied_in_transcript": _denied_in_transcript(final),
    }


def _gate_asks(workdir: Path) -> int:
    log = workdir / "gate.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _parts(
    workdir: Path, scenario: str
) -> tuple[PaymentsService, SupportDesk, Agent[Any, SupportDesk], Any]:
    payments = PaymentsService(workdir / "payments.sqlite3")
    desk = SupportDesk(payments=payments)
    return (
        payments,
        desk,
        support_agent(),
        LoggingGate(workdir / "gate.log", approve=scenario == "approve"),
    )


def _store(workdir: Path, dsn: str | None) -> SQLiteCheckpointer | PostgresCheckpointer:
    """The checkpoint store under test: SQLite in ``workdir``, or PostgreSQL at ``dsn``."""
    if dsn is None:
        return SQLiteCheckpointer(workdir / "runs.sqlite3")
    return PostgresCheckpointer(dsn)


async def start(
    workdir: Path, scenario: str, kill_at: int | None, in_refund: bool, dsn: str | None
) -> None:
    payments, desk, agent, gate = _parts(workdir, scenario)
    transitions: list[tuple[str, str]] = []

    def on_transition(before: Phase[Any], after: Phase[Any]) -> None:
        transitions.append((before.kind, after.kind))
        if kill_at is not None and len(transitions) == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if in_refund:
        commit = payments.refund

        def refund_then_die(*args: Any, **kwargs: Any) -> Any:
            receipt = commit(*args, **kwargs)  # committed in the payments service's file
            (workdir / "refund.key").write_text(current_idempotency_key() or "")
            os.kill(os.getpid(), signal.SIGKILL)
            return receipt  # pragma: no cover - never reached

        payments.refund = refund_then_die  # type: ignore[method-assign]

    async with _store(workdir, dsn) as store:
        runner = Runner(
            agent,
            model=FunctionModel(decide),
            gate=gate,
            checkpointer=store,
            on_transition=on_transition,
            seed=7,
            # A new run is held under a lease (issue 18): a short one, so that the resume
            # after a kill takes the run once the dead process's lease lapses.
            lease=START_LEASE,
            deps=desk,
            keep_states=True,  # the reference run's every phase is compared
        )
        result = await runner.run(ADA, ASK, run_id=RUN_ID)
    print(
        json.dumps(
            {
                "transitions": transitions,
                "states": [_phase(s) for s in result.states],
                "final": _final(result),
                "payments": payments.count(),
                "gate_asks": _gate_asks(workdir),
            }
        )
    )


async def slow_decide(request: ModelRequest) -> ModelReply:
    """``decide``, a second slower: so that a second resume arrives while this one runs."""
    await anyio.sleep(1.0)
    return decide(request)


async def _resume_when_free(runner: Runner[Any], *, patient: bool) -> RunResult[Any]:
    """Resume the run; a patient caller waits out the lease of a process killed while it
    held the run (at most a few of its lengths), as an operator would."""
    tries = int(START_LEASE.total_seconds() * 4 / 0.1) if patient else 1
    for attempt in range(tries):
        try:
            return await runner.resume(RUN_ID)
        except RunClaimedError:
            if attempt == tries - 1:
                raise
            await anyio.sleep(0.1)
    raise AssertionError("unreachable")


async def resume(workdir: Path, scenario: str, slow: bool, dsn: str | None) -> None:
    payments, desk, agent, gate = _parts(workdir, scenario)
    out: dict[str, Any] = {}
    async with _store(workdir, dsn) as store:
        record = await store.record(RUN_ID)
        seq, document = await store.load(RUN_ID)
        saved = load_phase(document, agents={agent.name: agent}, run_id=RUN_ID)
        out["saved"] = {"seq": seq, "status": str(record.status), **_phase(saved)}
        key_file = workdir / "refund.key"
        if key_file.exists():
            effect = await store.effect(key_file.read_text())
            out["effect_before_resume"] = None if effect is None else effect.status
        out["payments_before_resume"] = payments.count()
        model = FunctionModel(slow_decide if slow else decide)
        runner = Runner(
            agent, model=model, gate=gate, checkpointer=store, seed=7, deps=desk, keep_states=True
        )
        try:
            result = await _resume_when_free(runner, patient=not slow)
        except RunClaimedError:
            print(json.dumps({"claimed": True}))
            return
        except EffectUncertainError as error:
            out["first"] = None
            out["final"] = {"status": "interrupted", "waiting_for": error.waiting_for}
        else:
            out["first"] = _phase(result.states[0])
            out["final"] = _final(result)
        record = await store.record(RUN_ID)
        out["record"] = {"status": str(record.status), "phase": record.phase, "seq": record.seq}
        out["history"] = [[e.seq, e.phase] for e in await store.history(RUN_ID)]
    out["payments"] = payments.count()
    out["paid"] = [str(r.amount) for r in payments.receipts()]
    out["gate_asks"] = _gate_asks(workdir)
    print(json.dumps(out))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["start", "resume"])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("scenario", choices=["approve", "deny"])
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--kill-in-refund", action="store_true")
    parser.add_argument("--slow", action="store_true")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL store instead of SQLite")
    args = parser.parse_args(argv)
    if args.mode == "start":
        anyio.run(start, args.workdir, args.scenario, args.kill_at, args.kill_in_refund, args.dsn)
    else:
        anyio.run(resume, args.workdir, args.scenario, args.slow, args.dsn)


if __name__ == "__main__":
    main(sys.argv[1:])
