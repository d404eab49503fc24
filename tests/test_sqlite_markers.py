"""Runs that end with a marker row (issue 23, SQLite format 1): a save writes one page.

Since format 1 (``PRAGMA user_version``) the head of a run's chain, and the seq, phase and
moment of its newest checkpoint, are kept in the run's end marker: the row after its
newest checkpoint in the checkpoints table, the only row of the run whose ``head`` is
set. A save turns the marker into the checkpoint and inserts the next marker, both on the
table's last page, and leaves the run's row alone when its status does not change.

``tests/data/pre-marker-runs.db`` was written by ``tests/data/make_pre_marker_runs.py``
from commit d452a40 (format 0: the head in the run's row, written by every save): the
runs ``long`` and ``sealed`` (completed), ``waiting`` (waiting for an approval of a
payment) and ``open`` (running: its process was interrupted in a lookup). Opened with
today's code, each run's head moves to its marker once, in the opening transaction,
losing nothing; its runs load, verify and resume, and a run's end removed from the file
is still refused.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from old_stores import KEY, looker, opened_at_once_counted, phase_of, read, resume_waiting
from old_stores import copied as _copied
from support import one_statement_saves

from statemachine import CheckpointTamperedError, Done, Runner, RunRecord, SQLiteCheckpointer
from statemachine.persist import _sqlite
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

RUNS = ("long", "waiting", "sealed", "open")
_PAGE = 4096 + 24  # a WAL frame: a page and its header


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return _copied("pre-marker-runs.db", tmp_path)


def sql(path: Path, *statements: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for statement in statements:
            db.execute(statement)


def old_runs(path: Path) -> dict[str, tuple[Any, ...]]:
    """Each run's row as format 0 kept it: status, phase, seq, moment, head, number."""
    rows = read(path, "SELECT run_id, status, phase, seq, updated_at, head, number FROM runs")
    return {row[0]: row[1:] for row in rows}


def wal_size(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


def sealer_of(run_id: str) -> Any:
    return KEY if run_id == "sealed" else None


async def test_the_old_store_is_as_expected(store_path: Path) -> None:
    """Format 0: no head column in the checkpoints, the heads in the runs' rows, the old
    one-statement save's view, and one run of each kind."""
    assert read(store_path, "PRAGMA user_version") == [(0,)]
    columns = [row[1] for row in read(store_path, "PRAGMA table_info(checkpoints)")]
    assert "head" not in columns
    names = {name for (name,) in read(store_path, "SELECT name FROM sqlite_master")}
    assert {"next_delta", "next_delta_saved"} <= names
    runs = old_runs(store_path)
    assert {run_id: runs[run_id][:3] for run_id in RUNS} == {
        "long": ("completed", "Done", 123),
        "waiting": ("interrupted", "AwaitApproval", 39),
        "sealed": ("completed", "Done", 39),
        "open": ("running", "ToolCalling", 92),
    }
    assert all(row[4] is not None for row in runs.values())


async def test_an_old_store_moves_its_heads_to_end_markers_losing_nothing(
    store_path: Path,
) -> None:
    before = old_runs(store_path)
    rows_before = read(store_path, "SELECT id, run_id, seq, kind, phase, blob, at FROM checkpoints")
    records: dict[str, RunRecord] = {}
    verified: dict[str, int] = {}
    for run_id in RUNS:
        async with SQLiteCheckpointer(store_path, sealer=sealer_of(run_id)) as store:
            records[run_id] = await store.record(run_id)
            verified[run_id] = await store.verify(run_id)
    assert read(store_path, "PRAGMA user_version") == [(1,)]
    # The checkpoints are as they were; each run has one marker after its newest one.
    assert (
        read(
            store_path,
            "SELECT id, run_id, seq, kind, phase, blob, at FROM checkpoints WHERE head IS NULL",
        )
        == rows_before
    )
    markers = read(
        store_path,
        "SELECT id, run_id, seq, kind, phase, blob, at, head FROM checkpoints "
        "WHERE head IS NOT NULL ORDER BY id",
    )
    assert markers == [
        ((number << 32) + seq + 1, run_id, seq + 1, "delta", phase, b"", moment, head)
        for run_id, (_, phase, seq, moment, head, number) in before.items()
    ]
    # The runs' rows keep everything but their heads, which nothing reads now.
    after = old_runs(store_path)
    assert {run_id: row[4] for run_id, row in after.items()} == dict.fromkeys(RUNS)
    assert {run_id: row[:4] + row[5:] for run_id, row in after.items()} == {
        run_id: row[:4] + row[5:] for run_id, row in before.items()
    }
    # A run's record is what its row said before.
    for run_id, (status, phase, seq, moment, _, _) in before.items():
        record = records[run_id]
        assert (record.status, record.phase, record.seq) == (status, phase, seq)
        assert record.updated_at == datetime.fromisoformat(moment)
        assert verified[run_id] == seq
    names = {name for (name,) in read(store_path, "SELECT name FROM sqlite_master")}
    assert {"next_checkpoint", "next_checkpoint_saved"} <= names
    assert not {"next_delta", "next_delta_saved"} & names
    assert read(store_path, "PRAGMA integrity_check") == [("ok",)]


async def test_the_old_runs_load_and_resume(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completed runs load as Done; the waiting one resumes to its payment; the
    interrupted one resumes where it stopped, its saves in one statement after the first."""
    async with SQLiteCheckpointer(store_path) as store:
        seq, document = await store.load("long")
    assert seq == 123
    assert isinstance(phase_of(dict(document), looker(), "long"), Done)
    async with SQLiteCheckpointer(store_path, sealer=KEY) as store:
        _, sealed = await store.load("sealed")
    assert isinstance(phase_of(dict(sealed), looker(), "sealed"), Done)
    resumed, seq, document, verified = await resume_waiting(store_path)
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert seq == verified > 39
    one_statement = one_statement_saves(monkeypatch)
    turns = [tool_call("lookup", {"key": f"k{n}"}) for n in range(31, 40)] + [reply("Done.")]
    async with SQLiteCheckpointer(store_path) as store:
        runner = Runner(
            looker(), model=ScriptedModel(turns), gate=AutoApproveGate(by="lin"), checkpointer=store
        )
        result = await runner.resume("open")
        assert isinstance(result.final, Done)
        seq, _ = await store.load("open")
        assert await store.verify("open") == seq > 92
        assert (await store.record("open")).seq == seq
    assert sum(one_statement) > 20
    # Each run's marker is after its newest checkpoint, and only there.
    numbers = dict(read(store_path, "SELECT run_id, number FROM runs"))
    for run_id in ("waiting", "open"):
        (newest,) = read(
            store_path,
            "SELECT max(seq) FROM checkpoints WHERE run_id = ? AND head IS NULL",
            run_id,
        )[0]
        assert read(
            store_path,
            "SELECT id, seq FROM checkpoints WHERE run_id = ? AND head IS NOT NULL",
            run_id,
        ) == [((numbers[run_id] << 32) + newest + 1, newest + 1)]


@pytest.mark.parametrize("removed", [1, 2])
@pytest.mark.parametrize("marker", ["removed", "moved"])
async def test_a_migrated_run_s_end_removed_is_refused(
    store_path: Path, removed: int, marker: str
) -> None:
    """After the move, the last checkpoints of a run removed with its marker (no head
    then), or with its marker moved down to match (the head of another end), refuse a
    load and a verify; the other runs still load."""
    async with SQLiteCheckpointer(store_path) as store:
        assert (await store.load("open"))[0] == 92
    sql(store_path, f"DELETE FROM checkpoints WHERE run_id = 'open' AND seq > {92 - removed}")
    if marker == "moved":
        sql(
            store_path,
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head) "
            f"SELECT (4 << 32) + {93 - removed}, 4, 'open', {93 - removed}, 'delta', 'P', x'', "
            f"'2026-12-01T00:00:00.000000+00:00', zeroblob(32)",
        )
    async with SQLiteCheckpointer(store_path) as store:
        with pytest.raises(CheckpointTamperedError) as caught:
            await store.load("open")
        assert caught.value.run_id == "open"
        with pytest.raises(CheckpointTamperedError):
            await store.verify("open")
        assert (await store.load("long"))[0] == 123


async def test_a_row_changed_before_the_move_leaves_its_run_refused_and_the_others_whole(
    store_path: Path,
) -> None:
    """A run whose row says a seq its checkpoints passed (changed by hand before the
    move): its marker cannot go after that seq, so it has none, keeps its head in its
    row, and is refused; the move of the others goes on."""
    sql(store_path, "UPDATE runs SET seq = 90 WHERE run_id = 'open'")
    async with SQLiteCheckpointer(store_path) as store:
        with pytest.raises(CheckpointTamperedError, match="has no recorded head"):
            await store.load("open")
        assert (await store.load("long"))[0] == 123
        assert (await store.load("waiting"))[0] == 39
    assert read(store_path, "SELECT head IS NOT NULL FROM runs WHERE run_id = 'open'") == [(1,)]
    assert read(store_path, "SELECT count(*) FROM checkpoints WHERE head IS NOT NULL") == [(3,)]


async def test_two_connections_opening_an_old_store_at_once_move_it_once(
    store_path: Path,
) -> None:
    before, plain, marked = await opened_at_once_counted(store_path)
    assert (plain, marked) == (before, 4)  # each run's one marker, added once


async def test_a_next_delta_writes_one_page(tmp_path: Path) -> None:
    """A run's next deltas, each saved in one statement: fewer than 1.5 WAL frames a save
    on average (1.1 here: the marker and the checkpoint share the table's last page;
    format 0 wrote the run's row too, 2.07 frames a save here), and the run loads."""
    path = tmp_path / "runs.db"
    documents = [{"step": seq, "notes": "n" * 300} for seq in range(401)]
    async with SQLiteCheckpointer(path, snapshot_every=10**6) as store:
        await store.save("r", 0, documents[0], agent="a", status="running", phase="P")
        await store.save("r", 1, documents[1], agent="a", status="running", phase="P")
        store._wal.close()
        before = wal_size(path)
        for seq in range(2, 401):
            await store.save(
                "r",
                seq,
                documents[seq],
                agent="a",
                status="running",
                phase="P",
                base=documents[seq - 1],
                ops=[["set", ["step"], seq]],
            )
        frames = (wal_size(path) - before) / _PAGE
        assert frames / 399 < 1.5, frames / 399
        assert await store.load("r") == (400, documents[400])


@pytest.mark.parametrize("at", ["markers", "heads", "version"])
async def test_a_move_cut_short_leaves_the_old_store_as_it_was(
    store_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    """The move fails part way (a crash, the disk full): its transaction is rolled back,
    the file is format 0 as it was, byte for byte in every row, and the next open moves
    it whole."""
    before = {
        table: read(store_path, f"SELECT * FROM {table} ORDER BY rowid")
        for table in ("runs", "checkpoints")
    }
    plain = _sqlite._marked
    step = {"markers": "INSERT OR IGNORE", "heads": "UPDATE runs", "version": "PRAGMA user"}[at]

    def cut(connection: sqlite3.Connection) -> bool:
        class Cut:
            def execute(self, statement: str, *args: Any) -> Any:
                if statement.startswith(step):
                    raise sqlite3.OperationalError("database or disk is full")
                return connection.execute(statement, *args)

        return plain(Cut())  # type: ignore[arg-type]

    monkeypatch.setattr(_sqlite, "_marked", cut)
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        async with SQLiteCheckpointer(store_path) as store:
            await store.record("long")
    monkeypatch.undo()
    assert read(store_path, "PRAGMA user_version") == [(0,)]
    for table, rows in before.items():
        assert read(store_path, f"SELECT * FROM {table} ORDER BY rowid") == rows
    names = {name for (name,) in read(store_path, "SELECT name FROM sqlite_master")}
    assert {"next_delta", "next_delta_saved"} <= names
    async with SQLiteCheckpointer(store_path) as store:
        assert (await store.load("open"))[0] == 92
        assert await store.verify("long") == 123
    assert read(store_path, "SELECT count(*) FROM checkpoints WHERE head IS NOT NULL") == [(4,)]
