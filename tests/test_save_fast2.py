"""A save's next delta made with fewer frames stores what the plain steps store (issue 23).

``_Store._next_delta`` checks the snapshot rule in place, and without a sealer makes the
blob (its checksum and the text) and the run's new head itself, not through the chain's
``seal_plain`` and ``head``; its named tuples are made without their ``__new__``'s frame.
``save`` makes the caller's ``_Change`` in place, SQLite's save runs on the event loop
from a plain function (``_save_now``: no coroutine of its own, no ``_guarded`` frame; a
busy file's save goes to a thread), and its one-statement save reads the
system clock itself and stamps the moment once. ``_json.dumps_bytes`` looks for ``e+``
and ``null`` in its text with ``find``, not ``in``. Here each is compared with the plain
steps it replaces: the same blobs, heads and memory at every save, the same rows in the
file byte for byte, the same change, the same error, the same text.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import (
    CheckpointCorruptError,
    CheckpointTamperedError,
    MemoryCheckpointer,
    SQLiteCheckpointer,
    _json,
)
from statemachine._json import dumps_bytes
from statemachine.persist import _sqlite
from statemachine.persist._base import _Store
from statemachine.persist._delta import FiniteOps
from statemachine.persist._lifecycle import RunStatus
from statemachine.persist._rows import (
    _DIGEST,
    _aad,
    _Change,
    _change_of,
    _Last,
    _Since,
)


class Clock:
    """A fixed clock that moves one second a reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Sealer:
    """A deterministic stand-in for a cipher: the same bytes each time, bound to the aad."""

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return b"S" + hashlib.sha256(aad).digest()[:4] + plaintext

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        assert blob[:5] == b"S" + hashlib.sha256(aad).digest()[:4]
        return blob[5:]


class MyOps(FiniteOps):
    """A subclass of FiniteOps: not the exact type, so it vouches for nothing."""


def plain_next_delta(
    self: _Store,
    run_id: str,
    seq: int,
    document: Mapping[str, Any],
    record: Any,
    status: RunStatus,
    change: _Change | None,
) -> tuple[bytes, _Last] | None:
    """``_next_delta`` through the chain's own steps (``snapshot_due``, ``seal_plain``,
    ``head``), as it was written before it made them in place."""
    chain = self._chain
    known = None if change is None else chain.recent.get(run_id)
    if (
        known is None
        or record is None
        or change is None
        or change.base is not known.document
        or known.seq != record.seq
        or seq != known.seq + 1
        or status is not record.status
        or chain.snapshot_due(seq, known.since)
    ):
        return None
    plain = dumps_bytes({"kind": "delta", "ops": change.ops}, finite=change.finite)
    blob = chain.seal_plain(plain, _aad(run_id, seq))
    head = chain.head(run_id, seq, False, blob[:_DIGEST], known.head)
    since = known.since
    since = _Since(since.seq, since.size, since.deltas + len(blob))
    return blob, _Last(seq, document, None, known.texts, since, head)


def file_rows(path: Path) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT * FROM checkpoints ORDER BY run_id, seq").fetchall()
        runs = db.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    return [rows, runs]


# A run's documents: a counter and a text whose length moves the snapshot rule.
texts = st.lists(st.text(min_size=0, max_size=300), min_size=2, max_size=24)


async def save_run(store: _Store, texts: list[str], finite: bool) -> list[Any]:
    """Save one run whose documents change by ops; what each save returned."""
    document: dict[str, Any] = {"n": 0, "text": texts[0]}
    returned = [await store.save("r", 0, document, agent="a", status="running", phase="P0")]
    for seq, text in enumerate(texts[1:], 1):
        ops: list[list[Any]] = [["set", ["n"], seq], ["set", ["text"], text]]
        if finite:
            ops = FiniteOps(ops)
        base, document = document, {"n": seq, "text": text}
        returned.append(
            await store.save(
                "r", seq, document, agent="a", status="running", phase=f"P{seq}", base=base, ops=ops
            )
        )
    return [list(vars(row).items()) for row in returned]


@settings(max_examples=25, deadline=None)
@given(
    texts=texts,
    every=st.integers(min_value=1, max_value=6),
    sealed=st.booleans(),
    finite=st.booleans(),
    kind=st.sampled_from(["sqlite", "memory"]),
)
def test_the_next_delta_in_place_is_the_plain_steps(
    texts: list[str], every: int, sealed: bool, finite: bool, kind: str
) -> None:
    """At every save, ``_next_delta`` gives what the plain steps give (blob, head, memory);
    and a run saved with it holds the rows, byte for byte, of one saved with the plain."""
    fast_next = _Store._next_delta
    made: list[bool] = []

    def compared(self: _Store, *args: Any) -> Any:
        fast = fast_next(self, *args)
        plain = plain_next_delta(self, *args)
        assert fast == plain
        if fast is not None:  # the very document and texts, not equal ones
            assert plain is not None
            assert fast[1].document is plain[1].document
            assert fast[1].texts is plain[1].texts
            assert type(fast[1]) is _Last
            assert type(fast[1].since) is _Since
        made.append(fast is not None)
        return fast

    outcomes: list[Any] = []
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        # SQLite's one statement makes a delta without a sealer in place, not by
        # _next_delta (tests/test_save_fast5.py): off, so that the transaction's path asks it.
        patch.setattr(SQLiteCheckpointer, "_save_next", lambda *args: None)
        for way in (compared, plain_next_delta):
            patch.setattr(_Store, "_next_delta", way)
            options: dict[str, Any] = {"snapshot_every": every, "clock": Clock()}
            if sealed:
                options["sealer"] = Sealer()
            path = Path(folder) / f"{way.__name__}.db"

            async def go(path: Path = path, options: dict[str, Any] = options) -> Any:
                store: _Store
                if kind == "sqlite":
                    store = SQLiteCheckpointer(path, **options)
                else:
                    store = MemoryCheckpointer(**options)
                returned = await save_run(store, texts, finite)
                last = store._chain.recent["r"]
                memory = (last.seq, last.since, last.head, last.seen)
                outcome = [returned, memory, await store.load("r"), await store.verify("r")]
                if isinstance(store, SQLiteCheckpointer):
                    await store.aclose()
                    outcome.append(file_rows(path))
                return outcome

            outcomes.append(anyio.run(go))
    assert outcomes[0] == outcomes[1]
    assert made.count(True) >= (len(texts) - 1) // every - 1 or every == 1


@pytest.mark.anyio
async def test_a_delta_in_place_is_refused_by_a_head_too_short_as_the_plain_steps_refuse(
    tmp_path: Path,
) -> None:
    """A remembered head shorter than a link takes the chain's own steps, which refuse it
    (the run's row was changed) as they always did."""
    store = MemoryCheckpointer(clock=Clock())
    await store.save("r", 0, {"n": 0}, agent="a", status="running", phase="P")
    last = store._chain.recent["r"]
    store._chain.recent["r"] = last._replace(head=last.head[:5])
    record = await store.record("r")
    change = _Change(last.document, [["set", ["n"], 1]], False)
    errors = []
    for way in (_Store._next_delta, plain_next_delta):
        with pytest.raises(CheckpointTamperedError, match="no recorded head") as caught:
            way(store, "r", 1, {"n": 1}, record, RunStatus.RUNNING, change)
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]
    assert "no recorded head" in errors[0][1]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "ops",
    [None, [["set", ["n"], 1]], FiniteOps([["set", ["n"], 1]]), MyOps([["set", ["n"], 1]])],
    ids=["none", "list", "finite", "subclass"],
)
@pytest.mark.parametrize("base", [None, {"n": 0}])
async def test_save_makes_the_change_change_of_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ops: Any, base: Any
) -> None:
    """The change ``save`` hands on is ``_change_of``'s: ``None`` without ops, else a
    ``_Change`` vouching for finite floats only for ops of the exact type FiniteOps."""
    seen: list[Any] = []

    def recorded(self: _Store, *args: Any) -> Any:
        seen.append(args[7])
        raise RuntimeError("recorded")

    monkeypatch.setattr(SQLiteCheckpointer, "_save", recorded)
    async with SQLiteCheckpointer(tmp_path / "s.db") as store:
        store._db  # noqa: B018 (opened here: the save then runs on the event loop)
        with pytest.raises(RuntimeError, match="recorded"):
            await store.save(
                "r", 0, {"n": 1}, agent="a", status="running", phase="P", base=base, ops=ops
            )
    expected = _change_of(base, ops)
    assert seen == [expected]
    if expected is not None:
        assert type(seen[0]) is _Change
        assert seen[0].base is base
        assert seen[0].ops is ops
        assert seen[0].finite is expected.finite


@pytest.mark.anyio
async def test_an_unreadable_file_on_the_event_loop_is_the_error_guarded_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save on the event loop that the file refuses as not a database raises what
    ``_guarded`` raises (in a worker thread), with the same message; another error
    passes through as it is; a busy file's save is left to the thread, which saves it."""
    plain_save = SQLiteCheckpointer._save
    raised: list[BaseException] = []

    def failing(self: SQLiteCheckpointer, *args: Any) -> Any:
        if raised:
            error = raised.pop()
            raise error
        return plain_save(self, *args)

    def broken() -> None:
        raise sqlite3.DatabaseError("file is not a database")

    monkeypatch.setattr(SQLiteCheckpointer, "_save", failing)
    async with SQLiteCheckpointer(tmp_path / "s.db") as store:
        store._db  # noqa: B018 (opened: the save runs on the event loop)
        raised.append(sqlite3.DatabaseError("file is not a database"))
        with pytest.raises(CheckpointCorruptError) as inline:
            await store.save("r", 0, {"n": 0}, agent="a", status="running", phase="P")
        with pytest.raises(CheckpointCorruptError) as guarded:
            store._guarded("r", broken)
        assert str(inline.value) == str(guarded.value)
        assert inline.value.run_id == guarded.value.run_id == "r"
        assert isinstance(inline.value.__cause__, sqlite3.DatabaseError)
        raised.append(ValueError("not the file's"))
        with pytest.raises(ValueError, match="not the file's"):
            await store.save("r", 0, {"n": 0}, agent="a", status="running", phase="P")
        assert not store._lock.locked()
        # Busy on the event loop (another connection holds the write lock for a moment):
        # nothing saved there, then saved by the worker thread, which waits for the lock.
        with contextlib.closing(sqlite3.connect(tmp_path / "s.db", isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            threads: list[bool] = []
            plain_call = SQLiteCheckpointer._call

            async def counted(self: SQLiteCheckpointer, *args: Any) -> Any:
                if not threads:
                    other.execute("COMMIT")  # the lock is free once the thread waits for it
                threads.append(args[1].__func__ is failing)  # the save, patched above
                return await plain_call(self, *args)

            monkeypatch.setattr(SQLiteCheckpointer, "_call", counted)
            saved = await store.save("r", 0, {"n": 0}, agent="a", status="running", phase="P")
        assert threads == [True]
        assert saved.seq == 0
        assert (await store.load("r")) == (0, {"n": 0})
        assert threads == [True, False]


@pytest.mark.anyio
@pytest.mark.parametrize("clock", ["system", "fixed"])
async def test_a_delta_in_one_statement_is_stamped_with_the_moment_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: str
) -> None:
    """The one-statement save reads the clock once (the system clock in place, any other
    through the chain) and stamps its checkpoint and the run's row with that moment, the
    one in the row it returns."""
    stamps: list[datetime] = []
    plain_stamp = _sqlite._stamp

    def counted(moment: datetime) -> str:
        stamps.append(moment)
        return plain_stamp(moment)

    options: dict[str, Any] = {} if clock == "system" else {"clock": Clock()}
    path = tmp_path / "s.db"
    async with SQLiteCheckpointer(path, **options) as store:
        store._db  # noqa: B018
        document: dict[str, Any] = {"n": 0}
        await store.save("r", 0, document, agent="a", status="running", phase="P")
        monkeypatch.setattr(_sqlite, "_stamp", counted)
        before = datetime.now(UTC)
        saved = await store.save(
            "r",
            1,
            {"n": 1},
            agent="a",
            status="running",
            phase="Q",
            base=document,
            ops=[["set", ["n"], 1]],
        )
        monkeypatch.undo()
    assert stamps == [saved.updated_at]
    assert saved.updated_at.tzinfo is UTC
    if clock == "system":
        assert saved.updated_at >= before
    else:
        assert saved.updated_at == datetime(2026, 12, 3, 0, 0, 2, tzinfo=UTC)
    with contextlib.closing(sqlite3.connect(path)) as db:
        (at,) = db.execute("SELECT at FROM checkpoints WHERE seq = 1").fetchone()
        # The run's end marker (after checkpoint 1) holds its moment; its row, the first's.
        (updated,) = db.execute("SELECT at FROM checkpoints WHERE head IS NOT NULL").fetchone()
    assert at == updated == plain_stamp(saved.updated_at)


def plain_dumps_bytes(value: Any, *, finite: bool = False) -> bytes:
    """``_json.dumps_bytes`` with its tests for ``e+`` and ``null`` written with ``in``,
    as they were before ``find``."""
    orjson = _json._orjson or _json._import_orjson()
    try:
        data: bytes = orjson.dumps(value, default=_json._fragment, option=_json._orjson_options)
        if type(value) is str:
            return data
        if b"e+" not in data and (finite or b"null" not in data or orjson.loads(data) == value):
            return data
    except (TypeError, ValueError):
        pass
    return _json.dumps_fast(value).encode()


# Values whose text holds ``e+`` (a float of 16 digits or more before the point, or in a
# string), ``null`` (None, NaN, the infinities, or a string), both, or neither.
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.sampled_from([1e16, 1e300, -1e22, 1.5e-7, float("inf"), float("nan")]),
        st.text(alphabet="nule+0. ", max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, finite=st.booleans())
def test_dumps_bytes_tests_its_text_as_with_in(value: Any, finite: bool) -> None:
    """The text ``dumps_bytes`` gives, or the error it raises, is what it gave testing
    its text for ``e+`` and ``null`` with ``in``."""
    outcomes: list[Any] = []
    for way in (_json.dumps_bytes, plain_dumps_bytes):
        try:
            outcomes.append(way(value, finite=finite))
        except ValueError as error:
            outcomes.append((type(error), str(error)))
    assert outcomes[0] == outcomes[1]
