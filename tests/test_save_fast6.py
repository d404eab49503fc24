"""A large snapshot's blob made in one pass over its document (issue 23).

``_Chain.blob`` writes a snapshot's parts and finds its long texts and their places in one
pass (``_placed``, instead of ``_written`` and then ``_longs``' walk in ``_split``), makes
the JSON before the long texts with them put as "null" in C (``_head``), and counts the
text's length in C, or not at all from ``_COMPRESS_FROM // _PIECE`` long texts on (each
has at least ``_PIECE`` characters). Here each is compared with the plain steps it
replaces (``_written``, ``_split``, the size counted part by part, ``_whole`` and
``_compressed``): the same parts, places, bytes, errors, memory and rows in the file.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_save_fast3 import (
    Clock,
    Sealer,
    documents,
    file_rows,
    outcome,
    payload_of,
    plain_size,
    plain_split,
    save_grown,
)

from statemachine import MemoryCheckpointer, SQLiteCheckpointer
from statemachine._json import Long, Texts
from statemachine.persist import _chain
from statemachine.persist._base import _Store
from statemachine.persist._chain import (
    _COMPRESS_FROM,
    _PIECE,
    _PIECES_RUNS,
    _Chain,
    _compressed,
    _head,
    _longs,
    _placed,
    _text,
    _whole,
    _written,
)
from statemachine.persist._rows import _DIGEST, _aad, _Change, _system_clock


def plain_blob(
    store: _Chain, run_id: str, seq: int, payload: dict[str, Any]
) -> tuple[bytes, Texts]:
    """``_Chain.blob`` of a snapshot with a caller's ops as it was written before: the
    parts by ``_written``, the size counted part by part, ``_whole`` or ``_compressed``
    (each by ``_split``, whose places come from ``_longs``' walk)."""
    last = store.last(run_id)
    texts: Texts = {} if last is None else last.texts
    parts: list[str | Long] = []
    kept: Texts = {}
    _written(payload, texts, kept, parts)
    if plain_size(parts) < _COMPRESS_FROM or store.sealer is not None:
        return store.seal_plain(_text(parts).encode("utf-8"), _aad(run_id, seq)), kept
    pieces = store.pieces.pop(run_id, None)
    if pieces is None:
        plain, pieces = _whole(payload, parts), {}
    else:
        plain, pieces = _compressed(payload, parts, pieces)
    store.pieces[run_id] = pieces
    while len(store.pieces) > _PIECES_RUNS:
        store.pieces.popitem(last=False)
    return store.seal_plain(plain, _aad(run_id, seq)), kept


def chain(sealer: Any = None) -> _Chain:
    return _Chain(snapshot_every=1, sealer=sealer, clock=_system_clock, where="a test")


Placed = tuple[list[str | Long], Texts, list[list[str | int]], list[str]] | type[Exception]


def placed(value: Any, texts: Texts) -> Placed:
    """``_placed``'s parts, memory, places and long texts, or the type of its error."""
    parts: list[str | Long] = []
    kept: Texts = {}
    places: list[list[str | int]] = []
    longs: list[str] = []
    path: list[str | int] = []
    try:
        _placed(value, texts, kept, parts, path, places, longs)
    except Exception as exc:  # compared by type: both must fail alike
        return type(exc)
    assert path == []
    return parts, kept, places, longs


def plain_placed(value: Any, texts: Texts) -> Placed:
    """The same by ``_written`` and ``_longs``' walk."""
    parts: list[str | Long] = []
    kept: Texts = {}
    try:
        _written(value, texts, kept, parts)
    except Exception as exc:
        return type(exc)
    found: list[tuple[list[str | int], str]] = []
    _longs(value, [], found)
    return parts, kept, [[*path, len(text)] for path, text in found], [text for _, text in found]


def same_placed(fast: Placed, plain: Placed) -> None:
    if not isinstance(fast, tuple) or not isinstance(plain, tuple):  # an error: the same type
        assert fast is plain
        return
    assert fast == plain
    parts, kept, _, longs = fast
    plain_parts, plain_kept, _, plain_longs = plain
    # The very objects: a long text and a list item are kept by identity.
    assert all(a is b for a, b in zip(longs, plain_longs, strict=True))
    assert [type(part) for part in parts] == [type(part) for part in plain_parts]
    assert list(kept) == list(plain_kept)
    assert all(kept[key][0] is plain_kept[key][0] for key in kept)


@settings(max_examples=300, deadline=None)
@given(document=documents, reuse=st.booleans())
def test_placed_is_written_then_the_walk(document: Any, reuse: bool) -> None:
    """The same parts, kept texts, places and long texts (the very objects, in order) as
    ``_written`` and ``_longs``, or the same error, for keys and texts of every kind, with
    and without texts to reuse; the path is left as it was given."""
    payload = payload_of(document)
    texts: Texts = {}
    if reuse:  # the texts an earlier snapshot of the same lists wrote (and one wrong one)
        first = plain_placed(payload, {})
        if isinstance(first, tuple):
            texts = dict(first[1])
            for key in list(texts)[:1]:
                texts[key] = (texts[key][0], '"not its text"')
    same_placed(placed(payload, texts), plain_placed(payload, texts))
    # A document at the top, and a list at the top, as well as the payload.
    same_placed(placed(document, {}), plain_placed(document, {}))
    listed = [document, "z" * _PIECE]
    same_placed(placed(listed, {}), plain_placed(listed, {}))


def test_placed_refuses_what_written_refuses() -> None:
    """A key that is not a text, a value JSON cannot hold: the same error both ways (and
    what the writer of a list's items takes, taken both ways)."""
    for bad in ({1: "x"}, {"a": [{"b": {1: 2}}]}, {"a": {"b": {2: "x"}}}, {"a": object()}):
        same_placed(placed(bad, {}), plain_placed(bad, {}))
    assert placed({"a": {"b": {2: "x"}}}, {}) is TypeError


@settings(max_examples=300, deadline=None)
@given(document=documents)
def test_head_is_the_plain_splits(document: Any) -> None:
    """``_head`` of ``_placed``'s parts and places: byte for byte ``_split``'s first answer
    (the plain one's too), its texts ``_placed``'s long texts, the very objects."""
    payload = payload_of(document)
    made = placed(payload, {})
    if not isinstance(made, tuple):
        return
    parts, _, places, longs = made
    split: tuple[bytes, list[str]] | type[Exception] = outcome(plain_split, payload, parts)
    if not isinstance(split, tuple):  # a lone surrogate: neither can encode it
        assert outcome(_head, parts, places) is split
        return
    assert _head(parts, places) == split[0]
    assert _chain._split(payload, parts) == split
    assert all(a is b for a, b in zip(longs, split[1], strict=True))


def _snapshots(
    count: int, grow: int, note: int, seed: str, first: int, shared: bool
) -> list[dict[str, Any]]:
    """Payloads of snapshots of one run: a log of long texts grown by ``grow`` each time
    (the earlier texts and entries the very objects when ``shared``, as the phase codec's
    documents share them), entries (objects) and a note of ``note`` characters."""
    texts = [f"{seed}{n:05d}" * (_PIECE // 6 + n % 3) for n in range(first + grow * count)]
    entries = [{"n": n, "text": seed * (n % 4)} for n in range(first + grow * count)]
    made: list[dict[str, Any]] = []
    for k in range(count):
        end = first + grow * k
        log = texts[:end] if shared else [text[:1] + text[1:] for text in texts[:end]]
        document = {
            "step": k,
            "fields": {"log": log, "tail": [*entries[: end % 7], seed], "note": "n" * note},
            "items": entries[: end // 3],
        }
        made.append(payload_of(document))
    return made


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=6),
    grow=st.integers(min_value=0, max_value=9),
    first=st.integers(min_value=0, max_value=40),
    note=st.integers(min_value=0, max_value=_COMPRESS_FROM + 100),
    seed=st.text(st.characters(min_codepoint=32, max_codepoint=0x10FFFF), min_size=1, max_size=2),
    shared=st.booleans(),
    sealed=st.booleans(),
)
def test_blob_is_the_plain_blob_snapshot_after_snapshot(
    count: int, grow: int, first: int, note: int, seed: str, shared: bool, sealed: bool
) -> None:
    """Snapshots of a run one after another (the texts and pieces of each carried to the
    next, as a store carries them), fewer or more long texts than ``_COMPRESS_FROM //
    _PIECE``, short texts around the line, sealed or not: each blob byte for byte the
    plain one, with the same texts to reuse and the same pieces kept."""
    fast, plain = chain(Sealer() if sealed else None), chain(Sealer() if sealed else None)
    change = _Change(None, [], False)
    for seq, payload in enumerate(_snapshots(count, grow, note, seed, first, shared), 1):
        try:
            got = fast.blob("r", seq, payload, change)
        except UnicodeEncodeError:  # a lone surrogate in the seed: both refuse it
            with pytest.raises(UnicodeEncodeError):
                plain_blob(plain, "r", seq, payload)
            return
        expected = plain_blob(plain, "r", seq, payload)
        assert got[0] == expected[0]
        assert list(got[1]) == list(expected[1])
        assert all(got[1][key][0] is expected[1][key][0] for key in got[1])
        assert {key: value[1] for key, value in got[1].items()} == {
            key: value[1] for key, value in expected[1].items()
        }
        assert list(fast.pieces) == list(plain.pieces)
        for run in fast.pieces:
            mine, theirs = fast.pieces[run], plain.pieces[run]
            assert list(mine) == list(theirs)
            assert all(mine[key][0] is theirs[key][0] for key in mine)
            assert [value[1] for value in mine.values()] == [value[1] for value in theirs.values()]
        assert fast.unseal(got[0], _aad("r", seq), "r", "it") == copy.deepcopy(payload)
        for store, (blob, texts) in ((fast, got), (plain, expected)):
            since = _chain._Since(0, 0, 0)
            store.remember("r", _chain._Last(seq, payload, None, texts, since, blob[:_DIGEST]))


@pytest.mark.parametrize("longs", [_COMPRESS_FROM // _PIECE - 1, _COMPRESS_FROM // _PIECE])
@pytest.mark.parametrize("shift", [-2, -1, 0, 1])
def test_the_size_at_the_line(longs: int, shift: int) -> None:
    """Just fewer long texts than the count that decides uncounted, and exactly that many,
    each of ``_PIECE`` characters, with a note making the text's length just below, at or
    above ``_COMPRESS_FROM``: compressed exactly when the plain count says so, and the
    blob the plain one."""
    payload = payload_of({"log": [chr(97 + n % 26) * _PIECE for n in range(longs)], "note": ""})
    parts: list[str | Long] = []
    _written(payload, {}, {}, parts)
    # Make the whole text's length _COMPRESS_FROM + shift, when it can be made so.
    note = _COMPRESS_FROM + shift - plain_size(parts)
    payload["document"]["note"] = "y" * max(note, 0)
    parts = []
    _written(payload, {}, {}, parts)
    fast, plain = chain(), chain()
    blob, _ = fast.blob("r", 1, payload, _Change(None, [], False))
    assert blob == plain_blob(plain, "r", 1, payload)[0]
    assert (blob[_DIGEST : _DIGEST + 1] == b"x") == (plain_size(parts) >= _COMPRESS_FROM)
    if note >= 0:
        assert plain_size(parts) == _COMPRESS_FROM + shift


def _plain_way(store: _Chain, run_id: str, seq: int, payload: Any, change: Any) -> Any:
    if payload["kind"] == "full" and change is not None:
        return plain_blob(store, run_id, seq, payload)
    return _PLAIN_BLOB(store, run_id, seq, payload, change)


_PLAIN_BLOB = _Chain.blob


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_run_saved_with_the_one_pass_holds_the_plain_rows(kind: str) -> None:
    """A run whose snapshots are compressed by pieces, saved with the one pass and with the
    plain steps: the same returns, memory, history, load, verification and rows."""
    outcomes: list[Any] = []
    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        for way in ("fast", "plain"):
            if way == "plain":
                patch.setattr(_Chain, "blob", _plain_way)
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
                pieces = store._chain.pieces.get("r", {})
                outcome = [
                    returned,
                    (last.seq, last.since, last.head),
                    sorted(text for _, text in last.texts.values()),
                    [(entry.seq, entry.snapshot, entry.size) for entry in history],
                    await store.load("r"),
                    await store.verify("r"),
                    [(piece.deflated, piece.adler, piece.size) for _, piece in pieces.values()],
                ]
                if isinstance(store, SQLiteCheckpointer):
                    await store.aclose()
                    outcome.append(file_rows(path))
                return outcome

            outcomes.append(anyio.run(go))
    assert outcomes[0] == outcomes[1]
    assert len(outcomes[0][6]) > 50  # compressed snapshots, the later ones by pieces
