"""A compressed snapshot with its long texts after its JSON (issue 23, round 9).

A snapshot of the phase codec's documents inflates to ``_TEXTS_AFTER``, the places of
its long list texts and its JSON without them, then those texts as they are
(``_chain._whole``, ``_chain._compressed``); ``unseal`` reads it back with
``_texts_after``. These check that what it reads is what the JSON alone reads (the form
written before, and still written for other callers' documents), to the type and the
order of keys, over random documents and a real run; that a damaged form is refused as a
damaged checkpoint; and that a store written before (``tests/data/pre-raw-texts-runs.db``,
by ``tests/data/make_pre_raw_texts_runs.py`` from commit 20153a6) loads, verifies and
resumes.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from old_stores import copied as _copied
from old_stores import looker, paid, phase_of, resume_waiting

from statemachine import Done, Runner, SQLiteCheckpointer
from statemachine._errors import CheckpointCorruptError
from statemachine._json import dumps, loads
from statemachine.persist._chain import (
    _COMPRESS_FROM,
    _PIECE,
    _TEXTS_AFTER,
    _Chain,
    _compressed,
    _loads,
    _text,
    _texts_after,
    _whole,
    _written,
)
from statemachine.persist._rows import _DIGEST, _system_clock
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

# Text that JSON escapes (quotes, backslashes, controls), and text outside ASCII and
# outside the basic plane: each a character of its own in a str, several bytes in UTF-8.
awkward = st.sampled_from(['"', "\\", "\n", "\x00", "\u00e9", "\u20ac", "\U0001f600", "a", "{"])
words = st.text(alphabet=awkward, max_size=6) | st.text(max_size=6)
long_texts = st.builds(
    lambda seed, size: (seed * (_PIECE // max(len(seed), 1) + size + 1))[: _PIECE + size],
    st.text(alphabet=awkward, min_size=1, max_size=12) | st.text(min_size=1, max_size=12),
    st.integers(min_value=-2, max_value=300),
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | words
    | long_texts
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(words, inner, max_size=4),
    max_leaves=14,
)
payloads = st.builds(
    lambda document, extra: {"kind": "full", "document": document, **extra},
    st.dictionaries(words, values, max_size=5),
    st.dictionaries(st.sampled_from(["previous", "x"]), values, max_size=2),
)


def _parts(payload: Any) -> list[Any]:
    parts: list[Any] = []
    _written(payload, {}, {}, parts)
    return parts


def _unsealed(plain: bytes) -> tuple[str, str]:
    """What ``unseal`` reads from a stored ``plain``: the value (its repr: the types and the
    order of keys count) or the damage it names (its first words)."""
    chain = _Chain(snapshot_every=50, sealer=None, clock=_system_clock, where="test")
    blob = chain.seal_plain(plain, b"r:0")
    try:
        return ("value", repr(chain.unseal(blob, b"r:0", "r", "checkpoint 0")))
    except CheckpointCorruptError as error:
        return ("error", error.detail.split(" (")[0])


@settings(max_examples=200, deadline=None)
@given(payload=payloads)
def test_a_snapshot_with_its_texts_after_reads_as_its_json_reads(payload: Any) -> None:
    parts = _parts(payload)
    text = _text(parts)
    plain = _unsealed(zlib.compress(text.encode("utf-8"), 1))
    assert plain == ("value", repr(_loads(text.encode("utf-8"))))
    whole = _whole(payload, parts)
    assert zlib.decompress(whole)[:1] == _TEXTS_AFTER
    assert _unsealed(whole) == plain
    by_pieces, pieces = _compressed(payload, parts, {})
    assert zlib.decompress(by_pieces) == zlib.decompress(whole)
    assert _unsealed(by_pieces) == plain
    # Again, with every piece taken from the first time: the same blob.
    assert _compressed(payload, parts, pieces)[0] == by_pieces


@settings(max_examples=100, deadline=None)
@given(first=payloads, second=payloads)
def test_the_next_snapshot_by_pieces_reads_as_its_json_reads(first: Any, second: Any) -> None:
    """The next snapshot holds some of the same texts (their pieces reused) and others."""
    _, pieces = _compressed(first, _parts(first), {})
    shared = {"kind": "full", "document": {"a": first["document"], "b": [second, first]}}
    shared["document"]["c"] = [
        item for value in first["document"].values() if type(value) is list for item in value
    ]
    parts = _parts(shared)
    blob, _ = _compressed(shared, parts, pieces)
    assert _unsealed(blob) == ("value", repr(_loads(_text(parts).encode("utf-8"))))


def test_the_long_texts_are_stored_as_they_are() -> None:
    chunk = json.dumps([['call "1"', "back\\slash", "\u20ac\U0001f600"]] * 40)
    assert len(chunk) >= _PIECE
    payload = {"kind": "full", "document": {"fields": {"transcript": [chunk, chunk, {"a": 1}]}}}
    inflated = zlib.decompress(_whole(payload, _parts(payload)))
    assert inflated.endswith((chunk + chunk).encode("utf-8"))  # not escaped
    places, left = json.loads(inflated[1 : -2 * len(chunk.encode("utf-8"))])
    assert places == [
        ["document", "fields", "transcript", 0, len(chunk)],
        ["document", "fields", "transcript", 1, len(chunk)],
    ]
    assert left == {"kind": "full", "document": {"fields": {"transcript": [None, None, {"a": 1}]}}}


def _form(places: Any, payload: Any, texts: str) -> bytes:
    return _TEXTS_AFTER + (json.dumps([places, payload]) + texts).encode("utf-8")


GOOD = (
    [["document", "t", 1, 3]],
    {"kind": "full", "document": {"t": [1, None]}},
    "abc",
)
DAMAGED = {
    "not a list of two": (_TEXTS_AFTER + b'{"kind": "full"}'),
    "places not a list": _form({"a": 1}, GOOD[1], "abc"),
    "a place too short": _form([[3]], GOOD[1], "abc"),
    "a key that is not there": _form([["document", "u", 1, 3]], GOOD[1], "abc"),
    "a key that is a number": _form([[0, 1, 3]], GOOD[1], "abc"),
    "through a list": _form([["document", "t", 0, 1, 3]], GOOD[1], "abc"),
    "an item that is not left out": _form([["document", "t", 0, 3]], GOOD[1], "abc"),
    "an index past the end": _form([["document", "t", 2, 3]], GOOD[1], "abc"),
    "a negative index": _form([["document", "t", -1, 3]], GOOD[1], "abc"),
    "an index that is true": _form([["document", "t", True, 3]], GOOD[1], "abc"),
    "a length past the end": _form(GOOD[0], GOOD[1], "ab"),
    "a negative length": _form([["document", "t", 1, -1]], GOOD[1], "abc"),
    "text left over": _form(GOOD[0], GOOD[1], "abcd"),
    "the same place twice": _form([*GOOD[0], *GOOD[0]], GOOD[1], "abcabc"),
    "not JSON": _TEXTS_AFTER + b"[[], {",
    "not UTF-8": _TEXTS_AFTER + b'[[], {"a": "\xff"}]',
}


def test_a_well_formed_example_reads() -> None:
    assert _texts_after(_form(*GOOD)) == {"kind": "full", "document": {"t": [1, "abc"]}}
    assert _unsealed(zlib.compress(_form(*GOOD))) == (
        "value",
        repr({"kind": "full", "document": {"t": [1, "abc"]}}),
    )


@pytest.mark.parametrize("plain", list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_damaged_form_is_a_damaged_checkpoint(plain: bytes) -> None:
    with pytest.raises(ValueError, match=r"."):
        _texts_after(plain)
    assert _unsealed(zlib.compress(plain)) == ("error", "checkpoint 0 cannot be read")


def _snapshots(path: Path, run_id: str) -> list[bytes]:
    """The inflated content of each compressed snapshot of the run, in order."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT blob FROM checkpoints WHERE run_id = ? AND kind = 'full' ORDER BY seq",
            (run_id,),
        ).fetchall()
    return [zlib.decompress(bytes(blob)[_DIGEST:]) for (blob,) in rows if blob[_DIGEST] == 0x78]


pytestmark = pytest.mark.anyio


async def test_a_real_run_loads_the_document_it_saved(tmp_path: Path) -> None:
    """A run long enough that its snapshots are compressed (the first whole, the next by
    pieces), its last followed by deltas: a fresh store loads the very document the
    runner saved last, and the phase it holds."""
    path = tmp_path / "runs.db"
    lookups = 150
    calls = [tool_call("lookup", {"key": f'k"{n}\\ \u20ac'}) for n in range(lookups)]
    saved: list[Any] = []
    async with SQLiteCheckpointer(path) as store:
        save = store.save

        async def keep(run_id: str, seq: int, document: Any, **rest: Any) -> Any:
            saved.append(loads(dumps(document)))
            return await save(run_id, seq, document, **rest)

        store.save = keep  # type: ignore[method-assign]
        runner = Runner(
            looker(),
            model=ScriptedModel([*calls, reply("Done.")]),
            gate=AutoDenyGate(),
            checkpointer=store,
        )
        result = await runner.run(None, "Look the keys up", run_id="r")
    assert isinstance(result.final, Done)
    snapshots = _snapshots(path, "r")
    assert len(snapshots) >= 2
    assert all(content[:1] == _TEXTS_AFTER for content in snapshots)
    assert all(len(content) >= _COMPRESS_FROM for content in snapshots)
    async with SQLiteCheckpointer(path) as store:
        seq, document = await store.load("r")
        assert await store.verify("r") == seq
        history = await store.history("r")
    assert not history[-1].snapshot  # deltas after the last snapshot
    assert dumps(document) == dumps(saved[-1])
    assert document == saved[-1]
    final = phase_of(document, looker(), "r")
    assert final == result.final
    assert len(list(final.transcript)) == len(list(result.final.transcript))


async def test_a_store_written_before_loads_verifies_and_resumes(tmp_path: Path) -> None:
    path = _copied("pre-raw-texts-runs.db", tmp_path)
    snapshots = _snapshots(path, "waiting")
    assert len(snapshots) >= 2
    assert all(content[:1] == b"{" for content in snapshots)  # the JSON alone
    async with SQLiteCheckpointer(path) as store:
        seq, document = await store.load("waiting")
        assert await store.verify("waiting") == seq
        history = await store.history("waiting")
    assert not history[-1].snapshot
    assert document["version"] == 3
    waiting = phase_of(document, looker(), "waiting")
    assert len(waiting.loop.actions) == 201
    assert len(list(waiting.transcript)) == 1 + 2 * 200 + 1
    paid.clear()
    resumed, after, again, verified = await resume_waiting(path)
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert paid == ["10.00"]
    assert verified == after
    assert phase_of(again, looker(), "waiting") == resumed.final
