"""A large snapshot's save with fewer steps stores what the plain steps store (issue 23).

``_chain._split`` writes the places of a snapshot's long texts with ``dumps_bytes`` (orjson,
or the C writer) instead of ``dumps`` (the Python writer), and finds the parts' long texts
and the JSON between them by comprehensions instead of a loop; ``_Chain.blob`` counts a
snapshot's size in C (each long text as 1) and counts exactly only when that is below
``_COMPRESS_FROM``. Here each is compared with the plain steps it replaces: the same
bytes, the same ``None``, the same error, the same rows in the file.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import sqlite3
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import MemoryCheckpointer, SQLiteCheckpointer
from statemachine._json import Long, dumps
from statemachine.persist import _chain
from statemachine.persist._base import _Store
from statemachine.persist._chain import (
    _COMPRESS_FROM,
    _COMPRESSED_SPAN,
    _PIECE,
    _SPAN_BELOW,
    _TEXTS_AFTER,
    _Chain,
    _longs,
    _split,
    _text,
    _written,
)
from statemachine.persist._rows import _DIGEST, _Change, _system_clock


def plain_split(payload: Any, parts: list[str | Long]) -> tuple[bytes, list[str]] | None:
    """``_split`` as it was written before: a loop over the parts, ``dumps`` for the places."""
    longs: list[tuple[list[str | int], str]] = []
    _longs(payload, [], longs)
    found = iter(longs)
    kept: list[str] = []
    for part in parts:
        if isinstance(part, str):
            kept.append(part)
            continue
        place = next(found, None)
        if place is None or place[1] is not part.item:
            return None
        kept.append("null")
    if next(found, None) is not None:
        return None
    places = [[*path, len(text)] for path, text in longs]
    head = "[" + dumps(places) + "," + "".join(kept) + "]"
    return _TEXTS_AFTER + head.encode("utf-8"), [text for _, text in longs]


def plain_size(parts: list[str | Long]) -> int:
    """A snapshot's size as ``blob`` counted it before."""
    return sum(len(part) if isinstance(part, str) else len(part.item) for part in parts)


def outcome(function: Any, *args: Any) -> Any:
    """What ``function(*args)`` gives, or the type of the error it raises."""
    try:
        return function(*args)
    except Exception as exc:  # compared by type: both must fail alike
        return type(exc)


# Keys as a document may hold them: quotes, backslashes, control characters, non-BMP,
# "e+" and "null" (which send orjson's text to its checks), lone surrogates (which
# orjson refuses and UTF-8 cannot encode).
odd = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
keys = st.one_of(
    st.text(odd, max_size=6),
    st.sampled_from(["e+", "null", 'a"b', "a\\b", "\x00", "\x7f", "\u2028", "\U0001f600"]),
)


def _long(seed: str, extra: int) -> str:
    """A text of at least ``_PIECE`` characters made of ``seed`` repeated."""
    return (seed * (_PIECE // len(seed) + 1))[: _PIECE + extra]


longs_text = st.builds(
    _long,
    st.text(st.characters(min_codepoint=1, max_codepoint=0x10FFFF), min_size=1, max_size=5),
    st.integers(min_value=0, max_value=300),
)
items = st.one_of(
    longs_text,
    st.text(max_size=8),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.none(),
    st.booleans(),
    st.dictionaries(keys, st.text(max_size=4), max_size=2),
    st.lists(st.one_of(longs_text, st.integers()), max_size=2),
)
documents = st.recursive(
    st.lists(items, max_size=5),
    lambda inner: st.dictionaries(keys, inner, max_size=4),
    max_leaves=8,
)


def payload_of(document: Any) -> dict[str, Any]:
    return {"kind": "full", "document": document, "previous": "00" * 32}


@settings(max_examples=300, deadline=None)
@given(document=documents)
def test_split_is_the_plain_split(document: Any) -> None:
    """The same start and texts (or ``None``, or the same error) as the plain loop with
    ``dumps``, for keys and texts of every kind."""
    payload = payload_of(document)
    parts: list[str | Long] = []
    try:
        _written(payload, {}, {}, parts)
    except UnicodeEncodeError:  # an item holding a lone surrogate: no parts to split
        return
    fast = outcome(_split, payload, parts)
    assert fast == outcome(plain_split, payload, parts)
    made = _split(payload, parts) if type(fast) is tuple else None
    if made is not None:
        plain = plain_split(payload, parts)
        assert plain is not None
        assert all(a is b for a, b in zip(made[1], plain[1], strict=True))


@settings(max_examples=200, deadline=None)
@given(document=documents, which=st.integers(min_value=0), how=st.sampled_from(range(4)))
def test_split_refuses_parts_that_are_not_the_payloads_as_the_plain_split_does(
    document: Any, which: int, how: int
) -> None:
    """Parts whose long texts are not the payload's own, in order (an equal copy, one
    left out, one too many, two swapped): ``None`` both ways."""
    payload = payload_of(document)
    parts: list[str | Long] = []
    try:
        _written(payload, {}, {}, parts)
    except UnicodeEncodeError:  # an item holding a lone surrogate: no parts to split
        return
    at = [n for n, part in enumerate(parts) if type(part) is Long]
    if how == 2:  # one too many
        parts.insert(which % (len(parts) + 1), Long("x" * _PIECE))
    elif not at:
        return
    elif how == 0:  # an equal text, not the very one
        n = at[which % len(at)]
        item = parts[n]
        assert isinstance(item, Long)
        parts[n] = Long("".join(list(item.item)))
    elif how == 1:
        del parts[at[which % len(at)]]
    else:
        if len(at) < 2 or parts[at[0]] == parts[at[1]]:
            return
        parts[at[0]], parts[at[1]] = parts[at[1]], parts[at[0]]
    fast = outcome(_split, payload, parts)
    assert fast == outcome(plain_split, payload, parts)
    assert fast is None


def chain(sealer: Any = None) -> _Chain:
    return _Chain(snapshot_every=1, sealer=sealer, clock=_system_clock, where="a test")


def plain_blob(payload: dict[str, Any]) -> bytes:
    """A run's first snapshot as ``blob`` wrote it before (the size counted in Python,
    ``_whole`` by the plain split)."""
    parts: list[str | Long] = []
    _written(payload, {}, {}, parts)
    if plain_size(parts) < _COMPRESS_FROM:
        return chain().seal_plain(_text(parts).encode("utf-8"), b"")
    split = plain_split(payload, parts)
    if split is None:
        return chain().seal_plain(_chain.zlib.compress(_text(parts).encode("utf-8"), 1), b"")
    head, texts = split
    plain = _chain.zlib.compress(head + "".join(texts).encode("utf-8"), 1)
    return chain().seal_plain(plain, b"")


@settings(max_examples=150, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=40),
    short=st.integers(min_value=0, max_value=_COMPRESS_FROM + 200),
    extra=st.integers(min_value=0, max_value=64),
    near=st.booleans(),
)
def test_a_snapshot_is_compressed_exactly_when_its_size_says_so(
    count: int, short: int, extra: int, near: bool
) -> None:
    """Long texts (each counted as 1 by the first count) and short ones around
    ``_COMPRESS_FROM``: compressed exactly when the plain size is at least that, and the
    blob byte for byte the plain one."""
    long_texts = [chr(65 + n % 26) * (_PIECE + extra) for n in range(count)]
    document: dict[str, Any] = {"log": long_texts, "note": "y" * short}
    payload = payload_of(document)
    parts: list[str | Long] = []
    _written(payload, {}, {}, parts)
    if near:  # move the short text so that the plain size falls just below the line
        document["note"] = "y" * max(0, short - (plain_size(parts) - _COMPRESS_FROM) - 1)
        parts = []
        _written(payload, {}, {}, parts)
    store = chain()
    blob, _ = store.blob("r", 0, payload, _Change(None, [], False))
    assert (blob[_DIGEST : _DIGEST + 1] == b"x") == (plain_size(parts) >= _COMPRESS_FROM)
    # The chain's own run memory: a fresh chain's first snapshot is written whole.
    assert blob[_DIGEST:] == plain_blob(payload)[_DIGEST:]
    assert store.unseal(blob, b"", "r", "it") == copy.deepcopy(payload)


class Clock:
    """A fixed clock that moves one second a reading."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def file_rows(path: Path) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT * FROM checkpoints ORDER BY run_id, seq").fetchall()
        runs = db.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    return [rows, runs]


def grown(step: int) -> dict[str, Any]:
    """A run's document at ``step``: a log of long texts that compress little, and a note."""
    return {"step": step, "log": [_entry(n) for n in range(step)], "note": f"at {step}"}


def _entry(n: int) -> str:
    """A long text (1,285 characters) of hex digits, about half of it left by zlib."""
    return f"{n:04d} " + "".join(hashlib.sha256(f"{n}:{k}".encode()).hexdigest() for k in range(20))


async def save_grown(store: _Store, steps: int) -> list[Any]:
    document = grown(0)
    returned = [await store.save("r", 0, document, agent="a", status="running", phase="P")]
    for seq in range(1, steps):
        base, document = document, grown(seq)
        # The log's items carried over, as the phase codec's documents share them.
        document["log"][: seq - 1] = base["log"]
        ops: list[list[Any]] = [
            ["set", ["step"], seq],
            ["set", ["note"], document["note"]],
            ["append", ["log"], [document["log"][-1]]],
        ]
        returned.append(
            await store.save(
                "r", seq, document, agent="a", status="running", phase="P", base=base, ops=ops
            )
        )
    return [list(vars(row).items()) for row in returned]


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_run_saved_with_the_new_steps_holds_the_plain_rows(kind: str) -> None:
    """A run whose snapshots are compressed by pieces, saved with the new ``_split`` and
    size count and with the plain ones: the same returns, memory, load and rows."""
    outcomes: list[Any] = []
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        for way in ("fast", "plain"):
            if way == "plain":
                patch.setattr(_chain, "_split", plain_split)
            path = Path(folder) / f"{way}.db"

            async def go(path: Path = path) -> Any:
                store: _Store
                options: dict[str, Any] = {"snapshot_every": 5, "clock": Clock()}
                if kind == "sqlite":
                    store = SQLiteCheckpointer(path, **options)
                else:
                    store = MemoryCheckpointer(**options)
                returned = await save_grown(store, 160)
                history = await store.history("r")
                last = store._chain.recent["r"]
                outcome = [
                    returned,
                    (last.seq, last.since, last.head),
                    [(entry.seq, entry.snapshot, entry.size) for entry in history],
                    await store.load("r"),
                    await store.verify("r"),
                    len(store._chain.pieces.get("r", {})),
                ]
                if isinstance(store, SQLiteCheckpointer):
                    await store.aclose()
                    outcome.append(file_rows(path))
                return outcome

            outcomes.append(anyio.run(go))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][5] > 50  # compressed snapshots, the later ones by pieces


# --- the snapshot cadence: twice a compressed snapshot's size in deltas -----------------


class Sealer:
    """A deterministic stand-in for a cipher: the same bytes each time, bound to the aad."""

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        return b"S" + hashlib.sha256(aad).digest()[:4] + plaintext

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        assert blob[:5] == b"S" + hashlib.sha256(aad).digest()[:4]
        return blob[5:]


def stored_rows(path: Path) -> list[tuple[int, bool, bytes]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT seq, kind, blob FROM checkpoints ORDER BY seq").fetchall()
    return [(seq, kind == "full", bytes(blob)) for seq, kind, blob in rows]


@pytest.mark.parametrize("below", [_SPAN_BELOW, 50_000])
@pytest.mark.parametrize("sealed", [False, True])
def test_a_compressed_snapshot_is_followed_by_three_times_its_size_in_deltas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealed: bool, below: int
) -> None:
    """After a snapshot stored compressed in fewer than ``_SPAN_BELOW`` bytes, the next
    comes at the first checkpoint (at least ``snapshot_every`` on) at which the deltas
    since add up to three times its size; after any other (larger, or stored as text: small, or
    in a sealed store), to its size, as before."""
    monkeypatch.setattr(_chain, "_SPAN_BELOW", below)
    path = tmp_path / "s.db"
    every = 5

    async def go() -> None:
        options: dict[str, Any] = {"snapshot_every": every, "clock": Clock()}
        if sealed:
            options["sealer"] = Sealer()
        async with SQLiteCheckpointer(path, **options) as store:
            await save_grown(store, 220)

    anyio.run(go)
    rows = stored_rows(path)
    snapshots = [seq for seq, snapshot, _ in rows if snapshot]
    compressed = large = 0
    for before, after in itertools.pairwise(snapshots):
        blob = rows[before][2]
        packed = not sealed and blob[_DIGEST : _DIGEST + 1] == b"x"
        large += packed and len(blob) >= below
        packed = packed and len(blob) < below
        span = len(blob) * (_COMPRESSED_SPAN if packed else 1)
        deltas = sum(len(rows[seq][2]) for seq in range(before + 1, after))
        assert after - before >= every
        assert deltas >= span
        if after - before > every:  # due at the first checkpoint it could be
            assert deltas - len(rows[after - 1][2]) < span
            if packed:  # the rule before would have written it earlier
                assert deltas - len(rows[after - 1][2]) >= len(blob)
                compressed += 1
    assert compressed >= (0 if sealed else 1)
    assert large >= (1 if below < _SPAN_BELOW and not sealed else 0)
    assert _COMPRESSED_SPAN == 3


def test_a_run_saved_with_the_new_cadence_resumes_identically_and_verifies(
    tmp_path: Path,
) -> None:
    """A run saved by one store, and the same run saved by a store reopened partway (which
    reads the last snapshot's span from the file, saving at once or after a load, as a
    resume does): the same snapshots at the same seqs; each, reopened, loads the same
    document and verifies."""
    whole, restarted = tmp_path / "whole.db", tmp_path / "restarted.db"
    resumed = tmp_path / "resumed.db"

    async def save(path: Path, restart: int | None, load: bool = False) -> None:
        document = grown(0)
        store = SQLiteCheckpointer(path, snapshot_every=5, clock=Clock())
        for seq in range(200):
            if seq == restart:  # a new store that has not seen the run
                await store.aclose()
                store = SQLiteCheckpointer(path, snapshot_every=5, clock=Clock())
                if load:  # as a resume: the span from the loaded chain
                    assert (await store.load("r"))[0] == seq - 1
            base, document = document, grown(seq)
            if seq:
                document["log"][: seq - 1] = base["log"]
            await store.save("r", seq, document, agent="a", status="running", phase="P")
        await store.aclose()

    async def go() -> list[Any]:
        await save(whole, None)
        await save(restarted, 120)
        await save(resumed, 120, load=True)
        out: list[Any] = []
        for path in (whole, restarted, resumed):
            async with SQLiteCheckpointer(path, snapshot_every=5) as store:
                loaded = await store.load("r")
                out.append((loaded, await store.verify("r")))
        return out

    outcomes = anyio.run(go)
    assert outcomes == [((199, grown(199)), 199)] * 3
    kinds = [[snapshot for _, snapshot, _ in stored_rows(p)] for p in (whole, restarted, resumed)]
    assert kinds[0] == kinds[1] == kinds[2]
    assert sum(kinds[0]) >= 6
