"""statemachine._json.dumps_bytes: a checkpoint's JSON as bytes, written by orjson, read back
exactly as ``dumps`` is, error for error."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import MemoryCheckpointer, SQLiteCheckpointer, _json
from statemachine._json import dumps, dumps_bytes, dumps_fast, dumps_reusing, fingerprint, loads
from statemachine.persist._chain import _Chain
from statemachine.persist._delta import FiniteOps
from statemachine.persist._rows import _EPOCH, _Change, _change_of

numbers = st.one_of(
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**64 + 2),
    st.integers(min_value=10**399, max_value=10**402),
    st.floats(allow_nan=False, allow_infinity=False),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.sampled_from([Decimal("1E+500"), Decimal("-0"), Decimal("0E-600"), 1e16, 1e-7, -0.0]),
)
texts = st.text(max_size=8) | st.sampled_from(['"\x005"', "null", "1e+5", "\\u0000", "\b\x7f"])
leaves = st.none() | st.booleans() | numbers | texts
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
# What the phase codec writes: no float, no Decimal (both are tagged), ints of 64 bits.
codec_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


# A value holding a NaN or an infinity somewhere: at the top, or at any depth of lists
# and objects among other values (a null beside it or not).
not_finite = st.sampled_from([float("nan"), float("inf"), -float("inf")])
with_not_finite = st.recursive(
    not_finite,
    lambda inner: (
        st.tuples(st.lists(json_values, max_size=3), inner, st.lists(json_values, max_size=3)).map(
            lambda parts: [*parts[0], parts[1], *parts[2]]
        )
        | st.tuples(st.dictionaries(texts, json_values, max_size=3), texts, inner).map(
            lambda parts: {**parts[0], parts[1]: parts[2]}
        )
    ),
    max_leaves=6,
)


class MyOps(FiniteOps):
    """A subclass of FiniteOps: not the exact type, so it vouches for nothing."""


def read(data: bytes | str) -> str:
    """What loads reads back, exactly: 1, 1.0, True and Decimal('1.00') all differ."""
    return fingerprint(loads(data))


def test_orjson_writes_it() -> None:
    assert _json._import_orjson() is orjson
    value = {"kind": "delta", "ops": [["set", ["step"], 3], ["set", ["gain"], None]]}
    assert dumps_bytes(value) == orjson.dumps(value)


@settings(max_examples=400, deadline=None)
@given(value=json_values)
def test_it_reads_back_exactly_as_dumps(value: Any) -> None:
    """Floats, Decimals in every spelling, ints past 64 bits and past 400 digits, text
    that looks like a number, a mark or null: read back as dumps' text is."""
    assert read(dumps_bytes(value)) == read(dumps(value))


@settings(max_examples=300, deadline=None)
@given(value=codec_values)
def test_the_codec_documents_bytes_are_the_c_writers(value: Any) -> None:
    """A document of the phase codec (text, ints, None, bools) is written byte for byte as
    the C writer wrote it: checkpoints do not change with orjson installed or not."""
    assert dumps_bytes(value) == dumps_fast(value).encode()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), Decimal("NaN")])
def test_a_number_that_is_not_finite_is_refused_as_dumps_refuses_it(bad: Any) -> None:
    """orjson writes NaN and the infinities as null: with a null beside it or not, the
    value is refused as dumps refuses it, never written as null."""
    for value in ([bad], {"gain": None, "elapsed": bad}, [None, [bad, None]]):
        with pytest.raises(ValueError, match="not a JSON number"):
            dumps(value)
        with pytest.raises(ValueError, match="not a JSON number"):
            dumps_bytes(value)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 12, 2, 1, 30, tzinfo=UTC),
        Point(1),
        Colour.RED,
        (1, None, "a"),
        {"key": (None, Decimal("0.10"))},
        2**64,
        -(2**63) - 1,
        {"gain": None, "cost": Decimal("0.1")},  # a Decimal orjson reads back as a float
    ],
)
def test_a_value_orjson_writes_its_own_way_reads_back_as_dumps(value: Any) -> None:
    assert read(dumps_bytes({"value": value})) == read(dumps({"value": value}))


def test_a_key_that_is_not_text_is_written_as_the_c_writer_writes_it() -> None:
    """Keys are the caller's to refuse (dumps_fast's rule): orjson leaves them to it."""
    assert dumps_bytes({1: None}) == dumps_fast({1: None}).encode()


@pytest.mark.anyio
async def test_a_delta_with_a_nan_is_not_saved(tmp_path: Path) -> None:
    """A caller's ops holding a NaN: the save is refused and nothing is stored."""
    document: dict[str, Any] = {"version": 2, "n": 1, "gain": None}
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        await store.save("r", 0, document, agent="a", status="running", phase="P")
        following = {**document, "n": float("nan")}
        with pytest.raises(ValueError, match="not a JSON number"):
            await store.save(
                "r",
                1,
                following,
                agent="a",
                status="running",
                phase="P",
                base=document,
                ops=[["set", ["n"], float("nan")]],
            )
        assert (await store.record("r")).seq == 0
        assert await store.load("r") == (0, document)


def test_a_lone_surrogate_is_refused_as_before() -> None:
    """Not text: the C writer's text cannot be encoded either, and neither is written."""
    with pytest.raises(UnicodeEncodeError):
        dumps_fast("\ud800").encode()
    with pytest.raises(UnicodeEncodeError):
        dumps_bytes("\ud800")
    with pytest.raises(UnicodeEncodeError):
        dumps_bytes({"text": "a\udfff", "gain": None})


@settings(max_examples=200, deadline=None)
@given(items=st.lists(json_values, max_size=6))
def test_a_snapshot_written_by_parts_reads_back_as_dumps(items: list[Any]) -> None:
    """dumps_reusing writes each list item by dumps_bytes, and again from its kept text."""
    value = {"kind": "full", "items": items, "text": ["null", "1e+5"]}
    text, texts = dumps_reusing(value, {})
    assert read(text) == read(dumps(value))
    again, _ = dumps_reusing(value, texts)
    assert again == text


@settings(max_examples=400, deadline=None)
@given(value=json_values, codec=codec_values)
def test_a_vouched_value_is_written_as_an_unvouched_one(value: Any, codec: Any) -> None:
    """finite=True only skips the NaN read-back: every value without a NaN or an
    infinity reads back as dumps' text does (fallbacks: "e+", ints past 64 bits), and a
    document of the phase codec's is written byte for byte as without the vouch."""
    assert read(dumps_bytes(value, finite=True)) == read(dumps(value))
    assert dumps_bytes(codec, finite=True) == dumps_bytes(codec) == dumps_fast(codec).encode()


@settings(max_examples=200, deadline=None)
@given(bad=with_not_finite)
def test_a_value_that_is_not_finite_anywhere_is_refused_unless_vouched(bad: Any) -> None:
    """Without the vouch a NaN or an infinity at any depth is refused, as dumps refuses
    it; with it (the phase codec's FiniteOps only) the read-back is skipped."""
    for value in (bad, {"kind": "delta", "ops": [["set", ["gain"], None], ["set", ["n"], bad]]}):
        with pytest.raises(ValueError, match="not a JSON number"):
            dumps(value)
        with pytest.raises(ValueError, match="not a JSON number"):
            dumps_bytes(value)
        with pytest.raises(ValueError, match="not a JSON number"):
            dumps_bytes(value, finite=False)


def test_only_finite_ops_of_the_exact_type_vouch() -> None:
    assert _change_of(None, None) is None
    assert _change_of(None, [["set", ["n"], 1]]) == _Change(None, [["set", ["n"], 1]], False)
    assert _change_of(None, FiniteOps([["set", ["n"], 1]])) == (None, [["set", ["n"], 1]], True)
    assert _change_of(None, MyOps([["set", ["n"], 1]])) == (None, [["set", ["n"], 1]], False)


@settings(max_examples=100, deadline=None)
@given(bad=with_not_finite, sealed=st.booleans())
def test_every_path_of_a_chain_but_the_vouched_delta_refuses_a_value_not_finite(
    bad: Any, sealed: bool
) -> None:
    """_Chain.blob, every path: a delta of no ops, of a plain list, of a FiniteOps
    subclass, of FiniteOps the store did not use as given (it diffed the document), a
    snapshot of a document holding it (with FiniteOps or not), and an effect's or a
    decision's payload: each refuses. Only the FiniteOps delta used as given is not read
    back (written as orjson writes it)."""
    from statemachine import CheckpointCipher

    cipher = CheckpointCipher({"k": b"k" * 32}, current="k") if sealed else None
    chain = _Chain(snapshot_every=1, sealer=cipher, clock=lambda: _EPOCH, where="here")
    ops = [["set", ["gain"], None], ["set", ["n"], bad]]
    delta = {"kind": "delta", "ops": ops}
    document = {"n": bad, "items": [{"n": bad}, "x"], "gain": None}
    changes: list[_Change | None] = [
        None,
        _change_of({}, list(ops)),
        _change_of({}, MyOps(ops)),
    ]
    for change in changes:
        payload = delta if change is None else {"kind": "delta", "ops": change.ops}
        with pytest.raises(ValueError, match="not a JSON number"):
            chain.blob("r", 1, payload, change)
    diffed = _change_of({}, FiniteOps(ops))  # the store's own ops, not the caller's
    with pytest.raises(ValueError, match="not a JSON number"):
        chain.blob("r", 1, {"kind": "delta", "ops": list(ops)}, diffed)
    for change in (None, diffed, _change_of({}, list(ops))):
        with pytest.raises(ValueError, match="not a JSON number"):
            chain.blob("r", 0, {"kind": "full", "document": document, "previous": ""}, change)
    with pytest.raises(ValueError, match="not a JSON number"):
        chain.seal({"kind": "decision", "decision": document}, b"r")
    if sealed:
        return
    # The vouched path: a NaN that got in anyway is written as orjson writes it, null.
    vouched = _change_of({}, FiniteOps([["set", ["n"], float("nan")]]))
    assert vouched is not None
    written, _ = chain.blob("r", 1, {"kind": "delta", "ops": vouched.ops}, vouched)
    assert loads(written[32:]) == {"kind": "delta", "ops": [["set", ["n"], None]]}


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("ops_type", [list, MyOps, FiniteOps])
async def test_a_store_refuses_a_nan_it_was_not_vouched_for(
    tmp_path: Path, kind: str, ops_type: type[list[Any]]
) -> None:
    """Through a store's save: ops that are not FiniteOps (a list, a subclass) holding a
    NaN are refused; FiniteOps whose base is not the store's last document are not used
    (the store diffs the document, which holds the NaN) and are refused too; a first
    checkpoint (a snapshot) with a NaN in its document is refused whatever the ops.
    Nothing is stored by any of them."""
    store: Any = (
        MemoryCheckpointer() if kind == "memory" else SQLiteCheckpointer(tmp_path / "runs.db")
    )
    try:
        document: dict[str, Any] = {"version": 3, "n": 1, "gain": None}
        nan = float("nan")
        with pytest.raises(ValueError, match="not a JSON number"):
            await store.save(
                "r", 0, {**document, "n": nan}, agent="a", status="running", phase="P",
                base=None, ops=ops_type([["set", ["n"], nan]]),
            )  # fmt: skip
        await store.save("r", 0, document, agent="a", status="running", phase="P")
        # FiniteOps used as given is the vouched path: the base must not be the document.
        base = dict(document) if ops_type is FiniteOps else document
        with pytest.raises(ValueError, match="not a JSON number"):
            await store.save(
                "r", 1, {**document, "n": nan}, agent="a", status="running", phase="P",
                base=base, ops=ops_type([["set", ["n"], nan]]),
            )  # fmt: skip
        assert (await store.record("r")).seq == 0
        assert await store.load("r") == (0, document)
    finally:
        if kind == "sqlite":
            await store.aclose()
