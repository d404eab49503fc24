"""Checkpoint stores: deltas and snapshots, the registry, lifecycle, purge, corruption, sealing.

The behaviour suite runs against both the in-memory and the SQLite store.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import exactly

import statemachine.persist._sqlite as store_module
from statemachine import (
    CheckpointCipher,
    CheckpointCorruptError,
    Checkpointer,
    CheckpointOrderError,
    IllegalStatusChangeError,
    MemoryCheckpointer,
    RunRecord,
    RunStatus,
    SQLiteCheckpointer,
    UnknownRunError,
    generate_key,
)
from statemachine.persist._lifecycle import ENDINGS

pytestmark = pytest.mark.anyio

START = datetime(2025, 1, 1, tzinfo=UTC)


class WallClock:
    """A wall clock that moves only when the test advances it."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class ToySealer:
    """A reversible stand-in for encryption that records every aad it is given."""

    def __init__(self) -> None:
        self.sealed: list[bytes] = []
        self.opened: list[bytes] = []

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        self.sealed.append(aad)
        return aad + b"|" + bytes(byte ^ 0x5A for byte in plaintext)

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        self.opened.append(aad)
        head, _, body = blob.partition(b"|")
        assert head == aad, "a blob opened under another aad"
        return bytes(byte ^ 0x5A for byte in body)


Factory = Callable[..., Any]


@pytest.fixture(params=["memory", "sqlite"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Factory]:
    """Builds stores of the kind under test; SQLite ones live in tmp_path and are closed."""
    opened: list[SQLiteCheckpointer] = []

    def make(**options: Any) -> Any:
        if request.param == "memory":
            return MemoryCheckpointer(**options)
        store = SQLiteCheckpointer(tmp_path / "runs" / "checkpoints.db", **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.aclose()


MESSAGES = [
    {"role": "user" if i % 2 else "assistant", "content": f"message {i:06d}"} for i in range(1000)
]


def document(step: int) -> dict[str, Any]:
    """A phase-like document whose transcript grows by one message per step."""
    return {
        "version": 1,
        "kind": "Planning",
        "fields": {
            "transcript": MESSAGES[: step + 1],
            "step": step,
            "spent": Decimal("0.25") * step,
        },
    }


async def save_run(
    store: Checkpointer, run_id: str, steps: int, *, agent: str = "travel", first: int = 0
) -> None:
    for seq in range(first, first + steps):
        await store.save(
            run_id, seq, document(seq), agent=agent, status="running", phase="Planning"
        )


# --- deltas and snapshots ------------------------------------------------------------------


async def test_a_growing_run_round_trips_over_1000_saves(make_store: Factory) -> None:
    """After each of 1,000 saves (keys added, dropped, reordered, lists cut) load is the last."""
    store = make_store()
    last: dict[str, Any] = {}
    for seq in range(1000):
        doc = document(seq)
        if seq % 7 == 3:
            doc["fields"]["note"] = f"note {seq}"  # a key that comes and goes
        if seq % 11 == 5:
            doc["fields"]["transcript"] = doc["fields"]["transcript"][:2]  # a list cut short
        if seq % 13 == 0:
            doc = {"fields": doc["fields"], "kind": doc["kind"], "version": 1}  # reordered
        if seq % 17 == 0:
            doc["fields"] = "not an object this time"
        await store.save("r1", seq, doc, agent="travel", status="running", phase="Planning")
        last = doc
        if seq % 97 == 0 or seq in (1, 49, 50, 51):
            assert await store.load("r1") == (seq, doc)
    seq, loaded = await store.load("r1")
    assert (seq, loaded) == (999, last)
    assert list(loaded) == list(last)
    assert list(loaded["fields"]) == list(last["fields"])


async def test_bytes_per_transition_stay_flat_and_load_reads_few(make_store: Factory) -> None:
    """A late delta costs what an early one did; snapshots cost no more than the deltas;
    loading opens the last snapshot and the deltas after it, nothing older.

    A snapshot is written once the deltas since the last one add up to its size (and at
    least ``snapshot_every`` checkpoints after it): the transcript grows by one message
    a step, so snapshots come further apart as it grows, and never cost more than the
    deltas between them.
    """
    sealer = ToySealer()
    store = make_store(sealer=sealer)
    await save_run(store, "r1", 921)
    history = await store.history("r1")
    sizes = {entry.seq: entry for entry in history}
    snapshots = [entry.seq for entry in history if entry.snapshot]
    assert snapshots[:3] == [0, 50, 100]
    for before, after in itertools.pairwise(snapshots):
        deltas = sum(sizes[seq].size for seq in range(before + 1, after))
        assert after - before >= store.snapshot_every
        assert deltas >= sizes[before].size
        if after - before > store.snapshot_every:  # due at the first checkpoint it could be
            assert sizes[before].size > deltas - sizes[after - 1].size
    early, late = sizes[101], sizes[901]
    assert not early.snapshot
    assert not late.snapshot
    assert abs(late.size - early.size) <= 8
    snapshot_bytes = sum(sizes[seq].size for seq in snapshots)
    assert snapshot_bytes < sum(entry.size for entry in history) - snapshot_bytes
    sealer.opened.clear()
    assert (await store.load("r1"))[0] == 920
    # The head first (its tag, under the key), then the last snapshot and its deltas.
    assert sealer.opened[0][:-64] == b"head:r1:920:"
    assert sealer.opened[1:] == [f"r1:{seq}".encode() for seq in range(snapshots[-1], 921)]


async def test_a_store_reopened_rebuilds_and_continues_with_deltas(make_store: Factory) -> None:
    """A store that has not seen the run (a restart) still saves exact deltas after it."""
    first = make_store(snapshot_every=10)
    await save_run(first, "r1", 15)
    again = make_store(snapshot_every=10) if isinstance(first, SQLiteCheckpointer) else first
    await save_run(again, "r1", 3, first=15)
    assert await again.load("r1") == (17, document(17))
    assert [entry.snapshot for entry in await again.history("r1")][9:] == [False] + [True] + [
        False
    ] * 7


async def test_decimal_digits_survive_snapshots_and_deltas(make_store: Factory) -> None:
    """Decimal("800.00") keeps its digits; 800.0 -> 800.00 and 1 -> True are changes."""
    store = make_store()
    docs: list[dict[str, Any]] = [
        {"price": Decimal("800.00"), "flag": 1, "fields": {"cost": Decimal("800.0")}},
        {"price": Decimal("800.00"), "flag": True, "fields": {"cost": Decimal("800.00")}},
        {"price": Decimal("800.000"), "flag": True, "fields": {"cost": Decimal("0.10")}},
    ]
    for seq, doc in enumerate(docs):
        await store.save("r1", seq, doc, agent="travel", status="running", phase="Planning")
        _, loaded = await store.load("r1")
        assert str(loaded["price"]) == str(doc["price"])
        assert loaded["flag"] is doc["flag"]
        assert str(loaded["fields"]["cost"]) == str(doc["fields"]["cost"])


# --- order, registry, lifecycle ------------------------------------------------------------


async def test_a_seq_that_is_not_the_next_is_refused(make_store: Factory) -> None:
    """Gaps, repeats and a new run not starting at 0 are refused, and nothing is saved."""
    store = make_store()
    with pytest.raises(CheckpointOrderError) as caught:
        await store.save("r1", 1, document(1), agent="travel", status="running", phase="Idle")
    assert (caught.value.seq, caught.value.expected) == (1, 0)
    await save_run(store, "r1", 2)
    for seq in (3, 1, 0):
        with pytest.raises(
            CheckpointOrderError,
            match=exactly(
                f"checkpoint {seq} of run 'r1' refused: the run's next checkpoint is 2, and "
                "nothing was saved. Save one checkpoint per transition, in order; a seq already "
                "saved means two processes are driving the same run."
            ),
        ):
            await store.save("r1", seq, {"x": 1}, agent="travel", status="running", phase="X")
    assert await store.load("r1") == (1, document(1))
    assert [entry.seq for entry in await store.history("r1")] == [0, 1]


async def test_the_registry_row_follows_the_saves(make_store: Factory) -> None:
    """One row per run: agent, status, phase, what it waits for, when, and its last seq."""
    clock = WallClock()
    store = make_store(clock=clock)
    await save_run(store, "r1", 2)
    clock.advance(minutes=5)
    record = await store.save(
        "r1",
        2,
        document(2),
        agent="travel",
        status="interrupted",
        phase="AwaitApproval",
        waiting_for="approval of book_flight TP1351 ($800.00)",
    )
    assert record == await store.record("r1")
    assert record.model_dump() == {
        "run_id": "r1",
        "agent": "travel",
        "status": RunStatus.INTERRUPTED,
        "phase": "AwaitApproval",
        "waiting_for": "approval of book_flight TP1351 ($800.00)",
        "updated_at": START + timedelta(minutes=5),
        "seq": 2,
        "stop_requested": False,
        "decision_pending": False,
        "reason": "",
        "failures": 0,
        "retry_at": None,
    }
    assert [(e.seq, e.phase, e.at) for e in await store.history("r1")] == [
        (0, "Planning", START),
        (1, "Planning", START),
        (2, "AwaitApproval", START + timedelta(minutes=5)),
    ]


async def test_needing_attention_lists_only_the_runs_a_person_must_see(
    make_store: Factory,
) -> None:
    """Interrupted, failed_resumable and cancelled runs, oldest first; the others never."""
    clock = WallClock()
    store = make_store(clock=clock)
    statuses = ["running", "failed_resumable", "completed", "interrupted", "cancelled", "aborted"]
    for index, status in enumerate(statuses):
        clock.advance(minutes=1)
        agent = "support" if index % 2 else "travel"
        await store.save(f"r{index}", 0, {"n": index}, agent=agent, status=status, phase="P")
    assert [(r.run_id, r.status) for r in await store.needing_attention()] == [
        ("r1", "failed_resumable"),
        ("r3", "interrupted"),
        ("r4", "cancelled"),
    ]
    assert [r.run_id for r in await store.registry()] == [f"r{i}" for i in range(6)]
    assert [r.run_id for r in await store.registry(agent="support")] == ["r1", "r3", "r5"]
    assert [r.run_id for r in await store.registry(status="completed")] == ["r2"]
    assert [r.run_id for r in await store.registry(status=["aborted", "running"])] == [
        "r0",
        "r5",
    ]
    assert await store.registry(status=[]) == []


async def test_status_changes_go_through_the_lifecycle(make_store: Factory) -> None:
    """Legal changes update the row; illegal ones are refused and change nothing."""
    clock = WallClock()
    store = make_store(clock=clock)
    await save_run(store, "r1", 1)
    clock.advance(hours=1)
    paused = await store.set_status("r1", "interrupted", waiting_for="a refund approval")
    assert (paused.status, paused.waiting_for, paused.updated_at) == (
        "interrupted",
        "a refund approval",
        START + timedelta(hours=1),
    )
    with pytest.raises(IllegalStatusChangeError) as caught:
        await store.set_status("r1", RunStatus.COMPLETED)
    assert (caught.value.run_id, caught.value.current, caught.value.target) == (
        "r1",
        "interrupted",
        "completed",
    )
    assert await store.record("r1") == paused
    await store.set_status("r1", "running")
    await store.set_status("r1", "completed")
    with pytest.raises(IllegalStatusChangeError, match="An ending never changes"):
        await store.set_status("r1", "running")
    with pytest.raises(IllegalStatusChangeError):
        await store.save("r1", 1, {"x": 1}, agent="travel", status="running", phase="P")
    assert (await store.record("r1")).status == "completed"
    assert [entry.seq for entry in await store.history("r1")] == [0]


async def test_an_unknown_run_is_named(make_store: Factory) -> None:
    """Loading, reading or moving a run never saved says so, naming it."""
    store = make_store()
    for call in (store.load, store.history, store.record):
        with pytest.raises(UnknownRunError, match="run 'nope' has no checkpoint in the "):
            await call("nope")
    with pytest.raises(UnknownRunError):
        await store.set_status("nope", "aborted")


async def test_purge_removes_only_ended_runs_past_retention(make_store: Factory) -> None:
    """Completed 31 days ago goes with its checkpoints; 29 days, or interrupted 90, stay."""
    clock = WallClock()
    store = make_store(clock=clock)
    plan = [
        ("old-done", "completed", 31),
        ("old-aborted", "aborted", 45),
        ("recent-done", "completed", 29),
        ("old-paused", "interrupted", 90),
        ("old-running", "running", 90),
    ]
    today = START + timedelta(days=100)
    for run_id, status, age in plan:
        clock.now = today - timedelta(days=age)
        await save_run(store, run_id, 2)
        await store.set_status(run_id, status)
    clock.now = today
    assert await store.purge() == 2
    assert {r.run_id for r in await store.registry()} == {
        "recent-done",
        "old-paused",
        "old-running",
    }
    for gone in ("old-done", "old-aborted"):
        with pytest.raises(UnknownRunError):
            await store.load(gone)
        with pytest.raises(UnknownRunError):
            await store.history(gone)
    assert (await store.load("recent-done"))[0] == 1
    assert await store.purge(timedelta(days=28), now=today) == 1
    assert await store.purge(now=today) == 0


# --- sealing -------------------------------------------------------------------------------


async def test_every_blob_goes_through_the_sealer_with_its_run_and_seq(
    make_store: Factory,
) -> None:
    """seal sees every blob with aad run_id:seq; open gets the same aad back."""
    sealer = ToySealer()
    store = make_store(sealer=sealer, snapshot_every=3)
    await save_run(store, "trip-9", 5)
    # Each checkpoint, then the run's new head (its tag: see test_chain.py).
    assert sealer.sealed[0::2] == [f"trip-9:{seq}".encode() for seq in range(5)]
    assert [aad[:-64] for aad in sealer.sealed[1::2]] == [
        f"head:trip-9:{seq}:".encode() for seq in range(5)
    ]
    assert await store.load("trip-9") == (4, document(4))
    assert sealer.opened[0][:-64] == b"head:trip-9:4:"
    assert sealer.opened[1:] == [b"trip-9:3", b"trip-9:4"]


async def test_the_aes_gcm_cipher_plugs_in(make_store: Factory) -> None:
    """The library's CheckpointCipher is a Sealer: runs round-trip through it."""
    cipher = CheckpointCipher({"k1": generate_key()}, current="k1")
    store = make_store(sealer=cipher, snapshot_every=4)
    await save_run(store, "r1", 6)
    assert await store.load("r1") == (5, document(5))


# --- SQLite: the file, corruption ------------------------------------------------------------


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


async def test_sqlite_creates_its_file_on_first_use_in_wal_mode(tmp_path: Path) -> None:
    """No file until the first operation; then one file, WAL, both tables."""
    path = tmp_path / "deep" / "dir" / "runs.db"
    async with SQLiteCheckpointer(path) as store:
        assert not path.exists()
        await save_run(store, "r1", 1)
        assert path.exists()
    with raw(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    db.close()
    assert {"runs", "checkpoints"} <= tables


async def corrupted_store(tmp_path: Path, damage: str) -> tuple[SQLiteCheckpointer, Path]:
    path = tmp_path / "runs.db"
    store = SQLiteCheckpointer(path, snapshot_every=10)
    await save_run(store, "victim", 15)
    await save_run(store, "bystander", 15)
    await store.aclose()
    db = raw(path)
    if damage == "flip":
        # Flip one byte of delta 12 in the file itself, as a failing disk would.
        db.close()
        data = bytearray(path.read_bytes())
        at = data.index(b"message 000012")
        data[at + len("message 0000")] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        db.execute(
            "UPDATE checkpoints SET blob = substr(blob, 1, length(blob) / 2) "
            "WHERE run_id = 'victim' AND seq = 12"
        )
    elif damage == "gap":
        db.execute("DELETE FROM checkpoints WHERE run_id = 'victim' AND seq = 12")
    db.close()
    return SQLiteCheckpointer(path, snapshot_every=10), path


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("flip", "checkpoint 12 does not match its checksum (truncated or overwritten)"),
        ("truncate", "checkpoint 12 does not match its checksum (truncated or overwritten)"),
        ("gap", "checkpoint 12 is missing (a row was removed)"),
    ],
)
async def test_a_damaged_checkpoint_is_refused_naming_the_run(
    tmp_path: Path, damage: str, problem: str
) -> None:
    """The damaged run is refused with what to do; other runs load; nothing is changed."""
    store, path = await corrupted_store(tmp_path, damage)
    before = path.read_bytes()
    async with store:
        with pytest.raises(
            CheckpointCorruptError,
            match=exactly(
                f"checkpoint of run 'victim': {problem}. Nothing was loaded and nothing in "
                f"the checkpoint store {str(path)!r} was changed; other runs are unaffected. "
                "Restore the store from a backup to resume this run, or abort it and start it "
                "again."
            ),
        ) as caught:
            await store.load("victim")
        assert caught.value.run_id == "victim"
        assert await store.load("bystander") == (14, document(14))
        with pytest.raises(CheckpointCorruptError):
            await store.save("victim", 15, {}, agent="travel", status="running", phase="P")
        assert (await store.record("victim")).seq == 14
        await store.set_status("victim", "aborted")  # the way out the message gives
    assert path.read_bytes()[:100] == before[:100]


async def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    """A checkpoint file overwritten with garbage is refused, naming the run asked for."""
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not a database" * 100)
    async with SQLiteCheckpointer(path) as store:
        with pytest.raises(
            CheckpointCorruptError,
            match=exactly(
                f"checkpoint of run 'r1': the checkpoint store {str(path)!r} cannot be read "
                "(file is not a database). Nothing was changed. Restore the file from a "
                "backup, or move it aside to start with an empty store."
            ),
        ):
            await store.load("r1")
    assert path.read_bytes() == b"this is not a database" * 100


async def test_every_kind_of_save_writes_the_row_it_returns(tmp_path: Path) -> None:
    """A save that changes only the phase, time, seq and head writes those alone (the
    SQLite store's narrow update); any other change writes the whole row. Either way the
    row read back by another connection is the record the save returned, and the memory
    store, doing the same, returns the same records."""
    path = tmp_path / "runs.db"
    clocks = WallClock(), WallClock()
    stores = SQLiteCheckpointer(path, clock=clocks[0]), MemoryCheckpointer(clock=clocks[1])
    reader = SQLiteCheckpointer(path)
    seq = 0

    async def save(phase: str, status: str = "running", waiting_for: str = "") -> None:
        nonlocal seq
        records = []
        for store, clock in zip(stores, clocks, strict=True):
            clock.advance(seconds=1)
            records.append(
                await store.save(
                    "r",
                    seq,
                    document(seq),
                    agent="a",
                    status=status,
                    phase=phase,
                    waiting_for=waiting_for,
                )
            )
        assert records[0] == records[1] == await reader.record("r")
        seq += 1

    async def both(operation: str, *args: Any, **options: Any) -> None:
        for store, clock in zip(stores, clocks, strict=True):
            clock.advance(seconds=1)
            await getattr(store, operation)("r", *args, **options)
        assert await stores[0].record("r") == await stores[1].record("r")

    await save("Planning")
    narrow = 0
    last = ""

    def count(statement: str) -> None:
        # A narrow save writes the checkpoint and then the run's end marker, not its row.
        nonlocal narrow, last
        marker = statement.startswith(
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head)"
        )
        narrow += marker and last.startswith(
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at) "
        )
        last = statement

    stores[0]._db.set_trace_callback(count)
    await save("ToolCalling")  # the narrow update
    await save("Observing")
    await both("set_status", "failed_resumable")
    assert (await reader.record("r")).failures == 1
    await save("Planning")  # failures and retry_at reset: the whole row
    assert (await reader.record("r")).failures == 0
    await save("AwaitApproval", "interrupted", "approval of pay")  # a status change
    await save("AwaitApproval", "interrupted", "approval of pay")  # the same wait: narrow
    await both("set_status", "running")
    await both("claim", "worker")
    await both("request_stop")  # stop_requested, kept by the saves after it
    await save("Planning")
    await save("ToolCalling")
    assert (await reader.record("r")).stop_requested
    await save("Done", "completed")
    assert (await reader.load("r"))[0] == seq - 1  # the head the narrow updates wrote
    await reader.verify("r")
    assert narrow == 5  # the saves that changed nothing but the phase, time, seq and head
    await stores[0].aclose()
    await reader.aclose()


async def test_a_file_with_the_old_status_index_gets_the_new_ones(tmp_path: Path) -> None:
    """The index on (status, updated_at), which every save rewrote, is replaced by one on
    status and one on the ended runs' age (which purge uses)."""
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as store:
        await save_run(store, "r1", 2)
    with closing(raw(path)) as db:
        db.execute("DROP INDEX runs_of_status")
        db.execute("DROP INDEX runs_ended")
        db.execute("CREATE INDEX runs_by_status ON runs (status, updated_at)")
    async with SQLiteCheckpointer(path) as store:
        await save_run(store, "r1", 1, first=2)
        indexes = {
            name
            for (name,) in store._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'"
            )
        }
        assert indexes == {"runs_of_status", "runs_ended", "sqlite_autoindex_runs_1"}
        plan = store._db.execute(
            "EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE "
            f"{store_module._ENDED} AND updated_at < ?",
            ("",),
        ).fetchall()
        assert "runs_ended" in str(plan)
        assert {RunStatus(value) for value in re.findall(r"'(\w+)'", store_module._ENDED)} == (
            ENDINGS
        )
        assert (await store.load("r1"))[0] == 2


# --- a remembered row, changed by another connection -----------------------------------------

APPROVAL = {
    "kind": "approval",
    "call_id": "c1",
    "tool": "pay",
    "args_hash": "h",
    "approved_by": "ana",
    "approved_at": START.isoformat(),
    "run_id": "r",
}


async def _claimed_then_stopped(other: SQLiteCheckpointer) -> None:
    await other.claim("r", "worker")
    await other.request_stop("r")  # a live claim: stop_requested


async def _saved_by_the_other(other: SQLiteCheckpointer) -> None:
    await other.save("r", 2, document(2), agent="a", status="running", phase="Planning")


# Each: what the run's second and third checkpoints are (phase, status, waiting for), and
# what another connection does to the run's row in between.
Saved = tuple[str, str, str]
RUNNING: Final = ("ToolCalling", "running", "")
WAITING: Final = ("AwaitApproval", "interrupted", "approval of pay")
OBSERVING: Final = ("Observing", "running", "")
ELSEWHERE: dict[str, tuple[Saved, Saved, Callable[[SQLiteCheckpointer], Any]]] = {
    "stop requested": (RUNNING, OBSERVING, _claimed_then_stopped),
    "cancelled": (RUNNING, OBSERVING, lambda other: other.request_stop("r")),
    "failed": (RUNNING, OBSERVING, lambda other: other.set_status("r", "failed_resumable")),
    "held": (RUNNING, OBSERVING, lambda other: other.hold("r", "looks odd")),
    "saved": (RUNNING, OBSERVING, _saved_by_the_other),
    "decided": (WAITING, WAITING, lambda other: other.submit_decision("r", APPROVAL)),
    "decided, then running": (
        WAITING,
        OBSERVING,
        lambda other: other.submit_decision("r", APPROVAL),
    ),
    "time only": (
        WAITING,
        WAITING,
        lambda other: other.set_status("r", "interrupted", waiting_for="approval of pay"),
    ),
}


async def _third_save(path: Path, change: str, *, remembered: bool) -> Any:
    """The run's third save by a store that saved the first two (``remembered``) or by a
    store opened after another connection changed the row: its record, or its error; and
    the row, the pending decision and the document as a new connection reads them."""
    second, third, elsewhere = ELSEWHERE[change]
    clock = WallClock()
    store = SQLiteCheckpointer(path, clock=clock)
    other = SQLiteCheckpointer(path, clock=clock)
    for seq, (phase, status, waiting) in enumerate([("Planning", "running", ""), second]):
        await store.save(
            "r", seq, document(seq), agent="a", status=status, phase=phase, waiting_for=waiting
        )
    await elsewhere(other)
    if not remembered:  # a store that knows nothing of the run
        await store.aclose()
        store = SQLiteCheckpointer(path, clock=clock)
    phase, status, waiting = third
    try:
        outcome: Any = await store.save(
            "r", 2, document(2), agent="a", status=status, phase=phase, waiting_for=waiting
        )
    except Exception as error:  # compared with the other store's
        outcome = (type(error), str(error))
    async with SQLiteCheckpointer(path) as reader:
        read = (await reader.record("r"), await reader.decision("r"), await reader.load("r"))
        await reader.verify("r")
    await store.aclose()
    await other.aclose()
    return outcome, read


@pytest.mark.parametrize("change", sorted(ELSEWHERE))
async def test_a_row_changed_by_another_connection_is_read_again(
    tmp_path: Path, change: str
) -> None:
    """A store takes a run's row from memory when it wrote it last and no other connection
    has committed since; when another connection changed it, its save does, returns and
    stores what a store that reads the row from the file does (a stop request kept, a
    cancel kept, a decision cleared, a seq taken refused, the retry state reset, the hold
    kept)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    remembered = await _third_save(tmp_path / "a" / "runs.db", change, remembered=True)
    read_again = await _third_save(tmp_path / "b" / "runs.db", change, remembered=False)
    assert remembered == read_again


async def test_an_ordinary_save_is_six_statements(tmp_path: Path) -> None:
    """BEGIN IMMEDIATE, PRAGMA data_version (the remembered row still the file's), the
    end marker's DELETE, the checkpoint's INSERT, the next marker's INSERT, COMMIT: no
    read of the row, no write of it."""
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        await save_run(store, "r", 2)
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        await save_run(store, "r", 3, first=2)
        assert [statement.split(" ", 2)[:2] for statement in statements] == [
            ["BEGIN", "IMMEDIATE"],
            ["PRAGMA", "data_version"],
            ["DELETE", "FROM"],
            ["INSERT", "INTO"],
            ["INSERT", "INTO"],
            ["COMMIT"],
        ] * 3


async def test_a_next_delta_given_as_ops_is_one_statement(tmp_path: Path) -> None:
    """A save given as ops on the document saved last, the run's row the one this
    connection wrote: one INSERT into the view whose trigger turns the run's end marker
    into the checkpoint and inserts the next marker (its own transaction), and the run
    loads and verifies."""
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        documents = [document(seq) for seq in range(5)]
        await save_run(store, "r", 1)
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        for seq in range(1, 5):
            ops = [["set", ["fields"], documents[seq]["fields"]]]
            await store.save(
                "r",
                seq,
                documents[seq],
                agent="travel",
                status="running",
                phase="Planning",
                base=documents[seq - 1],
                ops=ops,
            )
        # (The trace names the insert again for each step of its trigger.)
        saves = [s.split(", '", 1)[0] for s in statements if s != "PRAGMA busy_timeout = 0"]
        saves = [s for at, s in enumerate(saves) if not at or saves[at - 1] != s]
        # The first is plain: its base is not the very document the store saved last.
        assert [statement.split(" ", 2)[:2] for statement in saves[:6]] == [
            ["BEGIN", "IMMEDIATE"],
            ["PRAGMA", "data_version"],
            ["DELETE", "FROM"],
            ["INSERT", "INTO"],
            ["INSERT", "INTO"],
            ["COMMIT"],
        ]
        assert saves[6:] == [f"INSERT INTO next_checkpoint VALUES ('r', {seq}" for seq in (2, 3, 4)]
        store._db.set_trace_callback(None)
        assert (await store.load("r"))[1] == documents[4]
        assert await store.verify("r") == 4


class _Moment(datetime):
    """A datetime subclass with an isoformat of its own, which a stamp must keep."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "own:" + super().isoformat(sep, timespec)


_OFFSETS: Final = st.timedeltas(
    min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
)
_ZONES: Final = st.one_of(st.just(UTC), st.builds(timezone, _OFFSETS), st.none())
_MOMENTS: Final = st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31))


@settings(max_examples=500, deadline=None)
@given(moments=st.lists(st.tuples(_MOMENTS, _ZONES), min_size=1, max_size=6), own=st.booleans())
def test_a_stamp_is_the_utc_isoformat_of_its_moment(
    moments: list[tuple[datetime, timezone | None]], own: bool
) -> None:
    """The store's stamp (its second's text kept) is isoformat's text for any moment: UTC,
    another offset, naive (local time, as astimezone reads it), a subclass, and moments in
    the same second, one after the other (the kept text must follow each)."""
    for naive, zone in moments:
        moment = naive.replace(tzinfo=zone)
        for each in (moment, moment.replace(microsecond=0), moment + timedelta(microseconds=1)):
            if own:
                each = _Moment.fromisoformat(each.isoformat())
            expected = each.astimezone(UTC).isoformat(timespec="microseconds")
            assert store_module._stamp(each) == expected


def _plain_same_but_saved(before: RunRecord, saved: RunRecord) -> bool:
    """The check as it was written field by field (the store's compares one tuple)."""
    return (
        before.status is saved.status
        and before.waiting_for == saved.waiting_for
        and before.agent == saved.agent
        and before.stop_requested == saved.stop_requested
        and before.reason == saved.reason
        and before.failures == saved.failures
        and before.retry_at == saved.retry_at
    )


_RETRY: Final = st.one_of(
    st.none(), st.sampled_from([START, START + timedelta(seconds=1)]), st.just(START.astimezone())
)
_ROWS: Final = st.builds(
    RunRecord,
    run_id=st.just("r"),
    agent=st.sampled_from(["a", "b"]),
    status=st.sampled_from(list(RunStatus)),
    phase=st.sampled_from(["Planning", "ToolCalling"]),
    waiting_for=st.sampled_from(["", "an approval"]),
    updated_at=st.sampled_from([START, START + timedelta(minutes=1)]),
    seq=st.integers(0, 2),
    stop_requested=st.booleans(),
    decision_pending=st.booleans(),
    reason=st.sampled_from(["", "held"]),
    failures=st.integers(0, 2),
    retry_at=_RETRY,
)


@settings(max_examples=500, deadline=None)
@given(before=_ROWS, saved=_ROWS, same=st.booleans())
def test_the_ordinary_save_check_is_the_field_by_field_one(
    before: RunRecord, saved: RunRecord, same: bool
) -> None:
    """Which saves write only phase, time, seq and head: the same answer as comparing the
    seven kept fields one by one, for rows that differ anywhere (or only where a save may)."""
    if same:
        kept = ("status", "waiting_for", "agent", "stop_requested", "reason", "failures")
        saved = saved.model_copy(update={name: getattr(before, name) for name in kept})
        saved = saved.model_copy(update={"retry_at": before.retry_at})
    assert store_module._same_but_saved(before, saved) == _plain_same_but_saved(before, saved)


def test_the_system_clocks_time_is_the_checked_clocks() -> None:
    """_Chain.now with the system clock reads datetime.now(UTC) directly (what _utc of it
    returns: aware, in UTC); any other clock is still checked (naive refused, another
    zone turned into UTC). A status given as a member is the member RunStatus() returns."""
    from statemachine._errors import ConfigError
    from statemachine.persist._chain import _Chain
    from statemachine.persist._rows import _system_clock, _utc

    chain = _Chain(snapshot_every=50, sealer=None, clock=_system_clock, where="here")
    before = datetime.now(UTC)
    now = chain.now()
    assert before <= now <= datetime.now(UTC)
    assert type(now) is datetime
    assert now.tzinfo is UTC
    assert now == _utc(now, "x")
    moment = datetime(2026, 12, 2, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    chain.clock = lambda: moment
    assert chain.now() == moment
    assert chain.now().tzinfo is UTC
    chain.clock = lambda: datetime(2026, 12, 2, 9, 30)
    with pytest.raises(ConfigError, match="naive"):
        chain.now()
    for status in RunStatus:
        assert RunStatus(status) is status
        assert RunStatus(status.value) is status
