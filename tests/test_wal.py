"""SQLite's WAL is copied back into the file by a thread of the checkpointer's own.

A save commits to the WAL only; the checkpoint (which waits for the disk) runs in a
thread with a connection of its own once about ``_WAL_PAGES`` pages were written, so
no save pays for it, and the WAL stays bounded.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import statemachine.persist._sqlite as store_module
from statemachine import SQLiteCheckpointer

pytestmark = pytest.mark.anyio

PAGE = 4096


def document(step: int) -> dict[str, Any]:
    # About two pages of text that changes at every step, so each save writes them.
    return {"step": step, "notes": [f"note {step} {n} " + "x" * 400 for n in range(20)]}


async def save_steps(store: SQLiteCheckpointer, run_id: str, steps: range) -> None:
    for step in steps:
        await store.save(run_id, step, document(step), agent="a", status="running", phase="P")


def wal_bytes(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size if wal.exists() else 0


async def test_saves_leave_the_checkpoint_to_the_thread_and_the_wal_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the thread's copy awaited, the WAL is reused from its start: it never grows.

    The thread runs when the machine lets it, so a test that races it measures the
    machine's load. Here each started copy is waited for before the save returns, and
    a lagging thread is made by holding it back: both orders are then fixed. Without
    the copies, 400 saves fill about 2,900 pages.
    """
    monkeypatch.setattr(store_module, "_WAL_PAGES", 100)
    path = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(path, snapshot_every=10**6) as store:
        await save_steps(store, "r", range(1))
        (autocheckpoint,) = store._db.execute("PRAGMA wal_autocheckpoint").fetchone()
        assert autocheckpoint == 0  # no commit copies the WAL back itself
        wal, start = store._wal, store._wal.start
        waiting = True

        def start_and_wait() -> None:
            start()
            if waiting and wal._thread is not None:
                wal._thread.join()

        monkeypatch.setattr(wal, "start", start_and_wait)
        sizes = []
        for step in range(1, 200):
            await save_steps(store, "r", range(step, step + 1))
            sizes.append(wal_bytes(path))
        assert wal.done >= 10
        assert wal.failed is None
        # The WAL holds what is written between two copies (about _WAL_PAGES pages and
        # one save), and from the first copy on every save writes it from its start.
        first = sizes.index(max(sizes))
        assert first < 50
        assert max(sizes) <= 2 * 100 * PAGE
        assert sizes[first:] == [max(sizes)] * (len(sizes) - first)

        # A thread that lags: held back, the copy waits while 50 saves (about 350
        # pages) grow the WAL; let go, it copies them all, and the WAL, longer now, is
        # again reused from its start.
        waiting = False
        done = wal.done
        with wal._running:
            await save_steps(store, "r", range(200, 250))
            assert wal.done == done
        lagged = wal_bytes(path)
        assert lagged > max(sizes)
        assert wal._thread is not None
        wal._thread.join()
        assert (wal.done, wal.failed) == (done + 1, None)
        waiting = True
        for step in range(250, 400):
            await save_steps(store, "r", range(step, step + 1))
            assert wal_bytes(path) == lagged
        seq, loaded = await store.load("r")
        assert (seq, loaded) == (399, document(399))
    assert wal_bytes(path) == 0  # the last connection to close copied the rest back


async def test_a_checkpoint_that_fails_loses_nothing_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_WAL_PAGES", 50)
    path = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(path) as store:
        await save_steps(store, "r", range(1))  # the store's own connection is open

        def refuse(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            raise sqlite3.OperationalError("disk I/O error")

        with monkeypatch.context() as patched:
            patched.setattr(sqlite3, "connect", refuse)
            await save_steps(store, "r", range(1, 60))
            store._wal.close()
        assert store._wal.done >= 1
        assert isinstance(store._wal.failed, sqlite3.OperationalError)
        assert (await store.load("r")) == (59, document(59))

        done = store._wal.done
        await save_steps(store, "r", range(60, 120))
        store._wal.close()
        assert store._wal.done > done
        assert store._wal.failed is None
    with closing(sqlite3.connect(path)) as reader:
        (count,) = reader.execute(  # the checkpoints, not the run's end marker
            "SELECT count(*) FROM checkpoints WHERE head IS NULL"
        ).fetchone()
    assert count == 120


async def test_the_checkpoint_thread_is_gone_after_aclose_and_comes_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "_WAL_PAGES", 20)
    path = tmp_path / "runs.sqlite3"
    store = SQLiteCheckpointer(path)
    await save_steps(store, "r", range(30))
    await store.aclose()
    assert store._wal._thread is None
    assert store._wal._connection is None
    done = store._wal.done
    assert done >= 1
    await save_steps(store, "r", range(30, 60))  # the store opens again
    await store.aclose()
    assert store._wal.done > done
    assert (await store.load("r")) == (59, document(59))
    await store.aclose()
