# pyright: reportPrivateUsage=false, reportUnknownVariableType=false, reportIncompatibleMethodOverride=false
"""The durable save's shortcuts of round 18 store what the plain steps store (issue 23).

``_chain._placed`` keeps each key's text (``_KEY_TEXTS``: a key's text in an object, first
or after another member, made by ``_encode_str`` once for each key); ``SQLiteCheckpointer.
_save_now`` calls ``_save_next`` itself for a run whose row this connection wrote,
without ``_save``'s frame, and hands every other save (and one ``_save_next`` does not
make, or the file refuses) to ``_save``. Each is compared with the plain steps.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import SQLiteCheckpointer
from statemachine._json import Long, _encode_str, dumps_bytes, parts_reusing
from statemachine.persist import _chain
from statemachine.persist._chain import _PIECE, _placed, _text
from statemachine.persist._lifecycle import RunStatus
from statemachine.persist._protocol import RunRecord

_short = st.text(max_size=12)
_long = st.text(min_size=_PIECE, max_size=_PIECE + 3, alphabet='ab"\\\n\u00e9')
_scalar = st.one_of(st.none(), st.booleans(), st.integers(), _short, _long, st.floats(1, 9))
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_short, inner, max_size=4)
    ),
    max_leaves=16,
)


def _items(value: Any, out: list[Any]) -> None:
    """Every list item below ``value`` (objects and lists walked), to share or copy."""
    if type(value) is dict:
        for item in value.values():
            _items(item, out)
    elif type(value) is list:
        for item in value:
            out.append(item)
            _items(item, out)


def _plain(payload: Any, texts: Any) -> tuple[str, list[Any], list[str], Any]:
    """``_placed``'s answers by the plain steps: ``parts_reusing`` and ``_chain._longs``."""
    kept: Any = {}
    parts: list[Any] = []
    parts_reusing(payload, texts, kept, parts, _PIECE)
    found: list[Any] = []
    _chain._longs(payload, [], found)
    places = [[*path, len(text)] for path, text in found]
    return _text(parts), places, [text for _, text in found], kept


def _fast(payload: Any, texts: Any) -> tuple[str, list[Any], list[str], Any, list[Any]]:
    kept: Any = {}
    parts: list[Any] = []
    places: list[Any] = []
    longs: list[str] = []
    _placed(payload, texts, kept, parts, [], places, longs)
    return _text(parts), places, longs, kept, parts


@settings(max_examples=300, deadline=None)
@given(first=st.dictionaries(_short, _json, max_size=5), data=st.data())
def test_placed_writes_what_the_plain_steps_write(first: dict[str, Any], data: Any) -> None:
    """A snapshot after another (its texts given), sharing some of its list items and not
    others: the same text, places, long texts and kept texts as the plain steps."""
    _, _, _, _, _ = _fast({"document": first}, {})
    texts: Any = {}
    _placed({"document": first}, {}, texts, [], [], [], [])
    shared: list[Any] = []
    _items(first, shared)
    second = data.draw(st.dictionaries(_short, st.one_of(_json, st.sampled_from(shared or [0]))))
    second["old"] = first
    # A text kept for another object at a shared item's id (a hand-made entry): not used.
    strays = [item for item in shared if type(item) is str and len(item) < _PIECE]
    for item in strays[: data.draw(st.integers(0, 2))]:
        texts[id(item)] = (item + "x", '"forged"')
    payload = {"kind": "full", "document": second}
    text, places, longs, kept, parts = _fast(payload, texts)
    plain_text, plain_places, plain_longs, plain_kept = _plain(payload, texts)
    assert text == plain_text == dumps_bytes(payload).decode()
    assert places == plain_places
    assert longs == plain_longs
    assert all(a is b for a, b in zip(longs, plain_longs, strict=True))
    assert list(kept) == list(plain_kept)
    assert all(kept[key][0] is plain_kept[key][0] for key in kept)
    assert all(kept[key][1] == plain_kept[key][1] for key in kept)
    assert all(type(part) is str or type(part) is Long for part in parts)


@given(key=st.text(max_size=20))
def test_a_key_s_texts_are_encode_str_s(key: str) -> None:
    written = _chain._KEY_TEXTS.get(key) or _chain._key_texts(key)
    assert written == (_encode_str(key) + ":", "," + _encode_str(key) + ":")
    assert _chain._KEY_TEXTS.get(key, written) == written


def test_a_key_text_is_kept_for_a_bounded_number_of_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_chain, "_KEY_TEXTS", {})
    monkeypatch.setattr(_chain, "_KEY_TEXTS_KEPT", 2)
    for key in ("a", "b", "c", "d"):
        assert _chain._key_texts(key)[0] == _encode_str(key) + ":"
    assert set(_chain._KEY_TEXTS) == {"a", "b"}
    text, _, _, _, _ = _fast({"c": [1, {"e": 2}], "a": {"d": "x"}}, {})
    assert text == dumps_bytes({"c": [1, {"e": 2}], "a": {"d": "x"}}).decode()


def _rows(path: Path) -> list[Any]:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        checkpoints = connection.execute(
            "SELECT id, number, run_id, seq, kind, phase, blob, head FROM checkpoints ORDER BY id"
        ).fetchall()
        runs = connection.execute(
            "SELECT run_id, agent, status, phase, waiting_for, seq, stop_requested, reason, "
            "failures, retry_at, head, number FROM runs ORDER BY run_id"
        ).fetchall()
    return [checkpoints, runs]


async def _saved(path: Path, calls: list[Any], *, fast: bool, refuse: int | None) -> list[Any]:
    """Saves of one run (a new status at one of them), the row changed by another
    connection before save ``refuse``; what ``_save`` was called with, what came back."""
    seen: list[Any] = []
    plain_save = SQLiteCheckpointer._save

    class Store(SQLiteCheckpointer):
        def _save(self, *args: Any) -> Any:
            seen.append(("_save", args[0], args[1], len(args)))
            return plain_save(self, *args)

        if not fast:

            def _save_next(self, *args: Any) -> Any:
                seen.append(("_save_next", args[1]))
                return None

    returned: list[Any] = []
    async with Store(path, snapshot_every=3) as store:
        document: dict[str, Any] = {"n": 0, "items": []}
        for seq, (status, waiting) in enumerate(calls):
            if seq == refuse:
                with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
                    other.execute("UPDATE runs SET reason = 'look' WHERE run_id = 'r'")
            base = document
            document = {"n": seq, "items": [*base["items"], {"i": seq}]}
            ops: list[list[Any]] | None = None
            if seq:
                ops = [["set", ["n"], seq], ["add", ["items", seq], {"i": seq}]]
            record = await store.save(
                "r",
                seq,
                document,
                agent="a",
                status=status,
                phase=f"P{seq % 3}",
                waiting_for=waiting,
                base=base if seq else None,
                ops=ops,
            )
            assert type(record) is RunRecord
            returned.append({k: v for k, v in vars(record).items() if k != "updated_at"})
    return [seen, returned, _rows(path)]


_steps = st.lists(
    st.sampled_from([(RunStatus.RUNNING, "")] * 4 + [(RunStatus.INTERRUPTED, "approval")]),
    min_size=1,
    max_size=9,
)


@settings(max_examples=25, deadline=None)
@given(calls=_steps, refuse=st.one_of(st.none(), st.integers(1, 8)))
def test_save_now_saves_what_save_saves(tmp_path_factory: Any, calls: Any, refuse: Any) -> None:
    """The same rows, records and blobs as with ``_save_next`` off; ``_save`` is called
    for every save ``_save_next`` did not make (with the moment it read when the file
    refused the row), and not for one it made."""
    calls = [(RunStatus.RUNNING, ""), *calls]
    root = tmp_path_factory.mktemp("s")
    fast = anyio.run(lambda: _saved(root / "f.db", calls, fast=True, refuse=refuse))
    plain = anyio.run(lambda: _saved(root / "p.db", calls, fast=False, refuse=refuse))
    assert fast[1] == plain[1]
    assert fast[2] == plain[2]
    checkpoints, _ = fast[2]
    # The checkpoints, and the run's end marker after them (its head set: the last column).
    assert [row[3] for row in checkpoints] == list(range(len(calls) + 1))
    assert [row[-1] is not None for row in checkpoints] == [False] * len(calls) + [True]
    saved_by_save = {entry[2] for entry in fast[0]}
    # The first save (a new run), and each save whose row is not the one written last.
    assert 0 in saved_by_save
    for entry in fast[0]:
        # A save _save_next refused by the file comes with its moment (nine arguments).
        assert entry[3] in (8, 9)
    if refuse is not None and refuse < len(calls):
        assert refuse in saved_by_save
    # Every save with _save_next off went through _save, once each.
    assert [entry[2] for entry in plain[0] if entry[0] == "_save"] == list(range(len(calls)))


@pytest.mark.anyio
async def test_a_delta_saved_on_the_event_loop_does_not_call_save(tmp_path: Path) -> None:
    calls: list[int] = []
    plain_save = SQLiteCheckpointer._save

    class Store(SQLiteCheckpointer):
        def _save(self, *args: Any) -> Any:
            calls.append(args[1])
            return plain_save(self, *args)

    async with Store(tmp_path / "s.db", snapshot_every=100) as store:
        document: dict[str, Any] = {"n": 0}
        for seq in range(4):
            base, document = document, {"n": seq}
            await store.save(
                "r",
                seq,
                document,
                agent="a",
                status="running",
                phase="P",
                base=base if seq else None,
                ops=[["set", ["n"], seq]] if seq else None,
            )
    assert calls == [0]


@pytest.mark.anyio
async def test_a_row_refused_by_the_file_is_saved_by_save_at_the_moment_read(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []
    plain_save = SQLiteCheckpointer._save

    class Store(SQLiteCheckpointer):
        def _save(self, *args: Any) -> Any:
            seen.append(args)
            return plain_save(self, *args)

    async with Store(tmp_path / "s.db", snapshot_every=100) as store:
        document: dict[str, Any] = {"n": 0}
        for seq in range(4):
            if seq == 2:
                with contextlib.closing(sqlite3.connect(tmp_path / "s.db")) as other, other:
                    other.execute("UPDATE runs SET reason = 'look' WHERE run_id = 'r'")
            base, document = document, {"n": seq}
            record = await store.save(
                "r",
                seq,
                document,
                agent="a",
                status="running",
                phase="P",
                base=base if seq else None,
                ops=[["set", ["n"], seq]] if seq else None,
            )
            if seq == 2:
                assert record.updated_at == seen[-1][8]
    assert [args[1] for args in seen] == [0, 2]
    assert len(seen[0]) == 8
    assert len(seen[1]) == 9
