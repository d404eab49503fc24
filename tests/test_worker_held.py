"""Workers never spin: a run they cannot go on with is held for a person, once.

A run whose checkpoint cannot be loaded is held at once (its reason in the registry,
one log line) and never taken again; a run whose phase keeps raising is retried with
the store's backoff and held after ``max_failures`` failures in a row; a worker told to
exit when idle exits when only such runs are left, in a real process within a bound;
and a person's ``runs resume`` lifts the hold.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agents.support import PaymentsService, SupportContext, worker_runner
from agents.travel import FakeProvider, TripContext, travel_agent
from statemachine import (
    Checkpointer,
    MemoryCheckpointer,
    Runner,
    RunStatus,
    SQLiteCheckpointer,
    dump_phase,
)
from statemachine._worker import Worker
from statemachine.testing import ScriptedGate, ScriptedModel

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).parent
ROOT = TESTS.parent
ADA = SupportContext(customer_id="C-17")
QUESTION = "Where is my order 2001?"
FAST = timedelta(milliseconds=10)


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[PaymentsService]:
    """The support agent's payments service, in a file of the test's own."""
    with PaymentsService(tmp_path / "payments.sqlite3") as service:
        yield service


async def garbled(store: Checkpointer) -> None:
    """A run whose checkpoint is no phase document at all."""
    document: dict[str, Any] = {"kind": "NoSuchPhase", "fields": {}}
    await store.save("garbled", 0, document, agent="support", status="running", phase="Idle")


async def foreign(store: Checkpointer) -> None:
    """A run registered as the support agent's whose checkpoint is the travel agent's."""
    travel = Runner(travel_agent(FakeProvider()), model=ScriptedModel([]), gate=ScriptedGate([]))
    document = dump_phase(travel.agent.start(TripContext("Ada", "Lisbon"), "hi"))
    await store.save("foreign", 0, document, agent="support", status="running", phase="Idle")


def held_events(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in logs if event["event"] == "run held for a person"]


async def test_a_run_that_cannot_be_loaded_is_held_once_and_never_taken_again(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """Held with its reason, logged once, listed as needing attention; the rest goes on."""
    runner = worker_runner(store, payments=payments)
    await garbled(store)
    await foreign(store)
    await runner.submit(ADA, QUESTION, run_id="fine")
    with capture_logs() as logs:
        outcomes = await Worker(store, [runner], owner="w1", exit_when_idle=True).run()
    assert dict(outcomes) == {"held": 2, "done": 1}
    records = {r.run_id: r for r in await store.needing_attention()}
    assert sorted(records) == ["foreign", "garbled"]
    for record in records.values():
        assert (record.status, record.waiting_for, record.held) == (
            RunStatus.INTERRUPTED,
            "a person",
            True,
        )
    assert records["garbled"].reason.startswith(
        "a worker cannot go on with it: CheckpointCorruptError: checkpoint of run 'garbled': "
    )
    assert records["foreign"].reason == (
        "a worker cannot go on with it: CheckpointMismatchError: checkpoint of run 'foreign': "
        "the checkpoint is of agent 'travel', which was not given (agents given: 'support'); "
        "pass that agent in agents= to resume it"
    )
    events = held_events(logs)
    assert sorted((event["run_id"], event["reason"]) for event in events) == [
        (run_id, records[run_id].reason) for run_id in ("foreign", "garbled")
    ]
    again = Worker(store, [runner], owner="w2", exit_when_idle=True)
    assert dict(await again.run()) == {}
    for run_id in records:  # each taken once
        assert [lease.owner for lease in await store.leases(run_id)] == ["w1"]


async def test_a_run_failing_again_and_again_is_held_after_max_failures(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """Each failure in a row counts; at the cap the worker holds the run, with the error."""
    runner = worker_runner(store, payments=payments, model=ScriptedModel([]))
    await runner.submit(ADA, QUESTION, run_id="broken")
    worker = Worker(store, [runner], exit_when_idle=True, max_failures=2, poll=FAST)
    with capture_logs() as logs:
        assert dict(await worker.run()) == {"error": 2}
    record = await store.record("broken")
    assert (record.status, record.failures, record.retry_at) == (
        RunStatus.FAILED_RESUMABLE,
        2,
        None,
    )
    assert record.reason.startswith(
        "failed 2 times in a row, the last time with ScriptExhaustedError: "
    )
    assert record.reason.endswith(" (this worker retries 2)")
    assert len(held_events(logs)) == 1
    assert len(await store.leases("broken")) == 2
    assert dict(await Worker(store, [runner], exit_when_idle=True).run()) == {}


async def test_a_failed_run_waits_for_its_retry_time_and_an_idle_worker_exits(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """The first retry is at once, the next after 1s: exit_when_idle does not wait for it."""
    runner = worker_runner(store, payments=payments, model=ScriptedModel([]))
    await runner.submit(ADA, QUESTION, run_id="broken")
    worker = Worker(store, [runner], exit_when_idle=True, poll=FAST)
    assert dict(await worker.run()) == {"error": 2}
    record = await store.record("broken")
    assert (record.status, record.failures, record.held) == (
        RunStatus.FAILED_RESUMABLE,
        2,
        False,
    )
    assert record.retry_at is not None
    assert record.retry_at > datetime.now(UTC)
    assert await store.claim_next("w9", lease=timedelta(minutes=1)) is None


async def test_a_run_counted_to_the_cap_elsewhere_is_held_without_a_resume(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """A worker with a lower cap holds a run at it on claim, and does not drive it again."""
    runner = worker_runner(store, payments=payments, model=ScriptedModel([]))
    await runner.submit(ADA, QUESTION, run_id="broken")
    await store.set_status("broken", "failed_resumable")
    seq = (await store.record("broken")).seq
    assert dict(await Worker(store, [runner], exit_when_idle=True, max_failures=1).run()) == {
        "held": 1
    }
    record = await store.record("broken")
    assert (record.seq, record.reason) == (
        seq,
        "failed 1 time in a row (this worker retries 1)",
    )


def test_max_failures_must_be_positive(tmp_path: Path, payments: PaymentsService) -> None:
    """A worker that would never retry, or hold at once, is a setting error."""
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    runner = worker_runner(store, payments=payments)
    with pytest.raises(ValueError, match="max_failures must be a positive int, got 0"):
        Worker(store, [runner], max_failures=0)


# --- a real worker process, and the command line ---------------------------------------------


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m statemachine ARGS`` in a new process, bounded by ``timeout`` seconds."""
    environ = {"PYTHONPATH": f"{TESTS}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "statemachine", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ,
        cwd=ROOT,
        check=False,
    )


async def test_an_idle_worker_process_with_a_corrupt_run_holds_it_and_exits(
    tmp_path: Path,
) -> None:
    """``worker --exit-when-idle`` ends within 60s; runs list/show say why; resume lifts it."""
    db = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(db) as store:
        with PaymentsService(":memory:") as unused:
            runner = worker_runner(store, payments=unused)
            await runner.submit(ADA, QUESTION, run_id="fine")
            await runner.submit(ADA, QUESTION, run_id="corrupt")
    # A blob overwritten on disk: the chain is broken. The second `with` commits.
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("UPDATE checkpoints SET blob = x'00' WHERE run_id = 'corrupt'")
    done = cli("worker", "--agent", "agents.support", "--db", str(db), "--exit-when-idle")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "processed 2 runs: done 1, held 1\n"
    assert done.stderr.count("run held for a person") == 1
    async with SQLiteCheckpointer(db) as store:
        record = await store.record("corrupt")
    assert (record.status, record.held) == (RunStatus.INTERRUPTED, True)
    # A CheckpointCorruptError: the chain's check finds the blob is not the one saved.
    assert record.reason.startswith("a worker cannot go on with it: CheckpointTamperedError: ")
    listed = cli("runs", "list", "--status", "interrupted", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    assert f"a person: {record.reason}" in listed.stdout
    shown = cli("runs", "show", "corrupt", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    assert f"held        {record.reason}; statemachine runs resume corrupt lifts it" in (
        shown.stdout
    )
    assert "checkpoint  cannot be read: " in shown.stdout
    again = cli("worker", "--agent", "agents.support", "--db", str(db), "--exit-when-idle")
    assert (again.returncode, again.stdout) == (0, "processed 0 runs\n")
    resumed = cli("runs", "resume", "corrupt", "--db", str(db))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == (
        f"run corrupt: its hold ({record.reason}) is lifted: the next free worker picks it up\n"
    )
    async with SQLiteCheckpointer(db) as store:
        record = await store.record("corrupt")
    assert (record.status, record.reason, record.failures) == (RunStatus.RUNNING, "", 0)


async def test_a_person_resuming_a_failed_run_starts_its_count_over(
    tmp_path: Path, payments: PaymentsService
) -> None:
    """``runs resume`` of a failed_resumable run: runnable at once, its failures forgotten."""
    db = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(db) as store:
        runner = worker_runner(store, payments=payments, model=ScriptedModel([]))
        await runner.submit(ADA, QUESTION, run_id="broken")
        assert dict(await Worker(store, [runner], exit_when_idle=True, poll=FAST).run()) == {
            "error": 2
        }
    resumed = cli("runs", "resume", "broken", "--db", str(db))
    assert resumed.stdout == "run broken: it is runnable: the next free worker picks it up\n"
    async with SQLiteCheckpointer(db) as store:
        record = await store.record("broken")
    assert (record.status, record.failures, record.retry_at, record.reason) == (
        RunStatus.RUNNING,
        0,
        None,
        "",
    )


class LoadFails:
    """A store whose ``load`` raises what no store check names: nothing gets recorded."""

    def __init__(self, store: Checkpointer) -> None:
        self._store = store

    async def load(self, run_id: str) -> Any:
        raise RuntimeError("the disk went away")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_run_whose_resume_raises_before_anything_is_recorded_is_held_too(
    payments: PaymentsService,
) -> None:
    """The store counts no failure then; the worker counts them, and holds the run at the cap."""
    store = MemoryCheckpointer()
    await worker_runner(store, payments=payments).submit(ADA, QUESTION, run_id="r1")
    runner = worker_runner(LoadFails(store), payments=payments)  # type: ignore[arg-type]
    worker = Worker(store, [runner], exit_when_idle=True, max_failures=3, poll=FAST)
    assert dict(await worker.run()) == {"error": 3}
    record = await store.record("r1")
    assert (record.status, record.reason) == (
        RunStatus.INTERRUPTED,
        "failed 3 times in a row, the last time with RuntimeError: the disk went away "
        "(this worker retries 3)",
    )
