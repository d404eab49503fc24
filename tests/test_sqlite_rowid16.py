"""The SQLite store's checkpoints keyed by their rowid (issue 23): a checkpoint's id is its
run's number times 2**32 plus its seq, so a run's checkpoints are one range of rowids and
no (run_id, seq) index is written per save.

``tests/data/pre-rowid-runs.db`` was written by ``tests/data/make_pre_rowid_runs.py`` from
commit 161fbdc (the key (run_id, seq), no run numbers): three runs of the agent
``looker`` (a long completed one, one waiting for an approval, one sealed under
``k-old``). Opened with today's code, its checkpoints move to the rowid key once, in the
opening transaction, losing nothing; its runs load, verify and resume.
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from old_stores import KEY, looker, opened_at_once_counted, phase_of, read, resume_waiting
from old_stores import copied as _copied

from statemachine import Done, SQLiteCheckpointer
from statemachine.persist import RunRecord, _sqlite

pytestmark = pytest.mark.anyio

_LOW = 2**32 - 1
OLD_COLUMNS = "run_id, seq, kind, phase, blob, at"


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return _copied("pre-rowid-runs.db", tmp_path)


def names(path: Path) -> set[str]:
    return {name for (name,) in read(path, "SELECT name FROM sqlite_master")}


def doc(step: int) -> dict[str, Any]:
    return {"version": 1, "kind": "Planning", "fields": {"step": step, "items": list(range(step))}}


# The document each run saved last, given as the next save's base (with its ops).
saved: dict[str, dict[str, Any]] = {}


async def save_run(store: SQLiteCheckpointer, run_id: str, seqs: range, status: str) -> None:
    for seq in seqs:
        document = doc(seq)
        base = saved.get(run_id)
        ops: list[list[Any]] | None = None
        if base is not None and base == doc(seq - 1):
            ops = [["set", ["fields", "step"], seq], ["set", ["fields", "items"], list(range(seq))]]
        else:
            base = None
        await store.save(
            run_id, seq, document, agent="a", status=status, phase="Planning", base=base, ops=ops
        )
        saved[run_id] = document


async def test_the_old_store_is_as_expected(store_path: Path) -> None:
    """The file is one written before the rowid key (its key an index of its own)."""
    columns = [row[1] for row in read(store_path, "PRAGMA table_info(checkpoints)")]
    assert columns == ["run_id", "seq", "kind", "phase", "blob", "at"]
    assert "sqlite_autoindex_checkpoints_1" in names(store_path)
    runs = read(store_path, "SELECT run_id, seq FROM runs ORDER BY rowid")
    assert runs == [("long", 123), ("waiting", 39), ("sealed", 39)]


async def test_an_old_store_is_moved_to_the_rowid_key_losing_nothing(store_path: Path) -> None:
    old_rows = read(
        store_path,
        "SELECT c.run_id, c.seq, c.kind, c.phase, c.blob, c.at FROM checkpoints AS c "
        "JOIN runs USING (run_id) ORDER BY runs.rowid, c.seq",
    )
    old_runs = read(store_path, "SELECT * FROM runs ORDER BY rowid")
    history: dict[str, Any] = {}
    verified: dict[str, int] = {}
    for sealer, run_ids in ((None, ("long", "waiting")), (KEY, ("sealed",))):
        async with SQLiteCheckpointer(store_path, sealer=sealer) as store:
            for run_id in run_ids:
                history[run_id] = await store.history(run_id)
                verified[run_id] = await store.verify(run_id)
    rows = read(
        store_path, f"SELECT id, {OLD_COLUMNS} FROM checkpoints WHERE head IS NULL ORDER BY id"
    )
    assert [row[1:] for row in rows] == old_rows
    numbers = dict(read(store_path, "SELECT run_id, number FROM runs"))
    assert numbers == {"long": 1, "waiting": 2, "sealed": 3}
    assert all(row[0] == (numbers[row[1]] << 32) + row[2] for row in rows)
    # The runs' rows are as they were, with their number added and their head moved to
    # their end markers (format 1): each after its newest checkpoint, with its phase and
    # moment.
    head = [row[1] for row in read(store_path, "PRAGMA table_info(runs)")].index("head")
    assert read(store_path, "SELECT * FROM runs ORDER BY rowid") == [
        (*row[:head], None, *row[head + 1 :], numbers[row[0]]) for row in old_runs
    ]
    assert read(
        store_path,
        "SELECT id, run_id, seq, kind, phase, blob, at, head FROM checkpoints "
        "WHERE head IS NOT NULL ORDER BY id",
    ) == [
        ((numbers[run_id] << 32) + seq + 1, run_id, seq + 1, "delta", phase, b"", moment, row[head])
        for row in old_runs
        for run_id, phase, moment, seq in [(row[0], row[3], row[5], row[6])]
    ]
    assert read(store_path, "PRAGMA user_version") == [(1,)]
    assert read(store_path, "SELECT last FROM run_numbers") == [(3,)]
    assert read(store_path, "PRAGMA integrity_check") == [("ok",)]
    found = names(store_path)
    assert "checkpoints_before_rowid" not in found
    assert "checkpoints_keyed" not in found
    assert "sqlite_autoindex_checkpoints_1" not in found  # the old key's index is gone
    assert {"snapshots", "next_checkpoint", "next_checkpoint_saved", "run_numbered"} <= found
    assert "next_delta" not in found  # the one-statement save of format 0 is gone
    # Each run's history is its old rows, in order; each verifies to its last seq.
    for run_id, entries in history.items():
        mine = [row for row in old_rows if row[0] == run_id]
        assert [(e.seq, e.phase, e.snapshot, e.size, e.at) for e in entries] == [
            (seq, phase, kind == "full", len(blob), datetime.fromisoformat(at))
            for _, seq, kind, phase, blob, at in mine
        ]
        assert verified[run_id] == mine[-1][1]


async def test_the_old_runs_load_and_the_waiting_one_resumes(store_path: Path) -> None:
    async with SQLiteCheckpointer(store_path) as store:
        seq, document = await store.load("long")
    async with SQLiteCheckpointer(store_path, sealer=KEY) as store:
        _, sealed = await store.load("sealed")
    final = phase_of(dict(document), looker(), "long")
    assert isinstance(final, Done)
    assert seq == 123
    assert len(final.loop.actions) == 40
    assert [a.outcome for a in final.loop.actions] == ["ok"] * 40
    assert isinstance(phase_of(dict(sealed), looker(), "sealed"), Done)
    resumed, seq, document, verified = await resume_waiting(store_path)
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert seq == verified > 39
    assert phase_of(document, looker(), "waiting") == resumed.final
    # The resumed run's new checkpoints are in its own range, after its old ones.
    ids = read(store_path, "SELECT id, seq FROM checkpoints WHERE run_id = 'waiting' ORDER BY id")
    assert [row[1] for row in ids] == list(range(seq + 2))  # and its end marker
    assert all(row[0] == (2 << 32) + row[1] for row in ids)


async def test_two_connections_opening_an_old_store_at_once_move_it_once(
    store_path: Path,
) -> None:
    before, plain, marked = await opened_at_once_counted(store_path)
    assert (plain, marked) == (before, 3)  # the rows kept, each run's marker added once
    assert read(store_path, "SELECT count(*) FROM checkpoints WHERE id IS NULL") == [(0,)]
    assert read(store_path, "SELECT last FROM run_numbers") == [(3,)]


async def test_new_runs_take_new_numbers_never_given_again(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    now = datetime(2026, 12, 1, tzinfo=UTC)
    async with SQLiteCheckpointer(path, snapshot_every=3, clock=lambda: now) as store:
        await save_run(store, "a", range(7), "running")
        await save_run(store, "b", range(2), "completed")
        await save_run(store, "c", range(5), "running")
        await save_run(store, "a", range(7, 9), "running")
        assert [e.seq for e in await store.history("a")] == list(range(9))
        assert (await store.load("a")) == (8, doc(8))
        assert (await store.load("b")) == (1, doc(1))
        assert (await store.load("c")) == (4, doc(4))
        assert await store.purge(timedelta(0), now=now + timedelta(days=1)) == 1
        assert read(path, "SELECT count(*) FROM checkpoints WHERE run_id = 'b'") == [(0,)]
        await save_run(store, "d", range(3), "running")
        assert (await store.load("d")) == (2, doc(2))
        assert (await store.load("a")) == (8, doc(8))
        assert await store.verify("c") == 4
        # A load reads from the run's last snapshot on (one rowid range).
        assert [row.seq for row in store._chain_rows("a")] == [6, 7, 8]
        assert store._chain_rows("a")[0].snapshot
        assert {run_id: store._numbers[run_id] for run_id in "acd"} == {"a": 1, "c": 3, "d": 4}
        # A number kept out of date (here another run's) is refused by the next delta's
        # trigger: the plain path saves it in the run's own range.
        await save_run(store, "a", range(9, 10), "running")  # its row read again
        returned: list[object] = []
        original = store._save_next

        def spy(*args: Any) -> Any:
            returned.append(original(*args))
            return returned[-1]

        store._save_next = spy  # type: ignore[method-assign,assignment]
        store._numbers["a"] = 3
        await save_run(store, "a", range(10, 11), "running")
        assert [type(result) for result in returned] == [datetime]  # refused by the file
        assert (await store.load("a")) == (10, doc(10))
        assert [e.seq for e in await store.history("c")] == list(range(5))
        assert store._numbers["a"] == 1
        # With the number known, the next delta is saved in one statement.
        # (a snapshot, every third save here, goes the plain way)
        await save_run(store, "a", range(11, 14), "running")
        assert RunRecord in {type(result) for result in returned[1:]}
        assert (await store.load("a")) == (13, doc(13))
    numbers = dict(read(path, "SELECT run_id, number FROM runs"))
    assert numbers == {"a": 1, "c": 3, "d": 4}  # b's number is not given again
    rows = read(path, "SELECT id, run_id, seq FROM checkpoints WHERE head IS NULL ORDER BY id")
    assert all(i == (numbers[r] << 32) + s for i, r, s in rows)
    assert [(r, s) for _, r, s in rows] == sorted((r, s) for _, r, s in rows)


async def test_a_seq_beyond_32_bits_is_refused_and_nothing_written(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as store:
        await save_run(store, "a", range(2), "running")
        with pytest.raises(Exception):  # noqa: B017, PT011 - refused by the table's CHECK
            await store.save("a", 2**32, doc(2), agent="a", status="running", phase="P")
        assert (await store.load("a")) == (1, doc(1))
    assert read(path, "SELECT max(seq) FROM checkpoints WHERE head IS NULL") == [(1,)]


OLD_SCHEMA = """
CREATE TABLE runs (run_id TEXT PRIMARY KEY, agent TEXT NOT NULL, status TEXT NOT NULL,
    phase TEXT NOT NULL, waiting_for TEXT NOT NULL, updated_at TEXT NOT NULL,
    seq INTEGER NOT NULL);
CREATE TABLE checkpoints (run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
    phase TEXT NOT NULL, blob BLOB NOT NULL, PRIMARY KEY (run_id, seq));
"""


async def test_rows_of_no_run_are_kept_aside_not_dropped(tmp_path: Path) -> None:
    """A first-release file (no at, no head): rows of a run with no row of its own, or
    with a seq beyond 32 bits, are kept in the old table, renamed; the others move."""
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as writer:
        await save_run(writer, "r", range(3), "running")
    blobs = read(path, "SELECT seq, kind, blob FROM checkpoints WHERE head IS NULL ORDER BY seq")
    with contextlib.closing(sqlite3.connect(path)) as old, old:
        old.executescript(
            "DROP VIEW next_checkpoint; DROP TABLE runs; DROP TABLE checkpoints; "
            "PRAGMA user_version = 0;"
        )
        old.executescript("DROP TABLE run_numbers;" + OLD_SCHEMA)
        old.execute(
            "INSERT INTO runs VALUES ('r', 'a', 'running', 'Planning', '', ?, 2)",
            ("2026-01-01T00:00:00.000000+00:00",),
        )
        for seq, kind, blob in blobs:
            old.execute(
                "INSERT INTO checkpoints VALUES ('r', ?, ?, 'Planning', ?)", (seq, kind, blob)
            )
            old.execute(
                "INSERT INTO checkpoints VALUES ('gone', ?, ?, 'Planning', ?)", (seq, kind, blob)
            )
        old.execute("INSERT INTO checkpoints VALUES ('r', ?, 'delta', 'P', x'00')", (2**32,))
    async with SQLiteCheckpointer(path) as store:
        assert (await store.load("r")) == (2, doc(2))
        assert await store.verify("r") == 2
        await save_run(store, "r", range(3, 5), "running")
        assert (await store.load("r")) == (4, doc(4))
    kept = read(path, "SELECT run_id, seq FROM checkpoints_before_rowid ORDER BY run_id, seq")
    assert kept == [("gone", 0), ("gone", 1), ("gone", 2), ("r", 2**32)]
    moved = read(path, "SELECT id, run_id, seq FROM checkpoints ORDER BY id")
    assert moved == [((1 << 32) + seq, "r", seq) for seq in range(6)]  # 5: its end marker


async def test_a_run_s_queries_read_one_rowid_range() -> None:
    """Every read of a run's checkpoints searches the rowid range, not the table."""
    db = sqlite3.connect(":memory:")
    db.executescript(_sqlite._SCHEMA)
    _sqlite._upgrade(db)
    for statement in _sqlite._SAVE_NEXT_SCHEMA:
        db.execute(statement)
    for where in (_sqlite._RANGE,):
        plan = db.execute(
            f"EXPLAIN QUERY PLAN SELECT seq FROM checkpoints WHERE {where}", {"run_id": "x"}
        ).fetchall()
        assert "USING INTEGER PRIMARY KEY" in str(plan)
        assert "SCAN checkpoints" not in str(plan)
    # A run's end marker: one seek into its range, for each run read.
    plan = str(
        db.execute(
            f"EXPLAIN QUERY PLAN SELECT m.head FROM {_sqlite._RUN_ROWS} WHERE runs.run_id = ?",
            ("x",),
        ).fetchall()
    )
    assert "SCAN checkpoints" not in plan
    assert "SCAN m" not in plan
    # A plain save's removal of the marker, and purge's reading of the ended runs.
    for statement, values in (
        (_sqlite._MARKER_GONE, ("x",)),
        (_sqlite._ENDED_BEFORE, ("", "")),
    ):
        plan = str(db.execute(f"EXPLAIN QUERY PLAN {statement}", values).fetchall())
        assert "SCAN" not in plan, plan
    assert [row[1] for row in db.execute("PRAGMA index_list(checkpoints)")] == ["snapshots"]
    db.close()


async def test_an_insert_that_does_not_keep_the_key_together_is_refused(tmp_path: Path) -> None:
    """An earlier version's insert (no number: its rowid would be the table's next one,
    in another run's range) and an id that is not number * 2**32 + seq are refused."""
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as store:
        await save_run(store, "a", range(2), "running")
        await save_run(store, "b", range(2), "running")
    with contextlib.closing(sqlite3.connect(path)) as db:
        for sql in (
            "INSERT INTO checkpoints (run_id, seq, kind, phase, blob, at) "
            "VALUES ('a', 2, 'delta', 'P', x'00', '')",
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob) "
            "VALUES ((2 << 32) + 2, 1, 'a', 2, 'delta', 'P', x'00')",
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob) "
            "VALUES ((1 << 32) + 3, 1, 'a', 2, 'delta', 'P', x'00')",
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob) "
            "VALUES (2, 0, 'a', 2, 'delta', 'P', x'00')",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                db.execute(sql)
    assert read(path, "SELECT count(*) FROM checkpoints WHERE head IS NULL") == [(4,)]
