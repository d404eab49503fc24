"""The run's end marker is the end of its chain even when its saves took the
one-statement path (issue 23).

SQLite saves a run's next delta in one statement (``SQLiteCheckpointer._save_next``), which
turns the run's end marker (the row after its newest checkpoint, the only one holding its
head) into the checkpoint and inserts the next marker. The marker is the chain's end as
recorded apart from the checkpoints: a load and ``verify`` compare the rows with its
head, so checkpoints removed from the end of a run (one row or several, with the marker,
which leaves the run without a head, or with the marker put back after the last row
left, holding the head it held) are refused, with a key or without. A save that wrote
the checkpoint alone, with the run's seq and head read from its latest checkpoint, would
lose this: the rows left would be a whole, shorter chain ending at a head the file holds.
Here every save after the first runs through the one statement, as a runner's do.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support import one_statement_saves
from test_save_fast import Clock, Runtime, lookup

from statemachine import (
    Agent,
    Budget,
    CheckpointCipher,
    CheckpointTamperedError,
    Runner,
    SQLiteCheckpointer,
    generate_key,
)
from statemachine._saving import _Saver
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

STATES = 14  # saved: checkpoints 0..13


async def phases() -> list[Any]:
    """A run's phases (its first STATES are all running)."""
    agent = Agent[None](name="a", tools=[lookup], budget=Budget(), max_steps=10**9)
    turns = [tool_call("lookup", {"key": f"k{n}"}) for n in range(STATES)] + [reply("done")]
    runner = Runner(agent, model=ScriptedModel(turns), gate=AutoDenyGate(), keep_states=True)
    states = list((await runner.run(None, "go")).states)
    assert len(states) > STATES
    return states


async def saved_run(
    path: Path, sealer: CheckpointCipher | None, monkeypatch: pytest.MonkeyPatch
) -> list[bool]:
    """Save STATES phases as run ``r``; whether each save that tried the one statement made it."""
    states = await phases()
    one_statement = one_statement_saves(monkeypatch)
    async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=50, clock=Clock()) as store:
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        for at, state in enumerate(states[:STATES]):
            await saver.save(state, first=at == 0)
        assert (await store.record("r")).status == "running"
    monkeypatch.undo()
    return one_statement


def marker_head(path: Path) -> bytes:
    with contextlib.closing(sqlite3.connect(path)) as db:
        (head,) = db.execute("SELECT head FROM checkpoints WHERE head IS NOT NULL").fetchone()
    return bytes(head)


def sql(path: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        for statement, values in statements:
            db.execute(statement, values)


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("removed", [1, 2, 3])
@pytest.mark.parametrize("lowered", [False, True], ids=["marker-removed", "marker-lowered"])
async def test_checkpoints_removed_from_the_end_of_a_one_statement_run_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed: bool, removed: int, lowered: bool
) -> None:
    """The last ``removed`` checkpoints of a run saved in one statement each, deleted from
    the file with its end marker (and the marker put back after the last row left, or
    not), are refused by a load and by ``verify``; the whole run loads before."""
    sealer = CheckpointCipher({"k1": generate_key()}, "k1") if sealed else None
    path = tmp_path / "runs.db"
    made = await saved_run(path, sealer, monkeypatch)
    # The last saves (every one removed here) were made in one statement.
    assert made[-3:] == [True, True, True], made
    last = STATES - 1
    async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=50) as store:
        assert (await store.load("r"))[0] == last
        assert await store.verify("r") == last
    damage = [("DELETE FROM checkpoints WHERE run_id = 'r' AND seq > ?", (last - removed,))]
    if lowered:
        damage.append(
            (
                "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head) "
                "SELECT (number << 32) + ?, number, 'r', ?, 'delta', 'P', x'', '', ? "
                "FROM runs WHERE run_id = 'r'",
                (last - removed + 1, last - removed + 1, marker_head(path)),
            )
        )
    sql(path, *damage)
    async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=50) as store:
        with pytest.raises(CheckpointTamperedError) as caught:
            await store.load("r")
        assert caught.value.run_id == "r"
        with pytest.raises(CheckpointTamperedError):
            await store.verify("r")
