"""SQLite's one-statement save makes a run's next delta with ``_next_delta``'s steps in place
(issue 23).

Without a sealer, and with the run's head a link alone (32 bytes), ``_save_next`` writes
the delta's blob (its checksum, then its text) as the bytearray it binds, and its head as
``_link`` makes it, its bytes joined once, without the frames of ``_next_delta`` and
``_link`` or a second look-up of the run. Here runs are saved twice, once so and once
with both shortcuts off (the plain path: ``saved_status``, ``prepare``, ``checkpoint``,
the transaction's statements), and the files must hold the same rows byte for byte, the
stores remember the same of the run and return the same rows, and both runs load and
verify. A store with a sealer, or a head of another length, takes ``_next_delta``'s way.
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_save_fast import Clock, Runtime, Sealer, phases, sqlite_rows

from statemachine import SQLiteCheckpointer
from statemachine._saving import _Saver
from statemachine.persist._base import _Store
from statemachine.persist._chain import _link

_PHASES: dict[int, list[Any]] = {}


def phases_of(calls: int) -> list[Any]:
    """The phases of a run of ``calls`` tool calls (made once per count)."""
    if calls not in _PHASES:
        _PHASES[calls] = anyio.run(phases, calls)
    return _PHASES[calls]


class Spied:
    """Counts the deltas ``_Store._next_delta`` made and the saves ``_save_next`` made."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.next_delta = 0
        self.one_statement = 0
        plain_next: Callable[..., Any] = _Store._next_delta
        plain_save_next: Callable[..., Any] = SQLiteCheckpointer._save_next

        def next_delta(store: _Store, *args: Any) -> Any:
            made = plain_next(store, *args)
            self.next_delta += made is not None
            return made

        def save_next(store: SQLiteCheckpointer, *args: Any) -> Any:
            made = plain_save_next(store, *args)
            self.one_statement += type(made).__name__ == "RunRecord"
            return made

        monkeypatch.setattr(_Store, "_next_delta", next_delta)
        monkeypatch.setattr(SQLiteCheckpointer, "_save_next", save_next)


async def save_run(
    path: Path,
    run_id: str,
    states: list[Any],
    options: dict[str, Any],
    meddle: Callable[[SQLiteCheckpointer, int], None] | None = None,
) -> tuple[Any, ...]:
    """Save ``states`` as run ``run_id``; what the store returned, remembers and loads,
    and its rows (``meddle(store, at)`` runs before the save of ``states[at]``)."""
    runtime = Runtime()
    runtime.run_id = run_id  # type: ignore[misc]
    store = SQLiteCheckpointer(path, clock=Clock(), **options)
    saver = _Saver(store, runtime, "a", None)  # type: ignore[arg-type]
    returned = [await saver.save(states[0], first=True)]
    for at, state in enumerate(states[1:], 1):
        if meddle is not None:
            meddle(store, at)
        returned.append(await saver.save(state))
    last = store._chain.recent[run_id]
    remembered = (last.seq, sorted(map(repr, last.texts.values())), last.since, last.head)
    loaded = await store.load(run_id)
    verified = await store.verify(run_id)
    await store.aclose()
    rows = [(list(vars(row).items()), sorted(row.model_fields_set)) for row in returned if row]
    return rows, remembered, loaded, verified, sqlite_rows(path)


def off(*args: Any) -> None:
    """A shortcut turned off: the plain path saves."""


def both_ways(
    folder: Path,
    run_id: str,
    states: list[Any],
    options: dict[str, Any],
    meddle: Callable[[SQLiteCheckpointer, int], None] | None = None,
) -> tuple[tuple[Any, ...], tuple[Any, ...], Spied]:
    """The run saved with the shortcuts, then with both off (the plain path)."""
    with pytest.MonkeyPatch.context() as patch:
        spied = Spied(patch)
        fast = anyio.run(save_run, folder / "fast.db", run_id, states, options, meddle)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Store, "_next_delta", off)
        patch.setattr(SQLiteCheckpointer, "_save_next", off)
        plain = anyio.run(save_run, folder / "plain.db", run_id, states, options, meddle)
    return fast, plain, spied


run_ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=20, deadline=None)
@given(run_id=run_ids, calls=st.integers(2, 9), every=st.integers(2, 7))
def test_the_delta_made_in_place_is_the_plain_path_s(run_id: str, calls: int, every: int) -> None:
    states = phases_of(calls)
    with tempfile.TemporaryDirectory() as folder:
        fast, plain, spied = both_ways(Path(folder), run_id, states, {"snapshot_every": every})
    assert fast == plain
    assert spied.next_delta == 0  # made in place, every one
    assert spied.one_statement > 0  # the deltas (not the snapshots)
    assert spied.one_statement < len(states) - 1


def test_a_sealed_store_makes_its_deltas_the_way_of_next_delta(tmp_path: Path) -> None:
    states = phases_of(9)
    fast, plain, spied = both_ways(tmp_path, "r", states, {"snapshot_every": 4, "sealer": Sealer()})
    assert fast == plain
    assert spied.one_statement > 0
    assert spied.next_delta >= spied.one_statement


def longer_head(store: SQLiteCheckpointer, at: int) -> None:
    """Before the save of phase 5: the run's head in the file (its end marker's) and in
    the store's memory four bytes longer (as a sealer's tag makes it), so that the next
    link reads its first 32 bytes."""
    if at != 5:
        return
    last = store._chain.recent["r"]
    head = last.head + b"tag!"
    store._chain.recent["r"] = last._replace(head=head)
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        db.execute("UPDATE checkpoints SET head = ? WHERE head IS NOT NULL", (head,))
        db.commit()


def test_a_head_of_another_length_takes_next_delta_s_way(tmp_path: Path) -> None:
    states = phases_of(9)
    fast, plain, spied = both_ways(tmp_path, "r", states, {"snapshot_every": 50}, longer_head)
    assert fast == plain
    assert spied.next_delta == 1  # the save after the longer head alone


def test_the_head_in_place_is_link_s(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each delta's head, as the file holds it, is ``_link`` of its place, the head before
    and its blob's checksum (``verify`` checks it too, from seq 0)."""
    states = phases_of(6)
    with monkeypatch.context() as patch:
        spied = Spied(patch)
        anyio.run(save_run, tmp_path / "s.db", "run \u00e9\0", states, {"snapshot_every": 50})
    assert spied.next_delta == 0
    assert spied.one_statement == len(states) - 2  # not the last (the run completes)
    with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as db:
        blobs = db.execute(
            "SELECT seq, blob FROM checkpoints WHERE head IS NULL ORDER BY seq"
        ).fetchall()
        (head,) = db.execute("SELECT head FROM checkpoints WHERE head IS NOT NULL").fetchone()
    link = _link("run \u00e9\0", 0, True, bytes(32), bytes(blobs[0][1][:32]))
    for seq, blob in blobs[1:]:
        link = _link("run \u00e9\0", seq, False, link, bytes(blob[:32]))
    assert link == bytes(head)
