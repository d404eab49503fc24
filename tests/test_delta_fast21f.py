"""A chunk of the codec's messages or action records is packed in one pass (issue 23).

``persist._chunks._packed`` checks such a chunk's items (each exactly a dict of the
chunk's keys in order, every value of the plain form the codec writes) while it makes
their rows, and writes plain rows by orjson as ``_json.dumps_rows`` does; anything else
goes the general way (``_packed_plain``). Here both ways, and the text before orjson
(``dumps_fast`` of the rows), must give the same text or the same error, for the codec's
form and for it with any one value, key or item made otherwise; the codec's own chunks
take the one pass; and whole runs store the same rows either way.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_delta_fast3 import _NOT_PLAIN, Fields, Text, _either, _packed_before, calls, texts
from test_save_fast5 import phases_of, save_run

from statemachine._actions import _RECORD_FIELDS
from statemachine.persist import _chunks
from statemachine.persist._chunks import _MESSAGE_KEYS, _packed, _packed_plain
from statemachine.persist._delta import PhaseDumper

messages = st.tuples(
    st.sampled_from(["user", "assistant", "tool", "system"]), texts, calls, texts, texts
).map(list)
gains = st.none() | st.floats(allow_nan=False).map(lambda gain: {"$float": repr(gain)})
records = st.tuples(*[texts] * (len(_RECORD_FIELDS) - 1), gains).map(list)
# What may stand where a plain value stood: the values test_delta_fast3 finds not plain,
# a float, a tuple of texts, a list of a text, a dict of a text, and a text subclass.
others = st.sampled_from([*_NOT_PLAIN, 2.5, ("a",), ["a"], {"k": "v"}, Text("t"), None, 3])


def _items(rows: list[list[Any]], keys: tuple[str, ...]) -> list[Any]:
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _all_ways(items: list[Any], keys: tuple[str, ...]) -> None:
    fast = _either(lambda chunk: _packed(chunk, keys), items)
    assert fast == _either(lambda chunk: _packed_plain(chunk, keys), items)
    assert fast == _either(lambda chunk: _packed_before(chunk, keys), items)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(messages, min_size=1, max_size=32))
def test_the_codec_s_messages_are_packed_as_the_general_way_packs_them(
    rows: list[list[Any]],
) -> None:
    _all_ways(_items(rows, _MESSAGE_KEYS), _MESSAGE_KEYS)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(records, min_size=1, max_size=32))
def test_the_codec_s_records_are_packed_as_the_general_way_packs_them(
    rows: list[list[Any]],
) -> None:
    _all_ways(_items(rows, _RECORD_FIELDS), _RECORD_FIELDS)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(messages, min_size=1, max_size=6),
    at=st.integers(0, 5),
    column=st.integers(0, 4),
    other=others,
    deep=st.sampled_from(["value", "call", "call key", "call value"]),
)
def test_a_message_value_made_otherwise_is_packed_as_before(
    rows: list[list[Any]], at: int, column: int, other: Any, deep: str
) -> None:
    row = rows[at % len(rows)]
    if deep == "value":
        row[column] = other
    elif deep == "call":
        row[2] = [*row[2], other]
    elif deep == "call key":
        row[2] = [*row[2], {other if isinstance(other, str) else "k": "v", 1: "v"}]
    else:
        row[2] = [*row[2], {"name": other}]
    _all_ways(_items(rows, _MESSAGE_KEYS), _MESSAGE_KEYS)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(records, min_size=1, max_size=6),
    at=st.integers(0, 5),
    column=st.integers(0, len(_RECORD_FIELDS) - 1),
    other=others,
    in_gain=st.booleans(),
)
def test_a_record_value_made_otherwise_is_packed_as_before(
    rows: list[list[Any]], at: int, column: int, other: Any, in_gain: bool
) -> None:
    row = rows[at % len(rows)]
    if in_gain:
        row[-1] = {"$float": other} if column % 2 else {other if type(other) is str else 5: "1.5"}
    else:
        row[column] = other
    _all_ways(_items(rows, _RECORD_FIELDS), _RECORD_FIELDS)


@pytest.mark.parametrize("keys", [_MESSAGE_KEYS, _RECORD_FIELDS])
def test_items_of_other_forms_are_refused_or_packed_as_before(keys: tuple[str, ...]) -> None:
    good = dict.fromkeys(keys, "")
    for bad in (
        {**good, "extra": ""},
        dict(reversed(good.items())),
        {key: "" for key in keys[:-1]},
        Fields(good),
        {Text(key): "" for key in keys},
        ["x"],
        None,
    ):
        _all_ways([good, bad], keys)
        _all_ways([bad], keys)
    # Rows orjson refuses: a lone surrogate, an int beyond 64 bits (dumps_fast's text).
    for value in ("\ud800", 2**64, {"\udfff": "x"}):
        _all_ways([{**good, keys[1]: value}], keys)
    _all_ways([], keys)


def _chunks_of(calls: int) -> list[tuple[list[Any], tuple[str, ...]]]:
    """Every chunk a run of ``calls`` tool calls packs, with its keys."""
    packed: list[tuple[list[Any], tuple[str, ...]]] = []
    plain = _chunks._packed

    def spy(items: list[Any], keys: Any) -> str:
        packed.append((list(items), keys))
        return plain(items, keys)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_chunks, "_packed", spy)
        from statemachine.persist import _delta

        patch.setattr(_delta, "_packed", spy)
        dumper = PhaseDumper()
        for phase in phases_of(calls):
            dumper.dump(phase)
    return packed


def test_the_codec_s_chunks_of_a_run_take_the_one_pass() -> None:
    chunks = _chunks_of(70)
    assert {keys for _, keys in chunks} == {_MESSAGE_KEYS, _RECORD_FIELDS}
    for items, keys in chunks:
        rows = (_chunks._message_rows if keys is _MESSAGE_KEYS else _chunks._record_rows)(items)
        assert rows == [list(item.values()) for item in items]
        assert _packed(items, keys) == _packed_plain(items, keys) == _packed_before(items, keys)


def test_a_run_stores_the_same_rows_packed_either_way() -> None:
    states = phases_of(70)
    with tempfile.TemporaryDirectory() as folder:
        fast = anyio.run(save_run, Path(folder) / "fast.db", "r", states, {"snapshot_every": 9})
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_chunks, "_message_rows", lambda items: None)
            patch.setattr(_chunks, "_record_rows", lambda items: None)
            plain = anyio.run(
                save_run, Path(folder) / "plain.db", "r", states, {"snapshot_every": 9}
            )
    assert fast == plain


@pytest.mark.parametrize("other", [*_NOT_PLAIN, 2.5, ("a",), Text("t")], ids=repr)
def test_each_value_made_otherwise_in_each_place_is_packed_as_before(other: Any) -> None:
    message = ["tool", "c", [{"name": "n", "arguments": "{}", "id": "i"}], "i", "n"]
    record = ["i", "t", "read", "e", "k", "x", "ok", "r", {"$float": "0.5"}]
    for row, keys in ((message, _MESSAGE_KEYS), (record, _RECORD_FIELDS)):
        for column in range(len(row)):
            changed = [*row[:column], other, *row[column + 1 :]]
            _all_ways(_items([row, changed, row], keys), keys)
    for call in ({"name": other}, {"name": "n", "id": other}):
        _all_ways(_items([[*message[:2], [call], *message[3:]]], _MESSAGE_KEYS), _MESSAGE_KEYS)
    _all_ways(_items([[*record[:-1], {"$float": other}]], _RECORD_FIELDS), _RECORD_FIELDS)
