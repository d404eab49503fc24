"""Leases, decisions and stop requests in the store: what many workers on one store rely on.

Every test takes the ``store`` fixture, so it runs against each backend conftest
lists (memory, SQLite, encrypted SQLite, and any added there).
"""

from __future__ import annotations

import itertools
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from support import exactly

from statemachine import (
    Approve,
    Checkpointer,
    DecisionRefusedError,
    Denial,
    IllegalStatusChangeError,
    LeaseRecord,
    RunStatus,
    SQLiteCheckpointer,
    UnknownRunError,
    dump_decision,
    load_decision,
)

pytestmark = pytest.mark.anyio

LEASE = timedelta(minutes=5)
BLINK = timedelta(milliseconds=1)  # a lease that has lapsed by the next call
WAITING = "approval of refund order 1001 ($137.32)"
APPROVAL = Approve(
    by="lin@refunds.example",
    at=datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
    run_id="r1",
    call_id="call-3",
    tool="refund",
    args_hash="ab" * 32,
)


def approval_doc(run_id: str) -> dict[str, Any]:
    """A person's approval of the refund run ``run_id`` waits for, as the store takes it."""
    return dump_decision(APPROVAL.model_copy(update={"run_id": run_id}))


def doc(n: int) -> dict[str, Any]:
    return {"step": n, "transcript": list(range(n))}


async def new_run(
    store: Checkpointer, run_id: str, status: str = "running", *, agent: str = "support"
) -> None:
    """A run saved at checkpoint 0 and moved to ``status`` (an approval wait for interrupted)."""
    await store.save(run_id, 0, doc(0), agent=agent, status="running", phase="Idle")
    if status == "interrupted":
        await store.save(
            run_id,
            1,
            doc(1),
            agent=agent,
            status="interrupted",
            phase="AwaitApproval",
            waiting_for=WAITING,
        )
    elif status != "running":
        await store.set_status(run_id, status)


async def drain(store: Checkpointer, owner: str, **kwargs: Any) -> list[str]:
    """Every run ``owner`` can claim, one after the other, holding each."""
    taken: list[str] = []
    while (record := await store.claim_next(owner, lease=LEASE, **kwargs)) is not None:
        taken.append(record.run_id)
    return taken


def assert_no_overlap(leases: list[LeaseRecord]) -> None:
    """No two leases of one run were held at the same time."""
    by_run: dict[str, list[LeaseRecord]] = {}
    for lease in leases:
        by_run.setdefault(lease.run_id, []).append(lease)
    for run_leases in by_run.values():
        ordered = sorted(run_leases, key=lambda lease: lease.claimed_at)
        for before, after in itertools.pairwise(ordered):
            assert after.claimed_at >= before.ended_at, (before, after)


# --- decisions --------------------------------------------------------------------------


def test_a_decision_document_round_trips() -> None:
    """dump_decision writes plain JSON; load_decision gives the same Approval or Denial back."""
    assert dump_decision(APPROVAL) == {
        "kind": "approval",
        "run_id": "r1",
        "call_id": "call-3",
        "tool": "refund",
        "args_hash": "ab" * 32,
        "approved_by": "lin@refunds.example",
        "approved_at": "2026-11-30T08:00:00+00:00",
        "note": "",
    }
    assert load_decision(dump_decision(APPROVAL)) == APPROVAL
    denial = Denial(reason="over the limit", denied_by="lin")
    assert dump_decision(denial) == {
        "kind": "denial",
        "reason": "over the limit",
        "denied_by": "lin",
    }
    assert load_decision(dump_decision(denial)) == denial


def test_a_malformed_decision_document_is_refused_saying_what_is_wrong() -> None:
    """A document of another kind, or missing a field, raises DecisionRefusedError."""
    with pytest.raises(
        DecisionRefusedError,
        match=exactly(
            "decision for run 'r1' refused: its kind is 'maybe'; a decision's kind is "
            "'approval' or 'denial' (write it with dump_decision())"
        ),
    ):
        load_decision({"kind": "maybe"}, run_id="r1")
    with pytest.raises(
        DecisionRefusedError,
        match=exactly(
            "decision refused: it is not a valid denial (reason: Field required); "
            "write it with dump_decision()"
        ),
    ):
        load_decision({"kind": "denial"})


async def test_a_decision_is_stored_for_a_run_waiting_for_an_approval(store: Checkpointer) -> None:
    """The run stays interrupted, shows the decision pending, and gives it back until taken."""
    await new_run(store, "r1", "interrupted")
    record = await store.submit_decision("r1", dump_decision(APPROVAL))
    assert (record.status, record.decision_pending) == (RunStatus.INTERRUPTED, True)
    assert await store.record("r1") == record
    assert await store.decision("r1") == dump_decision(APPROVAL)
    assert await store.decision("r1") == dump_decision(APPROVAL)  # a peek leaves it
    assert await store.take_decision("r1") == dump_decision(APPROVAL)
    assert await store.take_decision("r1") is None
    assert not (await store.record("r1")).decision_pending


async def test_a_decision_is_refused_unless_the_run_waits_for_an_approval(
    store: Checkpointer,
) -> None:
    """Unknown, running, paused-for-another-reason, cancelled runs, and a second decision."""
    with pytest.raises(UnknownRunError):
        await store.submit_decision("nobody", approval_doc("nobody"))
    await new_run(store, "running")
    with pytest.raises(
        DecisionRefusedError,
        match=exactly(
            "decision for run 'running' refused: it is not waiting for an approval (it is "
            "running at Idle). Approve or deny only a run that is interrupted waiting for an "
            "approval; list those with the registry (status interrupted)."
        ),
    ):
        await store.submit_decision("running", approval_doc("running"))
    await store.save("paused", 0, doc(0), agent="support", status="running", phase="Planning")
    await store.save(
        "paused",
        1,
        doc(1),
        agent="support",
        status="interrupted",
        phase="Planning",
        waiting_for="a person: the refund tool keeps failing",
    )
    with pytest.raises(DecisionRefusedError, match="it is interrupted at Planning, waiting for a"):
        await store.submit_decision("paused", approval_doc("paused"))
    await new_run(store, "waits", "interrupted")
    approval = approval_doc("waits")
    await store.submit_decision("waits", approval)
    with pytest.raises(
        DecisionRefusedError,
        match=exactly(
            "decision for run 'waits' refused: it already has a decision waiting for a worker "
            "to resume it with; nothing was changed. One decision per approval: wait for the "
            "run to go on, or stop it."
        ),
    ):
        await store.submit_decision("waits", dump_decision(Denial(reason="no")))
    assert await store.decision("waits") == approval
    with pytest.raises(DecisionRefusedError, match="its kind is None"):
        await store.submit_decision("paused", {"tool": "refund"})
    assert [r.decision_pending for r in await store.registry()] == [False, False, True]


async def test_an_approval_of_another_run_is_never_stored(store: Checkpointer) -> None:
    """A yes names the run and the call it answers: run A's approval is refused for run B."""
    await new_run(store, "b", "interrupted")
    with pytest.raises(
        DecisionRefusedError,
        match=exactly(
            "decision for run 'b' refused: the approval is for run 'a'; an approval answers "
            "one request of one run (make it with Approve.of(request, by=...) for this run's "
            "request)"
        ),
    ):
        await store.submit_decision("b", approval_doc("a"))
    unbound = {key: value for key, value in approval_doc("b").items() if key != "call_id"}
    with pytest.raises(DecisionRefusedError, match="names no call id"):
        await store.submit_decision("b", unbound)
    with pytest.raises(DecisionRefusedError, match="must name the request it answers"):
        dump_decision(Approve(by="lin"))
    assert not (await store.record("b")).decision_pending


async def test_the_next_checkpoint_or_a_stop_clears_a_pending_decision(store: Checkpointer) -> None:
    """The phase that used the decision saves the next checkpoint; a stop drops it."""
    await new_run(store, "used", "interrupted")
    await store.submit_decision("used", approval_doc("used"))
    await store.set_status("used", "running")  # a worker resumed it: still pending
    assert await store.decision("used") == approval_doc("used")
    saved = await store.save("used", 2, doc(2), agent="support", status="running", phase="Tool")
    assert not saved.decision_pending
    assert await store.decision("used") is None
    await new_run(store, "stopped", "interrupted")
    await store.submit_decision("stopped", approval_doc("stopped"))
    assert (await store.request_stop("stopped")).status is RunStatus.CANCELLED
    assert await store.decision("stopped") is None
    assert not (await store.record("stopped")).decision_pending


# --- claim_next -----------------------------------------------------------------------------


async def test_claim_next_takes_only_runnable_runs_oldest_first(store: Checkpointer) -> None:
    """Running, failed_resumable, and approved runs are taken; waiting and ended ones never."""
    for run_id, status in [
        ("a-running", "running"),
        ("b-waiting", "interrupted"),
        ("c-failed", "failed_resumable"),
        ("d-cancelled", "cancelled"),
        ("e-completed", "completed"),
        ("f-aborted", "aborted"),
        ("g-approved", "interrupted"),
    ]:
        await new_run(store, run_id, status)
    await store.submit_decision("g-approved", approval_doc("g-approved"))
    taken = await drain(store, "w1")
    assert taken == ["a-running", "c-failed", "g-approved"]
    assert await store.claim_next("w2", lease=LEASE) is None  # all held by w1


async def test_claim_next_returns_the_row_and_holds_the_run(store: Checkpointer) -> None:
    """The row comes back as it is; nobody else gets the run while the lease is live."""
    await new_run(store, "r1")
    record = await store.claim_next("w1", lease=LEASE)
    assert record == await store.record("r1")
    assert not await store.claim("r1", "w2")
    assert await store.claim_next("w2", lease=LEASE) is None
    await store.release("r1", "w1")
    assert (got := await store.claim_next("w2", lease=LEASE)) is not None
    assert got.run_id == "r1"


async def test_claim_next_takes_only_the_agents_named(store: Checkpointer) -> None:
    """A worker that runs only some agents never takes another agent's run."""
    await new_run(store, "s1", agent="support")
    await new_run(store, "t1", agent="travel")
    await new_run(store, "s2", agent="support")
    assert await drain(store, "w1", agents=["travel"]) == ["t1"]
    assert await drain(store, "w1", agents=[]) == []
    assert await drain(store, "w2", agents={"support", "research"}) == ["s1", "s2"]


async def test_many_concurrent_claimers_get_each_run_exactly_once(store: Checkpointer) -> None:
    """Eight workers draining twenty runs at once: every run is taken by exactly one."""
    runs = [f"run-{n:02d}" for n in range(20)]
    for run_id in runs:
        await new_run(store, run_id)
    taken: dict[str, list[str]] = {}

    async def worker(owner: str) -> None:
        while (record := await store.claim_next(owner, lease=LEASE)) is not None:
            taken.setdefault(record.run_id, []).append(owner)
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        for n in range(8):
            group.start_soon(worker, f"w{n}")
    assert sorted(taken) == runs
    assert all(len(owners) == 1 for owners in taken.values())
    leases = await store.leases()
    assert sorted(lease.run_id for lease in leases) == runs
    assert [taken[lease.run_id] for lease in leases] == [[lease.owner] for lease in leases]


async def test_a_dead_workers_lease_lapses_and_another_worker_takes_the_run(
    store: Checkpointer,
) -> None:
    """The first holder cannot renew a lapsed lease; the history shows two leases, no overlap."""
    await new_run(store, "r1")
    assert (await store.claim_next("dead", lease=BLINK)) is not None
    await anyio.sleep(0.02)
    taken = await store.claim_next("alive", lease=LEASE)
    assert taken is not None
    assert taken.run_id == "r1"
    assert not await store.renew("r1", "dead", lease=LEASE)
    assert await store.renew("r1", "alive", lease=LEASE)
    await store.release("r1", "dead")  # not its lease any more: nothing happens
    assert not await store.claim("r1", "third")
    leases = await store.leases("r1")
    assert [(lease.owner, lease.released_at is None) for lease in leases] == [
        ("dead", True),
        ("alive", True),
    ]
    assert_no_overlap(leases)


async def test_renew_moves_the_lease_and_release_closes_it(store: Checkpointer) -> None:
    """The history row's ``until`` follows renewals; release stamps ``released_at``."""
    await new_run(store, "r1")
    await store.claim_next("w1", lease=timedelta(seconds=30))
    [first] = await store.leases("r1")
    assert await store.renew("r1", "w1", lease=timedelta(hours=1))
    [renewed] = await store.leases("r1")
    assert renewed.claimed_at == first.claimed_at
    assert renewed.until - first.until > timedelta(minutes=55)
    assert renewed.released_at is None
    await store.release("r1", "w1")
    [released] = await store.leases("r1")
    assert released.released_at is not None
    assert released.ended_at == released.released_at
    assert not await store.renew("r1", "w1", lease=LEASE)
    assert await store.claim("r1", "w2")
    assert [lease.owner for lease in await store.leases("r1")] == ["w1", "w2"]
    assert [lease.run_id for lease in await store.leases()] == ["r1", "r1"]
    assert_no_overlap(await store.leases())


async def test_claim_and_release_write_the_lease_history_too(store: Checkpointer) -> None:
    """A claim opens a lease (a claim again by the same owner extends it); release closes it."""
    assert await store.claim("r1", "w1", lease=timedelta(seconds=10))
    assert await store.claim("r1", "w1", lease=timedelta(hours=1))
    [lease] = await store.leases("r1")
    assert lease.until - lease.claimed_at > timedelta(minutes=55)
    await store.release("r1", "w1")
    assert [lease.released_at is not None for lease in await store.leases("r1")] == [True]


async def test_claim_next_refuses_a_lease_that_is_not_positive(store: Checkpointer) -> None:
    """A zero lease would hand the run to the next worker at once."""
    with pytest.raises(ValueError, match="lease must be a positive duration"):
        await store.claim_next("w1", lease=timedelta(0))


async def test_an_approved_run_is_claimable_only_after_the_decision(store: Checkpointer) -> None:
    """A run waiting for a person is never claimed; the decision makes it claimable."""
    await new_run(store, "r1", "interrupted")
    assert await store.claim_next("w1", lease=LEASE) is None
    await store.submit_decision("r1", dump_decision(Denial(reason="no", denied_by="lin")))
    record = await store.claim_next("w1", lease=LEASE)
    assert record is not None
    assert (record.run_id, record.status, record.decision_pending) == (
        "r1",
        RunStatus.INTERRUPTED,
        True,
    )


# --- stop requests --------------------------------------------------------------------------


async def test_a_stop_request_on_a_driven_run_is_a_flag_its_next_save_returns(
    store: Checkpointer,
) -> None:
    """The worker's next save sees stop_requested; cancelling the run clears it."""
    await new_run(store, "r1")
    await store.claim_next("w1", lease=LEASE)
    record = await store.request_stop("r1")
    assert (record.status, record.stop_requested) == (RunStatus.RUNNING, True)
    saved = await store.save("r1", 1, doc(1), agent="support", status="running", phase="Plan")
    assert saved.stop_requested
    waiting = await store.save(
        "r1", 2, doc(2), agent="support", status="interrupted", phase="AwaitApproval"
    )
    assert waiting.stop_requested  # kept until the run is stopped
    cancelled = await store.set_status("r1", "cancelled")
    assert not cancelled.stop_requested
    resumed = await store.set_status("r1", "running")
    assert not resumed.stop_requested


async def test_a_stop_request_on_a_run_nobody_drives_cancels_it(store: Checkpointer) -> None:
    """Running with no lease, interrupted, failed_resumable: cancelled at once."""
    for run_id, status in [
        ("free", "running"),
        ("waits", "interrupted"),
        ("failed", "failed_resumable"),
    ]:
        await new_run(store, run_id, status)
        record = await store.request_stop(run_id)
        assert (record.status, record.stop_requested) == (RunStatus.CANCELLED, False)
    again = await store.request_stop("free")
    assert again == await store.record("free")  # a cancelled run stays as it is
    assert await store.claim_next("w1", lease=LEASE) is None


async def test_a_stop_request_on_an_ended_or_unknown_run_is_refused(store: Checkpointer) -> None:
    """A completed run cannot be stopped; an unknown run id says so."""
    await new_run(store, "done", "completed")
    with pytest.raises(IllegalStatusChangeError, match="cannot go from completed to cancelled"):
        await store.request_stop("done")
    with pytest.raises(UnknownRunError):
        await store.request_stop("nobody")


async def test_a_save_after_a_stop_keeps_the_run_cancelled_unless_it_completes(
    store: Checkpointer,
) -> None:
    """A runner that held no lease saves the phase it finished; the run stays stopped there."""
    await new_run(store, "r1")
    await store.request_stop("r1")
    saved = await store.save(
        "r1",
        1,
        doc(1),
        agent="support",
        status="interrupted",
        phase="AwaitApproval",
        waiting_for=WAITING,
    )
    assert (saved.status, saved.phase, saved.waiting_for) == (
        RunStatus.CANCELLED,
        "AwaitApproval",
        "",
    )
    assert await store.load("r1") == (1, doc(1))
    await new_run(store, "r2")
    await store.request_stop("r2")
    done = await store.save("r2", 1, doc(1), agent="support", status="completed", phase="Done")
    assert done.status is RunStatus.COMPLETED


async def test_claim_next_cancels_a_stopped_run_whose_worker_died(store: Checkpointer) -> None:
    """A stop request outlives its worker: the run is cancelled, never taken again."""
    await new_run(store, "stopped")
    await new_run(store, "other")
    await store.claim_next("dead", lease=BLINK)
    await store.request_stop("stopped")
    await anyio.sleep(0.02)
    assert await drain(store, "w2") == ["other"]
    record = await store.record("stopped")
    assert (record.status, record.stop_requested) == (RunStatus.CANCELLED, False)


async def test_each_checkpoint_records_when_it_was_saved(store: Checkpointer) -> None:
    """history() gives each checkpoint's time, in order, in UTC."""
    before = datetime.now(UTC)
    await new_run(store, "r1", "interrupted")
    after = datetime.now(UTC)
    times = [entry.at for entry in await store.history("r1")]
    assert len(times) == 2
    assert all(before <= moment <= after for moment in times)
    assert times == sorted(times)
    assert all(moment.utcoffset() == timedelta(0) for moment in times)


OLD_SCHEMA = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, status TEXT NOT NULL,
    phase TEXT NOT NULL, waiting_for TEXT NOT NULL, updated_at TEXT NOT NULL,
    seq INTEGER NOT NULL);
CREATE TABLE checkpoints (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    phase TEXT NOT NULL, blob BLOB NOT NULL, PRIMARY KEY (run_id, seq));
"""


async def test_a_sqlite_file_from_before_leases_is_upgraded_in_place(tmp_path: Path) -> None:
    """Its runs load, their old checkpoints get the epoch as their time, and workers claim them."""
    path = tmp_path / "old.sqlite3"
    async with SQLiteCheckpointer(path) as writer:
        await writer.save("r1", 0, doc(0), agent="support", status="running", phase="Idle")
    with sqlite3.connect(path) as old:
        [(blob,)] = old.execute("SELECT blob FROM checkpoints WHERE head IS NULL").fetchall()
        old.executescript(  # as a file of then: no view, format 0
            "DROP VIEW next_checkpoint; DROP TABLE runs; DROP TABLE checkpoints; "
            "DROP TABLE leases; PRAGMA user_version = 0;" + OLD_SCHEMA
        )
        old.execute(
            "INSERT INTO runs VALUES ('r1', 'support', 'running', 'Idle', '', ?, 0)",
            ("2026-01-01T00:00:00.000000+00:00",),
        )
        old.execute("INSERT INTO checkpoints VALUES ('r1', 0, 'full', 'Idle', ?)", (blob,))
    old.close()
    async with SQLiteCheckpointer(path) as store:
        assert await store.load("r1") == (0, doc(0))
        [entry] = await store.history("r1")
        assert entry.at == datetime(1970, 1, 1, tzinfo=UTC)
        record = await store.claim_next("w1", lease=LEASE)
        assert record is not None
        assert (record.run_id, record.stop_requested, record.decision_pending) == (
            "r1",
            False,
            False,
        )
        assert [lease.owner for lease in await store.leases()] == ["w1"]
