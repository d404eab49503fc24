"""The snapshot cadence of round 11, and a load's rows made with fewer steps (issue 23).

After a compressed snapshot of less than ``_SPAN_BELOW`` the deltas now add up to three
times its stored size before the next (twice before): a run saved under the rule before
loads, verifies and goes on under the new one, which it reads from the stored snapshot.
``_chain_rows`` makes each ``_Row`` as its ``__new__`` does, without that frame: the same
rows as ``_Row(...)`` makes.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import SQLiteCheckpointer
from statemachine.persist import _chain
from statemachine.persist._chain import _COMPRESSED_SPAN, _SPAN_BELOW, _Chain
from statemachine.persist._rows import _DIGEST, _EPOCH, _Row, _system_clock


def chain() -> _Chain:
    return _Chain(snapshot_every=50, sealer=None, clock=_system_clock, where="a test store")


class Sealer:
    """A stand-in for a cipher (only its presence matters to ``span``)."""

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return plaintext

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        return blob


class Clock:
    """A fixed clock that moves one second a reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def grown(step: int) -> dict[str, Any]:
    """A run's document at ``step``: a log of long texts that compress little, and a note."""
    return {"step": step, "log": [_entry(n) for n in range(step)], "note": f"at {step}"}


def _entry(n: int) -> str:
    """A long text (1,285 characters) of hex digits, about half of it left by zlib."""
    return f"{n:04d} " + "".join(hashlib.sha256(f"{n}:{k}".encode()).hexdigest() for k in range(20))


async def save_until(store: SQLiteCheckpointer, start: int, stop: int) -> None:
    document = grown(max(start - 1, 0))
    for seq in range(start, stop):
        base, document = document, grown(seq)
        if seq:
            document["log"][: seq - 1] = base["log"]
            ops: list[list[Any]] | None = [
                ["set", ["step"], seq],
                ["set", ["note"], document["note"]],
                ["append", ["log"], [document["log"][-1]]],
            ]
            await store.save(
                "r", seq, document, agent="a", status="running", phase="P", base=base, ops=ops
            )
        else:
            await store.save("r", seq, document, agent="a", status="running", phase="P")


def stored_rows(path: Path) -> list[tuple[int, bool, bytes]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(  # the checkpoints, not the run's end marker
            "SELECT seq, kind, blob FROM checkpoints WHERE head IS NULL ORDER BY seq"
        ).fetchall()
    return [(seq, kind == "full", bytes(blob)) for seq, kind, blob in rows]


def test_chain_rows_are_the_rows_made_the_plain_way(tmp_path: Path) -> None:
    """``_chain_rows`` gives what ``_Row(...)`` made from the same columns: equal rows of
    the class ``_Row``, the time the default, the blobs bytes."""
    path = tmp_path / "rows.db"

    async def go() -> list[_Row]:
        async with SQLiteCheckpointer(path, snapshot_every=5, clock=Clock()) as store:
            await save_until(store, 0, 40)
            return store._chain_rows("r")

    rows = anyio.run(go)
    with contextlib.closing(sqlite3.connect(path)) as db:
        plain = [
            _Row(seq, kind == "full", phase, bytes(blob))
            for seq, kind, phase, blob in db.execute(
                "SELECT seq, kind, phase, blob FROM checkpoints WHERE seq >= (SELECT max(seq) "
                "FROM checkpoints WHERE kind = 'full') AND head IS NULL ORDER BY seq"
            )
        ]
    assert rows == plain
    assert len(rows) > 1
    for row in rows:
        assert type(row) is _Row
        assert row.at is _EPOCH
        assert type(row.blob) is bytes
        assert type(row.seq) is int
        assert type(row.snapshot) is bool
        assert type(row.phase) is str


def test_the_span_after_a_small_compressed_snapshot_is_three_times_its_size() -> None:
    """``span``: three times a compressed snapshot's stored size below ``_SPAN_BELOW``,
    its size at or above it, and for a text one or in a sealed store."""
    store = chain()
    small = b"\0" * _DIGEST + b"x" + b"\1" * 1000
    assert _COMPRESSED_SPAN == 3
    assert store.span(small) == 3 * len(small)
    large = b"\0" * _DIGEST + b"x" + b"\1" * _SPAN_BELOW
    assert store.span(large) == len(large)
    text = b"\0" * _DIGEST + b"{" + b" " * 1000
    assert store.span(text) == len(text)
    sealed = _Chain(snapshot_every=50, sealer=Sealer(), clock=_system_clock, where="s")
    assert sealed.span(small) == len(small)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=3 * _SPAN_BELOW),
    st.sampled_from([b"x", b"{", b"[", b" ", b"\x01", b""]),
    st.booleans(),
)
def test_span_is_the_rule_as_written(size: int, first: bytes, sealed: bool) -> None:
    """``span`` against the rule in plain words: three times the stored size for a blob
    stored compressed (zlib's first byte after the checksum) in fewer than ``_SPAN_BELOW``
    bytes in a store without a sealer, else the stored size."""
    blob = (b"\2" * _DIGEST + first + b"\3" * size)[: _DIGEST + size]
    store = _Chain(
        snapshot_every=50, sealer=Sealer() if sealed else None, clock=_system_clock, where="s"
    )
    compressed = not sealed and len(blob) > _DIGEST and blob[_DIGEST] == ord("x")
    expected = 3 * len(blob) if compressed and len(blob) < _SPAN_BELOW else len(blob)
    assert store.span(blob) == expected


@pytest.mark.parametrize("load", [False, True])
def test_a_run_saved_under_the_rule_before_goes_on_under_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: bool
) -> None:
    """A run saved with twice the span (the rule before), then by a store opened on the same
    file with three times (saving at once, or after a load, as a resume): it loads and
    verifies at every step; the snapshots before stay where they were; the next one comes
    at three times the stored snapshot's size in deltas (at the first checkpoint it can)."""
    path = tmp_path / "run.db"

    async def before() -> None:
        async with SQLiteCheckpointer(path, snapshot_every=5, clock=Clock()) as store:
            await save_until(store, 0, 120)

    with monkeypatch.context() as patched:
        patched.setattr(_chain, "_COMPRESSED_SPAN", 2)
        anyio.run(before)
    old = stored_rows(path)
    assert any(snapshot and blob[_DIGEST : _DIGEST + 1] == b"x" for _, snapshot, blob in old)

    async def after() -> tuple[Any, int]:
        async with SQLiteCheckpointer(path, snapshot_every=5, clock=Clock()) as store:
            if load:
                assert await store.load("r") == (119, grown(119))
            await save_until(store, 120, 260)
        async with SQLiteCheckpointer(path, snapshot_every=5) as store:
            return await store.load("r"), await store.verify("r")

    assert anyio.run(after) == ((259, grown(259)), 259)
    rows = stored_rows(path)
    assert rows[:120] == old
    snapshots = [seq for seq, snapshot, _ in rows if snapshot]
    checked = 0
    for before_seq, after_seq in itertools.pairwise(snapshots):
        if after_seq < 120:
            continue
        blob = rows[before_seq][2]
        packed = blob[_DIGEST : _DIGEST + 1] == b"x" and len(blob) < _SPAN_BELOW
        span = len(blob) * (3 if packed else 1)
        deltas = sum(len(rows[seq][2]) for seq in range(before_seq + 1, after_seq))
        assert deltas >= span
        assert after_seq - before_seq >= 5
        if after_seq - before_seq > 5:
            assert deltas - len(rows[after_seq - 1][2]) < span
        checked += packed
    assert checked >= 1
