"""The registry's retry state: failures in a row, the backoff, and runs held for a person.

Each store (memory, SQLite, PostgreSQL) counts a run's failures in a row, keeps a failed
run from every worker until its ``retry_at``, holds a run for a person once with its
reason (``hold``) so that ``claim_next`` never takes it, and lifts the hold when a person
resumes it; files and databases written before these columns open with their defaults.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import Cluster

from statemachine import (
    Checkpointer,
    IllegalStatusChangeError,
    MemoryCheckpointer,
    PostgresCheckpointer,
    RunStatus,
    SQLiteCheckpointer,
)
from statemachine.persist._lifecycle import RETRY_LONGEST, retry_delay

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(minutes=1)
WAITING = "approval of refund R1 ($10.00)"
LEGACY = Path(__file__).parent / "data" / "legacy-runs.db"


class Clock:
    """A wall clock that moves only when the test advances it."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


Factory = Callable[[Clock], Checkpointer]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """A store of each kind, on a clock of the test's."""
    opened: list[Any] = []

    def make(clock: Clock) -> Checkpointer:
        store: Checkpointer
        if request.param == "memory":
            store = MemoryCheckpointer(clock=clock)
        elif request.param == "sqlite":
            store = SQLiteCheckpointer(tmp_path / "runs.sqlite3", clock=clock)
        else:
            cluster: Cluster = request.getfixturevalue("pg_cluster")
            store = PostgresCheckpointer(cluster.fresh_dsn(), clock=clock)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if hasattr(store, "aclose"):
            await store.aclose()


def doc(seq: int) -> dict[str, Any]:
    return {"kind": "Planning", "step": seq}


async def new_run(store: Checkpointer, run_id: str, *, approval: bool = False) -> None:
    await store.save(run_id, 0, doc(0), agent="support", status="running", phase="Idle")
    if approval:
        await store.save(
            run_id,
            1,
            doc(1),
            agent="support",
            status="interrupted",
            phase="AwaitApproval",
            waiting_for=WAITING,
        )


def approval_doc(run_id: str) -> dict[str, Any]:
    return {
        "kind": "approval",
        "call_id": "c1",
        "tool": "refund",
        "args_hash": "h",
        "approved_by": "ana",
        "approved_at": START.isoformat(),
        "run_id": run_id,
    }


async def fail_again(store: Checkpointer, run_id: str) -> None:
    """A worker's retry that fails before the run gets further: running, then failed."""
    await store.set_status(run_id, "running")
    await store.set_status(run_id, "failed_resumable")


def test_the_backoff_doubles_from_one_second_after_a_retry_at_once() -> None:
    """0 after the first failure, then 1s, 2s, 4s ... and never more than 5 minutes."""
    assert [retry_delay(n).total_seconds() for n in range(1, 7)] == [0, 1, 2, 4, 8, 16]
    assert retry_delay(10**6) == RETRY_LONGEST == timedelta(minutes=5)


async def test_failures_in_a_row_are_counted_and_delay_the_next_retry(make_store: Factory) -> None:
    """Each failure without progress counts; a failed run waits for its retry_at."""
    clock = Clock()
    store = make_store(clock)
    await new_run(store, "r1")
    first = await store.set_status("r1", "failed_resumable")
    assert (first.failures, first.retry_at, first.reason) == (1, START, "")
    taken = await store.claim_next("w1", lease=LEASE)
    assert taken is not None
    assert taken.run_id == "r1"
    await store.release("r1", "w1")
    await store.set_status("r1", "running")
    assert (await store.record("r1")).failures == 1  # a worker's retry keeps the count
    await store.set_status("r1", "failed_resumable")
    second = await store.record("r1")
    assert (second.failures, second.retry_at) == (2, START + timedelta(seconds=1))
    assert await store.claim_next("w1", lease=LEASE) is None
    clock.advance(seconds=1)
    taken = await store.claim_next("w1", lease=LEASE)
    assert taken is not None
    assert taken.failures == 2
    await store.release("r1", "w1")
    await fail_again(store, "r1")
    third = await store.record("r1")
    assert (third.failures, third.retry_at) == (3, clock.now + timedelta(seconds=2))
    assert [r.run_id for r in await store.needing_attention()] == ["r1"]


async def test_a_checkpoint_saved_starts_the_count_over(make_store: Factory) -> None:
    """A run that gets further (a new checkpoint) has no failures in a row any more."""
    clock = Clock()
    store = make_store(clock)
    await new_run(store, "r1")
    await store.set_status("r1", "failed_resumable")
    await fail_again(store, "r1")
    await store.set_status("r1", "running")
    saved = await store.save("r1", 1, doc(1), agent="support", status="running", phase="Tool")
    assert (saved.failures, saved.retry_at, saved.reason) == (0, None, "")
    assert await store.record("r1") == saved
    failed = await store.set_status("r1", "failed_resumable")
    assert (failed.failures, failed.retry_at) == (1, clock.now)


async def test_a_held_run_waits_for_a_person_and_no_worker_takes_it(make_store: Factory) -> None:
    """hold: running -> interrupted, once, with its reason; claim_next passes it by."""
    clock = Clock()
    store = make_store(clock)
    await new_run(store, "r1")
    clock.advance(seconds=5)
    held = await store.hold("r1", "its checkpoint cannot be loaded: CheckpointCorruptError")
    assert (held.status, held.waiting_for, held.reason, held.held) == (
        RunStatus.INTERRUPTED,
        "a person",
        "its checkpoint cannot be loaded: CheckpointCorruptError",
        True,
    )
    assert held.updated_at == clock.now
    assert await store.record("r1") == held
    assert await store.claim_next("w1", lease=LEASE) is None
    assert [r.run_id for r in await store.needing_attention()] == ["r1"]
    clock.advance(seconds=5)
    again = await store.hold("r1", "another reason")
    assert again == held  # once: the first reason stays, nothing changes


async def test_a_person_resuming_a_held_run_lifts_the_hold(make_store: Factory) -> None:
    """set_status(running) of a held run clears the reason and the count: workers take it."""
    store = make_store(Clock())
    await new_run(store, "r1")
    await store.set_status("r1", "failed_resumable")
    await fail_again(store, "r1")
    held = await store.hold("r1", "failed 2 times in a row")
    assert (held.status, held.failures, held.retry_at) == (RunStatus.FAILED_RESUMABLE, 2, None)
    assert await store.claim_next("w1", lease=LEASE) is None
    resumed = await store.set_status("r1", "running")
    assert (resumed.reason, resumed.failures, resumed.retry_at) == ("", 0, None)
    taken = await store.claim_next("w1", lease=LEASE)
    assert taken is not None
    assert taken.run_id == "r1"


async def test_a_held_approval_keeps_its_decision_but_is_not_taken(make_store: Factory) -> None:
    """An approved run that cannot be loaded is held with its decision; resumed, it goes on."""
    store = make_store(Clock())
    await new_run(store, "r1", approval=True)
    await store.submit_decision("r1", approval_doc("r1"))
    held = await store.hold("r1", "no runner can load it")
    assert (held.status, held.waiting_for, held.decision_pending) == (
        RunStatus.INTERRUPTED,
        WAITING,
        True,
    )
    assert await store.claim_next("w1", lease=LEASE) is None
    resumed = await store.set_status("r1", "running")
    assert (resumed.reason, resumed.decision_pending) == ("", True)
    assert await store.decision("r1") is not None
    taken = await store.claim_next("w1", lease=LEASE)
    assert taken is not None
    assert taken.run_id == "r1"


async def test_a_hold_leaves_stopped_runs_and_refuses_ended_ones(make_store: Factory) -> None:
    """A cancelled run is returned as it is; an ended one cannot wait for anyone."""
    store = make_store(Clock())
    await new_run(store, "stopped")
    cancelled = await store.set_status("stopped", "cancelled")
    assert await store.hold("stopped", "cannot be loaded") == cancelled
    await new_run(store, "done")
    await store.set_status("done", "completed")
    with pytest.raises(IllegalStatusChangeError):
        await store.hold("done", "cannot be loaded")
    assert (await store.record("done")).status is RunStatus.COMPLETED
    await new_run(store, "blank")
    assert (await store.hold("blank", " \n ")).reason == "no reason given"
    await new_run(store, "lines")
    assert (await store.hold("lines", "cannot\n  be loaded ")).reason == "cannot be loaded"


async def test_stopping_or_aborting_a_held_run_clears_its_reason(make_store: Factory) -> None:
    """Every change of status but a worker's retry ends the hold and the count."""
    store = make_store(Clock())
    await new_run(store, "r1")
    await store.hold("r1", "cannot be loaded")
    stopped = await store.request_stop("r1")
    assert (stopped.status, stopped.reason, stopped.failures) == (RunStatus.CANCELLED, "", 0)


async def test_a_sqlite_file_written_before_the_retry_state_opens_with_defaults(
    tmp_path: Path,
) -> None:
    """tests/data/legacy-runs.db has no reason, failures or retry_at: they are added."""
    path = tmp_path / "legacy.db"
    shutil.copyfile(LEGACY, path)
    async with SQLiteCheckpointer(path) as store:
        records = await store.registry()
        assert records
        assert {(r.reason, r.failures, r.retry_at) for r in records} == {("", 0, None)}
        run_id = records[0].run_id
        if records[0].status is RunStatus.RUNNING:
            failed = await store.set_status(run_id, "failed_resumable")
            assert failed.failures == 1
    with closing(sqlite3.connect(path)) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    assert {"reason", "failures", "retry_at"} <= columns


async def test_a_postgres_database_made_before_the_retry_state_is_upgraded(
    pg_cluster: Cluster,
) -> None:
    """The three columns dropped (as an older release made the table) come back, defaulted."""
    dsn = pg_cluster.fresh_dsn()
    async with PostgresCheckpointer(dsn) as store:
        await new_run(store, "r1")
        pool = await store._opened()
        async with pool.connection() as connection:
            await connection.execute(
                "ALTER TABLE statemachine_runs DROP COLUMN reason, DROP COLUMN failures, "
                "DROP COLUMN retry_at"
            )
    async with PostgresCheckpointer(dsn) as store:
        record = await store.record("r1")
        assert (record.reason, record.failures, record.retry_at) == ("", 0, None)
        held = await store.hold("r1", "cannot be loaded")
        assert held == await store.record("r1")
