"""A save's shortcut for a run's next delta stores what the plain path stores (issue 23).

``_Store._next_delta`` writes checkpoint ``seq`` when it is the run's next delta, given as
ops on the document the store saved last, in the status the run has, without the frames
of ``saved_status``, ``prepare``, ``previous_head`` and ``checkpoint``. Here the same
chains of phases are saved twice, once with the shortcut and once with it turned off,
and the stores must hold the same rows byte for byte (blobs, heads, stamps) and remember
the same of the run; with snapshots between, a sealer, a store that forgot the run, and
a change of status. SQLite saves such a delta in one statement (``_save_next``, a view's
trigger that writes only while the run's row is the one the store wrote last): the same
rows again, and a row another connection changed refuses it and the plain path saves.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    CheckpointOrderError,
    MemoryCheckpointer,
    Runner,
    SQLiteCheckpointer,
    read_tool,
)
from statemachine._saving import _Saver
from statemachine.persist._base import _Store
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class Args(BaseModel):
    key: str


@read_tool
async def lookup(args: Args) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": 42}


class Clock:
    """A fixed clock that moves one second a reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 2, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Runtime:
    """What a saver reads of the run's runtime: its id and a clock that moves evenly."""

    run_id = "r"

    def __init__(self) -> None:
        self.ticks = 0

    def elapsed(self) -> float:
        self.ticks += 1
        return self.ticks / 8


class Sealer:
    """A deterministic stand-in for a cipher: the same bytes each time, bound to the aad."""

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return b"S" + hashlib.sha256(aad).digest()[:4] + plaintext

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        assert blob[:5] == b"S" + hashlib.sha256(aad).digest()[:4]
        return blob[5:]


async def phases(calls: int) -> list[Any]:
    agent = Agent[None](name="a", tools=[lookup], budget=Budget(), max_steps=10**9)
    turns = [tool_call("lookup", {"key": f"k{n}"}) for n in range(calls)] + [reply("done")]
    runner = Runner(agent, model=ScriptedModel(turns), gate=AutoDenyGate(), keep_states=True)
    return list((await runner.run(None, "go")).states)


async def save_all(
    store: _Store, states: list[Any], forget_at: int | None, hold_at: int | None
) -> list[Any]:
    """Save the phases as one run; the rows each save returned, field by field in their
    order, and the fields each says were set."""
    saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
    rows = [await saver.save(states[0], first=True)]
    for at, state in enumerate(states[1:], 1):
        if at == forget_at:
            store._chain.forget("r")  # another process, or a store that forgot the run
        if at == hold_at:  # held for a person between two saves: the row's status moves
            await store.hold("r", reason="look")
            await store.set_status("r", "running")
        rows.append(await saver.save(state))
    return [(list(vars(row).items()), sorted(row.model_fields_set)) for row in rows if row]


def sqlite_rows(path: Path) -> list[Any]:
    # closing(): a connection's own ``with`` ends a transaction, never the connection
    # (Python 3.13 warns of one left open).
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT * FROM checkpoints ORDER BY run_id, seq").fetchall()
        runs = db.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    return [rows, runs]


def memory_of(store: _Store) -> Any:
    last = store._chain.recent["r"]
    # The texts a snapshot reuses are keyed by their items' ids: compared by value.
    return (last.seq, sorted(map(repr, last.texts.values())), last.since, last.head, last.seen)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
@pytest.mark.parametrize("sealed", [False, True])
@pytest.mark.parametrize(("forget_at", "hold_at"), [(None, None), (7, 12)])
async def test_the_next_delta_s_shortcut_stores_what_the_plain_path_stores(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    sealed: bool,
    forget_at: int | None,
    hold_at: int | None,
) -> None:
    states = await phases(14)
    results: list[tuple[Any, ...]] = []
    taken: list[bool] = []
    one_statement: list[bool] = []
    plain_next: Callable[..., Any] = _Store._next_delta
    plain_save_next: Callable[..., Any] = SQLiteCheckpointer._save_next

    def counted_save_next(self: SQLiteCheckpointer, *args: Any) -> Any:
        made = plain_save_next(self, *args)
        one_statement.append(made is not None and type(made) is not datetime)
        return made

    def counted(self: _Store, *args: Any) -> Any:
        made = plain_next(self, *args)
        taken.append(made is not None)
        return made

    for shortcut in (True, False):
        if shortcut:
            monkeypatch.setattr(_Store, "_next_delta", counted)
            monkeypatch.setattr(SQLiteCheckpointer, "_save_next", counted_save_next)
        else:  # SQLite's one statement makes the next delta itself without a sealer
            monkeypatch.setattr(_Store, "_next_delta", lambda *args: None)
            monkeypatch.setattr(SQLiteCheckpointer, "_save_next", lambda *args: None)
        options: dict[str, Any] = {"snapshot_every": 5, "clock": Clock()}
        if sealed:
            options["sealer"] = Sealer()
        path = tmp_path / f"{shortcut}.db"
        store: _Store
        if kind == "sqlite":
            store = SQLiteCheckpointer(path, **options)
        else:
            store = MemoryCheckpointer(**options)
        returned = await save_all(store, states, forget_at, hold_at)
        remembered = memory_of(store)
        loaded = await store.load("r")
        await store.verify("r")
        history = [(entry.seq, entry.snapshot, entry.size) for entry in await store.history("r")]
        results.append((loaded, history, remembered, returned))
        if kind == "sqlite":
            assert isinstance(store, SQLiteCheckpointer)
            await store.aclose()
            results[-1] += (sqlite_rows(path),)
        else:
            results[-1] += ((await store.record("r")),)
    assert results[0] == results[1]
    if kind == "sqlite" and not sealed:  # _save_next's own steps (tests/test_save_fast5.py)
        taken = one_statement
    assert any(taken)  # deltas took it; snapshots and the rest did not
    assert not all(taken)
    assert sum(taken) > len(states) // 2
    if kind == "sqlite":  # in one statement, but the save after the hold (its row moved)
        assert sum(one_statement) > len(states) // 2
        assert not all(one_statement)


async def test_a_run_cancelled_meanwhile_is_saved_as_the_plain_path_saves_it(
    tmp_path: Path,
) -> None:
    """A stop from elsewhere between two saves: the next save keeps the run cancelled
    (the shortcut sees another status and leaves it to the plain path)."""
    states = await phases(3)
    async with SQLiteCheckpointer(tmp_path / "s.db", clock=Clock()) as store:
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        await saver.save(states[0], first=True)
        await saver.save(states[1])
        await store.set_status("r", "cancelled")
        record = await saver.save(states[2])
        assert record is not None
        assert record.status.value == "cancelled"
        assert (await store.load("r"))[0] == 2


async def saved_with_a_change_between(
    path: Path, states: list[Any], change: Callable[[Path], Any]
) -> tuple[list[Any], list[Any]]:
    """Save the phases as one run, ``change`` made to the file by another connection after
    the fourth save: the rows each save returned, and the file's rows."""
    async with SQLiteCheckpointer(path, clock=Clock()) as store:
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        rows = [await saver.save(states[0], first=True)]
        for at, state in enumerate(states[1:], 1):
            if at == 4:
                await change(path)
            rows.append(await saver.save(state))
    return [list(vars(row).items()) for row in rows if row], sqlite_rows(path)


async def by_another_store(path: Path) -> None:
    async with SQLiteCheckpointer(path, clock=Clock()) as other:
        await other.set_status("r", "cancelled")


def by_hand(assignment: str) -> Callable[[Path], Any]:
    """A change of the run's row by another connection, in SQL (one column set)."""

    async def change(path: Path) -> None:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(f"UPDATE runs SET {assignment} WHERE run_id = 'r'")

    return change


def by_hand_on_the_marker(assignment: str) -> Callable[[Path], Any]:
    """A change of the run's end marker (the row holding its head) by another connection."""

    async def change(path: Path) -> None:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute(f"UPDATE checkpoints SET {assignment} WHERE head IS NOT NULL")

    return change


# The end marker's head and place: a save reads them from the marker, not the run's row.
_ON_THE_MARKER = ["head = zeroblob(32)", "id = id + 1, seq = seq + 1"]
_BY_HAND = [
    "reason = 'look'",
    "failures = 2",
    "retry_at = '2026-12-02T00:00:00.000000+00:00'",
    "stop_requested = 1",
    "waiting_for = 'kim'",
    "agent = 'b'",
    "status = 'interrupted'",
    "decision = x'00'",
]


@pytest.mark.parametrize(
    "change",
    [by_another_store, *map(by_hand, _BY_HAND), *map(by_hand_on_the_marker, _ON_THE_MARKER)],
    ids=["store", *_BY_HAND, *(f"marker {change}" for change in _ON_THE_MARKER)],
)
async def test_a_row_changed_by_another_connection_is_saved_as_the_plain_path_saves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], Any]
) -> None:
    """The one-statement save trusts the row this connection wrote last only as far as the
    file still holds it: a row another connection changed (its status, its retry state,
    its end marker's head or place) refuses it, nothing is written, and the plain path
    saves (or refuses) as it does with the shortcut turned off."""
    states = await phases(6)
    refused: list[bool] = []
    plain_save_next: Callable[..., Any] = SQLiteCheckpointer._save_next

    def counted(self: SQLiteCheckpointer, *args: Any) -> Any:
        made = plain_save_next(self, *args)
        # Refused by the file (the statement ran: the moment it read is given on).
        refused.append(type(made) is datetime)
        return made

    outcomes: list[Any] = []
    for shortcut in (True, False):
        if shortcut:
            monkeypatch.setattr(SQLiteCheckpointer, "_save_next", counted)
        else:
            monkeypatch.setattr(SQLiteCheckpointer, "_save_next", lambda *args: None)
        path = tmp_path / f"{shortcut}.db"
        try:
            outcomes.append(await saved_with_a_change_between(path, states, change))
        except Exception as exc:  # the rolled back head: refused the same way
            outcomes.append((type(exc), str(exc).replace(str(path), "<path>")))
    assert outcomes[0] == outcomes[1]
    assert refused.count(True) == 1


async def test_two_stores_saving_one_run_refuse_the_second_seq(tmp_path: Path) -> None:
    """Two stores that each saved the run last (two processes): the one behind is refused
    its next seq (CheckpointOrderError) as the plain path refuses it, and the file keeps
    the other's checkpoint."""
    states = await phases(4)
    path = tmp_path / "s.db"
    async with (
        SQLiteCheckpointer(path, clock=Clock()) as first,
        SQLiteCheckpointer(path, clock=Clock()) as second,
    ):
        saver = _Saver(first, Runtime(), "a", None)  # type: ignore[arg-type]
        for at, state in enumerate(states[:4]):
            await saver.save(state, first=at == 0)
        # The second store takes the run over from its load (a resume elsewhere)...
        seq, _ = await second.load("r")
        behind = _Saver(second, Runtime(), "a", seq)  # type: ignore[arg-type]
        await behind.save(states[4])  # its first save reads the row: plain
        await behind.save(states[5])  # then in one statement
        # ...while the first still remembers the run at seq 3 and saves seq 4 again.
        with pytest.raises(CheckpointOrderError):
            await saver.save(states[4])
        assert (await first.record("r")).seq == 5
        assert (await first.load("r"))[0] == 5
        assert await first.verify("r") == 5


async def test_a_store_of_today_s_format_gets_the_one_statement_save(tmp_path: Path) -> None:
    """A file without the one-statement save's view and trigger gets them when it is
    opened, and its run's saves then take that path and load."""
    states = await phases(4)
    path = tmp_path / "s.db"
    async with SQLiteCheckpointer(path, clock=Clock()) as store:
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        for at, state in enumerate(states[:3]):
            await saver.save(state, first=at == 0)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TRIGGER next_checkpoint_saved")
        db.execute("DROP VIEW next_checkpoint")
    async with SQLiteCheckpointer(path, clock=Clock()) as store:
        seq, _ = await store.load("r")
        saver = _Saver(store, Runtime(), "a", seq)  # type: ignore[arg-type]
        await saver.save(states[3])
        before = store._wal_pages
        await saver.save(states[4])
        assert store._wal_pages > before  # saved, in one statement (no BEGIN)
        assert (await store.load("r"))[0] == seq + 2
        assert await store.verify("r") == seq + 2
    with contextlib.closing(sqlite3.connect(path)) as db:
        names = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert {"next_checkpoint", "next_checkpoint_saved"} <= names
