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

from statemachine import SQLiteCheckpointer, _json
from statemachine._json import dumps, dumps_bytes, dumps_fast, dumps_reusing, fingerprint, loads

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
