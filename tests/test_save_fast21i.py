"""A saver hands its SQLite store a delta without the store's ``save`` coroutine, and
sets the clock's reading in the dumper's own document (issue 23).

For exactly ``SQLiteCheckpointer`` (``_Saver._direct``), when what the store's ``save``
reads as the drive begins is ``_Store.save`` bound to that very store,
``_Saver.save`` runs ``_Store.save``'s steps in its own frame: the change made as
``save`` makes it, the save run at once (``_save_now``) or else in the store's thread
(``_call`` of ``_save``). Here runs are saved that way and through ``save`` (a subclass
of the store, which the saver awaits as any other class): the same rows returned, the
same rows stored, the same memory, the same errors; a save put anywhere before the
drive (the object, the class, another store's) is called for every checkpoint. The
document saved is the dumper's, with ``elapsed`` set in it: the very keys, values and
order of ``{**dump_phase(phase), "elapsed": ...}``, and no document saved before changes.
"""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_save_fast import Clock, Runtime, sqlite_rows
from test_save_fast5 import phases_of

from statemachine import CheckpointOrderError, MemoryCheckpointer, SQLiteCheckpointer
from statemachine._saving import _Saver
from statemachine.persist._codec import dump_phase


class Awaited(SQLiteCheckpointer):
    """The store itself, as a subclass: the saver awaits its ``save``; counts the calls."""

    saves = 0

    async def save(self, *args: Any, **kwargs: Any) -> Any:
        type(self).saves += 1
        return await super().save(*args, **kwargs)


class Odd(Runtime):
    """A runtime whose clock reads ``reading`` at its ``at``-th reading."""

    def __init__(self, at: int, reading: float) -> None:
        super().__init__()
        self.at, self.reading = at, reading

    def elapsed(self) -> float:
        value = super().elapsed()
        return self.reading if self.ticks == self.at else value


async def saved(
    cls: type[SQLiteCheckpointer],
    path: Path,
    states: list[Any],
    runtime: Runtime,
    thread_at: set[int],
) -> tuple[Any, ...]:
    """The run saved by a saver on a store of ``cls``; the rows it returned (or the error
    that ended it), the store's memory of it, and its stored rows. At the saves in
    ``thread_at`` the store cannot save at once (its thread saves)."""
    store = cls(path, clock=Clock(), snapshot_every=5)
    saver = _Saver(store, runtime, "a", None)  # type: ignore[arg-type]
    assert (saver._direct is not None) is (cls is SQLiteCheckpointer)
    plain_now = store._save_now
    returned: list[Any] = []
    try:
        for at, state in enumerate(states):
            store._save_now = (  # type: ignore[method-assign]
                (lambda *args: None) if at in thread_at else plain_now
            )
            row = await saver.save(state, first=at == 0)
            assert row is not None
            returned.append((list(vars(row).items()), sorted(row.model_fields_set)))
    except Exception as error:  # the same error either way is the point
        returned.append((type(error), str(error)))
    last = store._chain.recent.get("r")
    remembered = None if last is None else (last.seq, last.since, last.head)
    await store.aclose()
    return returned, remembered, sqlite_rows(path)


def both_ways(states: list[Any], make: Any, thread_at: set[int]) -> tuple[Any, Any]:
    with tempfile.TemporaryDirectory() as folder:
        direct = anyio.run(
            saved, SQLiteCheckpointer, Path(folder) / "d.db", states, make(), thread_at
        )
        awaited = anyio.run(saved, Awaited, Path(folder) / "a.db", states, make(), thread_at)
    return direct, awaited


@pytest.mark.parametrize("calls", [1, 4, 12])
@pytest.mark.parametrize("thread_at", [set(), {2, 3}, {5, 9, 10, 11}])
def test_a_run_saved_directly_is_the_run_saved_through_save(
    calls: int, thread_at: set[int]
) -> None:
    states = phases_of(calls)
    Awaited.saves = 0
    direct, awaited = both_ways(states, Runtime, thread_at)
    assert direct == awaited
    assert len(direct[0]) == len(states)
    assert Awaited.saves == len(states)  # a subclass's save: every checkpoint


@pytest.mark.parametrize("reading", [math.inf, -math.inf, math.nan, 2.5, 10**30])
@pytest.mark.parametrize("at", [1, 4, 7])
def test_an_odd_clock_reading_is_saved_or_refused_as_through_save(at: int, reading: float) -> None:
    states = phases_of(4)
    direct, awaited = both_ways(states, lambda: Odd(at, reading), set())
    assert direct == awaited


def test_an_error_of_the_store_is_raised_and_the_next_save_starts_afresh() -> None:
    states = phases_of(3)

    async def go(cls: type[SQLiteCheckpointer], path: Path) -> list[Any]:
        store = cls(path, clock=Clock())
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        out: list[Any] = []
        await saver.save(states[0], first=True)
        await saver.save(states[1])
        saver._seq = 5  # not the run's next: CheckpointOrderError, nothing saved
        with pytest.raises(CheckpointOrderError) as raised:
            await saver.save(states[2])
        out.append(str(raised.value))
        assert saver._saved is None
        assert saver._dumper is not None
        assert saver._dumper._document is None  # forgotten: the next dump is whole
        saver._seq = 1
        row = await saver.save(states[3])
        out.append(list(vars(row).items()))
        await store.aclose()
        out.append(sqlite_rows(path))
        return out

    with tempfile.TemporaryDirectory() as folder:
        direct = anyio.run(go, SQLiteCheckpointer, Path(folder) / "d.db")
        awaited = anyio.run(go, Awaited, Path(folder) / "a.db")
    assert direct == awaited


def test_only_the_sqlite_store_itself_is_saved_directly(tmp_path: Path) -> None:
    for store, direct in (
        (SQLiteCheckpointer(tmp_path / "a.db"), True),
        (Awaited(tmp_path / "b.db"), False),
        (MemoryCheckpointer(), False),
        (None, False),
    ):
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        assert (saver._direct is not None) is direct


@pytest.mark.parametrize("where", ["object", "class"])
def test_a_save_replaced_on_the_store_or_its_class_is_called(
    where: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    states = phases_of(3)
    called: list[int] = []

    async def go() -> None:
        store = SQLiteCheckpointer(tmp_path / "s.db", clock=Clock())
        plain = SQLiteCheckpointer.save

        async def save(*args: Any, **kwargs: Any) -> Any:
            called.append(args[-2])  # the seq
            if where == "object":
                return await plain(store, *args, **kwargs)
            return await plain(*args, **kwargs)

        if where == "object":
            store.save = save  # type: ignore[method-assign]
        else:
            monkeypatch.setattr(SQLiteCheckpointer, "save", save)
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        assert saver._direct is None
        for at, state in enumerate(states):
            await saver.save(state, first=at == 0)
        await store.aclose()

    anyio.run(go)
    assert called == list(range(len(states)))


def test_another_stores_save_put_on_the_store_saves_there(tmp_path: Path) -> None:
    states = phases_of(3)

    async def go() -> tuple[Any, Any]:
        store = SQLiteCheckpointer(tmp_path / "s.db", clock=Clock())
        other = SQLiteCheckpointer(tmp_path / "o.db", clock=Clock())
        store.save = other.save  # type: ignore[method-assign]
        saver = _Saver(store, Runtime(), "a", None)  # type: ignore[arg-type]
        for at, state in enumerate(states):
            await saver.save(state, first=at == 0)
        mine, theirs = store._chain.recent.get("r"), other._chain.recent.get("r")
        await store.aclose()
        await other.aclose()
        return mine, theirs

    mine, theirs = anyio.run(go)
    assert mine is None
    assert theirs is not None
    assert theirs.seq == len(states) - 1
    assert len(sqlite_rows(tmp_path / "o.db")[0]) > 0


@pytest.mark.parametrize("store_of", ["sqlite", "awaited", "memory"])
def test_the_document_saved_is_the_dump_with_elapsed_last_and_none_changes_after(
    store_of: str, tmp_path: Path
) -> None:
    states = phases_of(6)

    async def go() -> None:
        store: Any = {
            "sqlite": lambda: SQLiteCheckpointer(tmp_path / "s.db", clock=Clock()),
            "awaited": lambda: Awaited(tmp_path / "a.db", clock=Clock()),
            "memory": MemoryCheckpointer,
        }[store_of]()
        runtime = Runtime()
        saver = _Saver(store, runtime, "a", None)
        kept: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for at, state in enumerate(states):
            await saver.save(state, first=at == 0)
            document = saver._saved
            assert document is not None
            expected = {**dump_phase(state), "elapsed": round(runtime.ticks / 8, 6)}
            assert document == expected
            assert list(document) == list(expected)
            assert list(document)[-1] == "elapsed"
            kept.append((document, copy.deepcopy(document)))
        for document, then in kept:  # none changed by the saves after it
            assert document == then
            assert list(document) == list(then)
        if store_of != "memory":
            await store.aclose()

    anyio.run(go)
