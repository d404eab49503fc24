"""A SQLite store's stamps and its one-statement save's memory, made in fewer steps (issue 23).

``_sqlite._stamp`` keeps the second it last stamped as its first and last moment and its
text, and makes the microseconds' six digits from two looked-up texts of three: every
moment, in any order, must give ``moment.astimezone(UTC).isoformat(timespec=
"microseconds")`` (a subclass's own ``isoformat``), as the plain way did. ``_save_next``
remembers the run and counts the WAL's pages in its own frame: a store whose saves take
it must remember the same runs in the same order, forget the same loaded documents and
count the same pages as one whose saves take the plain path.
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_save_fast import Clock, phases

from statemachine import SQLiteCheckpointer
from statemachine._saving import _Saver
from statemachine.persist import _chain, _sqlite


def plain_stamp(moment: datetime) -> str:
    moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")


class Moment(datetime):
    """A datetime subclass with an isoformat of its own."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return "mine " + super().isoformat(sep, timespec)


_BASE = datetime(2026, 12, 3, 19, 59, 58, tzinfo=UTC)
# Moments around a few seconds' edges (the first and last microsecond of each).
near = st.builds(
    lambda seconds, micro: _BASE + timedelta(seconds=seconds, microseconds=micro),
    st.integers(-2, 3),
    st.one_of(st.sampled_from([0, 1, 999, 1000, 999_000, 999_999]), st.integers(0, 999_999)),
)
zones = st.sampled_from([UTC, timezone(timedelta(0)), timezone(timedelta(hours=2)), timezone.min])
moments = st.one_of(
    near,
    near.map(lambda moment: moment.replace(fold=1)),
    st.tuples(near, zones).map(lambda pair: pair[0].astimezone(pair[1])),
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(timezones=zones),
    near.map(
        lambda moment: Moment(
            moment.year,
            moment.month,
            moment.day,
            moment.hour,
            moment.minute,
            moment.second,
            moment.microsecond,
            moment.tzinfo,
        )
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(moments, min_size=1, max_size=30))
def test_a_stamp_is_the_moment_s_isoformat_in_utc_in_any_order(
    stamped: list[datetime],
) -> None:
    for moment in stamped:
        expected = (
            moment.astimezone(UTC).isoformat(timespec="microseconds")
            if type(moment.astimezone(UTC)) is not datetime
            else plain_stamp(moment)
        )
        assert _sqlite._stamp(moment) == expected
        first, last, text = _sqlite._second
        if first <= last:  # the second kept is the one its text says
            assert text == first.isoformat(timespec="seconds")[:19] + "."
            assert last == first.replace(microsecond=999_999)
            assert first.microsecond == 0


def test_the_edges_of_a_second() -> None:
    for start in (_BASE, datetime.min.replace(tzinfo=UTC), datetime.max.replace(tzinfo=UTC)):
        for micro in (0, 1, 999, 1000, 123_456, 999_000, 999_999):
            for delta in (timedelta(0), timedelta(seconds=-1), timedelta(seconds=1)):
                with contextlib.suppress(OverflowError):
                    moment = start.replace(microsecond=micro) + delta
                    assert _sqlite._stamp(moment) == plain_stamp(moment)
    # The last moment of a second, then the first of the next, then back.
    for moment in (
        _BASE.replace(microsecond=999_999),
        _BASE + timedelta(seconds=1),
        _BASE,
        _BASE + timedelta(seconds=1, microseconds=999_999),
        _BASE + timedelta(seconds=2),
    ):
        assert _sqlite._stamp(moment) == plain_stamp(moment)


# -- the one-statement save's memory ------------------------------------------------------

_STATES: list[Any] = []


def states() -> list[Any]:
    if not _STATES:
        _STATES.extend(anyio.run(phases, 8))
    return _STATES


class Runtime:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.ticks = 0

    def elapsed(self) -> float:
        self.ticks += 1
        return self.ticks / 8


def memory(store: SQLiteCheckpointer) -> Any:
    chain = store._chain
    return (
        [(run_id, last.seq, last.head, last.since) for run_id, last in chain.recent.items()],
        list(chain.loaded),
        store._wal_pages,
    )


async def run_steps(path: Path, steps: list[tuple[int, bool]], shortcut: bool) -> list[Any]:
    seen: list[Any] = []
    async with SQLiteCheckpointer(path, snapshot_every=4, clock=Clock()) as store:
        savers: dict[int, tuple[_Saver, list[Any]]] = {}
        for run, load in steps:
            name = f"r{run}"
            if load and run in savers:
                await store.load(name)
            elif run not in savers:
                saver = _Saver(store, Runtime(name), "a", None)  # type: ignore[arg-type]
                left = list(states())
                savers[run] = (saver, left)
                await saver.save(left.pop(0), first=True)
            else:
                saver, left = savers[run]
                if left:
                    await saver.save(left.pop(0))
            seen.append(memory(store))
    with contextlib.closing(sqlite3.connect(path)) as db:
        seen.append(db.execute("SELECT * FROM checkpoints ORDER BY run_id, seq").fetchall())
        seen.append(db.execute("SELECT * FROM runs ORDER BY run_id").fetchall())
    return seen


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=5, max_size=40))
def test_the_one_statement_save_remembers_what_the_plain_path_remembers(
    steps: list[tuple[int, bool]],
) -> None:
    plain_save_next = _sqlite.SQLiteCheckpointer._save_next

    def counted(self: SQLiteCheckpointer, *args: Any) -> Any:
        return plain_save_next(self, *args)

    states()  # made before any run's event loop
    results = []
    with pytest.MonkeyPatch.context() as patch:
        # Three runs remembered: the runs come and go from the store's memory.
        patch.setattr(_sqlite, "_RECENT_RUNS", 3)
        patch.setattr(_chain, "_RECENT_RUNS", 3)
        with tempfile.TemporaryDirectory() as tmp:
            for shortcut in (True, False):
                patch.setattr(
                    SQLiteCheckpointer, "_save_next", counted if shortcut else lambda *args: None
                )
                path = Path(tmp) / f"{shortcut}.db"
                results.append(anyio.run(run_steps, path, steps, shortcut))
    assert results[0] == results[1]


def test_the_one_statement_save_is_taken_among_runs_that_come_and_go() -> None:
    rng = random.Random(7)
    steps = [(rng.randrange(5), rng.random() < 0.2) for _ in range(60)]
    taken: list[bool] = []
    plain_save_next = _sqlite.SQLiteCheckpointer._save_next

    def counted(self: SQLiteCheckpointer, *args: Any) -> Any:
        made = plain_save_next(self, *args)
        taken.append(type(made).__name__ == "RunRecord")
        return made

    states()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_sqlite, "_RECENT_RUNS", 3)
        patch.setattr(_chain, "_RECENT_RUNS", 3)
        patch.setattr(SQLiteCheckpointer, "_save_next", counted)
        with tempfile.TemporaryDirectory() as tmp:
            anyio.run(run_steps, Path(tmp) / "s.db", steps, True)
    assert any(taken)
    assert not all(taken)
