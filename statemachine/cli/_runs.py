"""``statemachine runs ACTION``: list, show, verify, approve, deny, stop, resume, abort, purge.

``approve`` and ``deny`` only record the person's decision in the store
(``submit_decision``), from any machine; ``stop`` asks the store to stop the run
(``request_stop``). ``resume ID`` leaves the run to the workers (runnable again), or
with ``--agent MODULE[:FUNCTION]`` drives it in this process with the runner that the
worker command's factory (``worker_runner(checkpointer)``) builds. A run a worker held
for a person (its ``reason`` is in ``list`` and ``show``) is resumed either way: the
hold is lifted and its count of failures in a row starts over.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import anyio

from .. import Approve, Checkpointer, Denial, LeaseRecord, RunRecord, RunStatus, dump_decision
from .._approval import waits_for_approval
from ..persist._lifecycle import ENDINGS
from ._options import PROG, Refusal, runner_factory, using_store
from ._render import age, emit_json, record_json, table, when
from ._show import fields, pending, show

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Run the action ``args.action`` on the store the options name; its exit code."""
    code: int = anyio.run(using_store, args, _ACTIONS[args.action])
    return code


def _waits_for_approval(record: RunRecord) -> bool:
    """Whether the run waits at a write call for a person's approval (decided or not)."""
    return (
        record.status == RunStatus.INTERRUPTED
        and record.phase == "AwaitApproval"
        and waits_for_approval(record.waiting_for)
    )


def _waiting_for(record: RunRecord) -> str:
    if record.held:
        return f"a person: {record.reason}"
    if record.status == RunStatus.FAILED_RESUMABLE and record.retry_at is not None:
        return f"a retry at {when(record.retry_at)} (failed {record.failures} times in a row)"
    if record.stop_requested:
        return "stop requested: the worker driving it stops at its next checkpoint"
    if record.decision_pending:
        return "a worker: the decision is recorded"
    return record.waiting_for


async def _list(store: Checkpointer, args: argparse.Namespace) -> int:
    records = await store.registry(status=args.status, agent=args.agent)
    if args.waiting:  # a person's decision is still needed
        records = [r for r in records if _waits_for_approval(r) and not r.decision_pending]
    if args.json:
        emit_json([record_json(record) for record in records])
        return 0
    if not records:
        print("no runs match")
        return 0
    headers = ("RUN", "AGENT", "STATUS", "PHASE", "UPDATED (UTC)", "WAITING FOR")
    rows = (
        (r.run_id, r.agent, r.status.value, r.phase, when(r.updated_at), _waiting_for(r))
        for r in records
    )
    print(table(headers, rows))
    return 0


# --- approve, deny -----------------------------------------------------------------------


async def _waiting_call(store: Checkpointer, run_id: str, verb: str) -> dict[str, Any]:
    """The call run ``run_id`` waits for a person to approve; refuse any other run."""
    record = await store.record(run_id)
    if not _waits_for_approval(record):
        where = f"{record.status.value} at {record.phase}"
        raise Refusal(
            f"run {run_id!r} is not waiting for an approval (it is {where}), so there is "
            f"nothing to {verb}; see {PROG} runs list --waiting"
        )
    _, document = await store.load(run_id)
    call = pending(str(document.get("kind", "")), fields(document))
    if call is None:
        raise Refusal(
            f"run {run_id!r} is registered as waiting for an approval, but its last "
            f"checkpoint is not an approval wait; inspect it with {PROG} runs show {run_id}"
        )
    return call


async def _approve(store: Checkpointer, args: argparse.Namespace) -> int:
    call = await _waiting_call(store, args.run_id, "approve")
    approval = Approve(
        by=args.by,
        at=datetime.now(UTC),
        run_id=args.run_id,
        call_id=call["call_id"],
        tool=call["tool"],
        args_hash=call["args_hash"],
    )
    record = await store.submit_decision(args.run_id, dump_decision(approval))
    return _decided(record, call, dump_decision(approval), args, "approved")


async def _deny(store: Checkpointer, args: argparse.Namespace) -> int:
    if not args.reason.strip():
        raise Refusal("--reason is empty; say why, in words the model can use", code=2)
    call = await _waiting_call(store, args.run_id, "deny")
    denial = Denial(reason=args.reason, denied_by=args.by)
    record = await store.submit_decision(args.run_id, dump_decision(denial))
    return _decided(record, call, dump_decision(denial), args, "denied")


def _decided(
    record: RunRecord,
    call: Mapping[str, Any],
    decision: Mapping[str, Any],
    args: argparse.Namespace,
    verb: str,
) -> int:
    if args.json:
        emit_json({"run": record_json(record), "call": call["call"], "decision": decision})
    else:
        print(
            f"{verb} {call['call']} for run {record.run_id} (by {args.by}); a worker, or "
            f"{PROG} runs resume {record.run_id} --agent MODULE, goes on with it"
        )
    return 0


# --- stop, abort, purge ------------------------------------------------------------------


async def _live_lease(store: Checkpointer, run_id: str) -> LeaseRecord | None:
    """The lease a worker holds on the run right now, if any."""
    now = datetime.now(UTC)
    held = [
        lease
        for lease in await store.leases(run_id)
        if lease.released_at is None and lease.until > now
    ]
    return held[-1] if held else None


async def _stop(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.request_stop(args.run_id)
    if args.json:
        emit_json({"run": record_json(record)})
    elif record.stop_requested:
        print(
            f"stop requested for run {record.run_id}: the worker driving it stops at its next "
            "checkpoint and marks it cancelled"
        )
    else:
        print(
            f"run {record.run_id} is {record.status.value} at {record.phase}; "
            f"{PROG} runs resume {record.run_id} goes on with it"
        )
    return 0


async def _abort(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.record(args.run_id)
    if record.status == RunStatus.RUNNING:
        lease = await _live_lease(store, args.run_id)
        if lease is not None:
            raise Refusal(
                f"run {args.run_id!r} is being driven by {lease.owner} right now; "
                f"stop it first ({PROG} runs stop {args.run_id}), then abort it"
            )
    if record.status != RunStatus.ABORTED:
        record = await store.set_status(args.run_id, RunStatus.ABORTED)
    if args.json:
        emit_json({"run": record_json(record)})
    else:
        print(
            f"run {record.run_id} aborted at {record.phase}; nothing was undone, its record stays"
        )
    return 0


async def _verify(store: Checkpointer, args: argparse.Namespace) -> int:
    check: Callable[[str], Awaitable[int]] | None = getattr(store, "verify", None)
    if check is None:
        raise Refusal(f"this store ({type(store).__name__}) cannot check a run's whole chain")
    seq = await check(args.run_id)  # CheckpointTamperedError names the checkpoint found wrong
    if args.json:
        emit_json({"run_id": args.run_id, "verified": seq + 1})
    else:
        print(f"run {args.run_id}: checkpoints 0-{seq} match the chain's recorded head")
    return 0


async def _purge(store: Checkpointer, args: argparse.Namespace) -> int:
    removed = await store.purge(args.older_than)
    if args.json:
        emit_json({"removed": removed, "older_than_seconds": args.older_than.total_seconds()})
    else:
        print(
            f"removed {removed} completed or aborted run(s) last updated more than "
            f"{age(args.older_than)} ago"
        )
    return 0


# --- resume ------------------------------------------------------------------------------


def _check_resumable(record: RunRecord, *, here: bool) -> None:
    """Refuse a run that no resume may go on with (now, or without a person first)."""
    run_id = record.run_id
    if record.status in ENDINGS:
        raise Refusal(
            f"run {run_id!r} is {record.status.value}, an ending; nothing resumes it "
            "(start a new run instead)"
        )
    if record.status != RunStatus.INTERRUPTED or record.decision_pending:
        return
    if _waits_for_approval(record):
        # A run paused before a money move goes on only with a person's decision.
        raise Refusal(
            f"run {run_id!r} waits for approval of a call; approve or deny it first "
            f"({PROG} runs approve {run_id} --by NAME)"
        )
    if not here and not record.held:
        raise Refusal(
            f"run {run_id!r} waits for a person ({record.waiting_for}); resume it here "
            "with --agent MODULE --note 'who lets it go on, and why'"
        )


async def _mark_runnable(store: Checkpointer, record: RunRecord) -> tuple[RunRecord, str]:
    """Leave the run to the workers: (its row, what happens next)."""
    _check_resumable(record, here=False)
    if record.held:
        reason = record.reason
        record = await store.set_status(record.run_id, RunStatus.RUNNING)
        return record, f"its hold ({reason}) is lifted: the next free worker picks it up"
    if record.status == RunStatus.RUNNING:
        lease = await _live_lease(store, record.run_id)
        if lease is not None:
            return record, f"it is running now, driven by {lease.owner}"
        return record, "it is already runnable: the next free worker picks it up"
    if record.status == RunStatus.INTERRUPTED:
        return record, "its decision is recorded: the next free worker goes on with it"
    if record.status == RunStatus.FAILED_RESUMABLE and record.failures:
        # A person's resume starts the count of failures in a row over: a retry by a
        # worker keeps it, and leaving a hold clears it, so hold it first.
        await store.hold(record.run_id, "resumed by a person")
    record = await store.set_status(record.run_id, RunStatus.RUNNING)
    return record, "it is runnable: the next free worker picks it up"


async def _resume(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.record(args.run_id)
    if args.agent is None:
        record, next_ = await _mark_runnable(store, record)
        if args.json:
            emit_json({"run": record_json(record), "resumed_here": False})
        else:
            print(f"run {record.run_id}: {next_}")
        return 0
    _check_resumable(record, here=True)
    runner = runner_factory(args.agent)(store)
    if runner.agent.name != record.agent:
        raise Refusal(
            f"run {record.run_id!r} is a run of agent {record.agent!r}, and "
            f"{args.agent} builds a runner of {runner.agent.name!r}; name that agent's module"
        )
    result = await runner.resume(record.run_id, note=args.note)
    record = await store.record(record.run_id)
    if args.json:
        emit_json(
            {
                "run": record_json(record),
                "resumed_here": True,
                "result": result.status,
                "history": list(result.history),
            }
        )
    else:
        print(f"run {record.run_id}: {result.status}, {record.status.value} at {record.phase}")
        print(f"  {result.trace()}")
    return 0


_Action = Callable[[Checkpointer, argparse.Namespace], Awaitable[int]]
_ACTIONS: Final[dict[str, _Action]] = {
    "list": _list,
    "show": show,
    "verify": _verify,
    "approve": _approve,
    "deny": _deny,
    "resume": _resume,
    "stop": _stop,
    "abort": _abort,
    "purge": _purge,
}
