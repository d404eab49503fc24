"""The checkpoint producer's third round of shortcuts, each against its plain version.

``_json.dumps_rows`` (a chunk's rows, written by orjson when every value is of an exact
plain type) gives ``dumps_fast``'s very text, and ``persist._chunks._packed`` the text it
gave before (``dumps_fast`` of the rows); ``persist._delta._count`` of an exact
``Decimal`` (a spend's cost, compared by its spelling) gives what ``_encode`` and
``_same`` give.
"""

from __future__ import annotations

import enum
import uuid
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statemachine import _json
from statemachine._actions import _RECORD_FIELDS
from statemachine._budget import Spend
from statemachine._json import dumps_fast, dumps_rows, fingerprint, loads
from statemachine.persist._chunks import _MESSAGE_KEYS, _packed
from statemachine.persist._codec import _encode
from statemachine.persist._delta import (
    _SPEND_FIELDS,
    _SPEND_VALUES,
    _by_fields,
    _count,
    _same,
    _spend_change,
)

# Text as hostile as JSON gets: quotes, backslashes, every control character, DEL, the
# line and paragraph separators, characters beyond the BMP, and lone surrogates (which
# orjson refuses: such rows go to dumps_fast).
_AWKWARD = ['"', "\\", "\x7f", "\u2028", "\u2029", "\U0001f600", "\ud800", "\udfff", "/"]
characters = st.characters(blacklist_categories=()) | st.sampled_from(
    [chr(code) for code in range(32)] + _AWKWARD
)
texts = st.text(characters, max_size=12) | st.sampled_from(
    ['"\x005"', "\x00", "null", "1e+5", "\\u0000", "\b\x7f", "e+"]
)
ints = (
    st.integers(-(2**63), 2**64 - 1)
    | st.integers(min_value=2**64 - 2, max_value=2**64 + 2)
    | st.integers(max_value=-(2**63) + 2, min_value=-(2**63) - 2)
    | st.integers(min_value=10**399, max_value=10**401)
)
plain_leaves = st.none() | st.booleans() | ints | texts
plain_values = st.recursive(
    plain_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
plain_rows = st.lists(st.lists(plain_values, max_size=6), max_size=6)


def test_every_character_is_written_as_the_c_writer_writes_it() -> None:
    # Each code point but the surrogates, alone and between others: orjson's text is
    # dumps_fast's, character for character.
    everything = [chr(code) for code in range(0x110000) if not 0xD800 <= code < 0xE000]
    for at in range(0, len(everything), 4096):
        row = everything[at : at + 4096]
        assert dumps_rows([row]) == dumps_fast([row])
        joined = "a".join(row)
        assert dumps_rows([[joined]]) == dumps_fast([[joined]])


@settings(max_examples=400, deadline=None)
@given(rows=plain_rows)
# A lone surrogate beside an int too long for the C writer (found by Hypothesis: the
# long-number look encoded the text strictly and raised).
@example(rows=[[{"\ud800": 10**400}]])
@example(rows=[["\udfff", -(10**401)]])
def test_plain_rows_are_written_as_dumps_fast_writes_them(rows: list[list[Any]]) -> None:
    assert dumps_rows(rows) == dumps_fast(rows)


class Text(str):
    pass


class Count(int):
    pass


class Rows(list[Any]):
    pass


class Fields(dict[str, Any]):
    pass


class LikeStr(type):
    """A metaclass that makes its classes equal to ``str`` (and hash as it does)."""

    def __eq__(cls, other: object) -> bool:
        return other is str or type.__eq__(cls, other)

    def __hash__(cls) -> int:
        return hash(str)


class Pretender(metaclass=LikeStr):
    def __str__(self) -> str:
        return "pretend"


class Colour(enum.Enum):
    RED = 1.5


class Word(enum.StrEnum):
    HELLO = "hello"


# Values orjson would write (its own way) or refuse, and none of them plain: each must
# send the rows to dumps_fast, which writes or refuses them as it always has.
_NOT_PLAIN: list[Any] = [
    Text("text"),
    Count(7),
    Rows([1]),
    Fields({"a": 1}),
    Pretender(),
    Colour.RED,
    Word.HELLO,
    uuid.UUID(int=5),
    orjson.Fragment(b'"raw"'),
    orjson.Fragment(b"1"),
    1.5,
    1e16,
    1e-7,
    -0.0,
    float("nan"),
    Decimal("1.50"),
    Decimal("1E+2"),
    (1, "a"),
    {1: "a"},
    {Text("k"): "a"},
    b"bytes",
]


def _either(write: Any, rows: Any) -> tuple[str, Any]:
    try:
        return "text", write(rows)
    except Exception as error:  # the same error either way is the point
        return "error", (type(error), str(error))


@pytest.mark.parametrize("value", _NOT_PLAIN, ids=lambda value: type(value).__name__)
def test_a_value_not_plain_sends_the_rows_to_dumps_fast(value: Any) -> None:
    for rows in ([[value]], [["a", None, value]], [["a"], [[{"k": value}]]]):
        assert not _json._plain_rows(rows)
        assert _either(dumps_rows, rows) == _either(dumps_fast, rows)


@settings(max_examples=200, deadline=None)
@given(rows=plain_rows, at=st.integers(0, 5), value=st.sampled_from(_NOT_PLAIN))
def test_one_value_not_plain_anywhere_sends_the_rows_to_dumps_fast(
    rows: list[list[Any]], at: int, value: Any
) -> None:
    rows = [*rows[:at], ["x", value], *rows[at:]]
    assert not _json._plain_rows(rows)
    assert _either(dumps_rows, rows) == _either(dumps_fast, rows)


def test_the_shapes_orjson_refuses_go_to_dumps_fast() -> None:
    for rows in ([["\ud800"]], [[2**64]], [[-(2**63) - 1]], [[{"\udfff": 1}]], [[10**400]]):
        assert _json._plain_rows(rows)
        assert dumps_rows(rows) == dumps_fast(rows)


def test_rows_that_are_not_lists_of_lists_go_to_dumps_fast() -> None:
    for rows in ([("a",)], (["a"],), Rows([["a"]]), [Rows(["a"])], [[1.5]]):
        assert not _json._plain_rows(rows)
        assert dumps_rows(rows) == dumps_fast(rows)


# --- a chunk packed -----------------------------------------------------------------------

calls = st.lists(
    st.tuples(texts, texts, texts).map(
        lambda values: dict(zip(("name", "arguments", "id"), values, strict=True))
    ),
    max_size=2,
)
messages = st.tuples(
    st.sampled_from(["user", "assistant", "tool", "system"]), texts, calls, texts, texts
).map(lambda values: dict(zip(_MESSAGE_KEYS, values, strict=True)))
gains = st.none() | st.floats(allow_nan=False).map(lambda gain: {"$float": repr(gain)})
records = st.tuples(*[texts] * (len(_RECORD_FIELDS) - 1), gains | st.sampled_from(_NOT_PLAIN)).map(
    lambda values: dict(zip(_RECORD_FIELDS, values, strict=True))
)


def _packed_before(items: list[Any], keys: tuple[str, ...]) -> str:
    """``_packed`` as it was: the rows written by ``dumps_fast``."""
    rows: list[list[Any]] = []
    for item in items:
        if type(item) is not dict or list(item) != list(keys):
            raise ValueError(f"a chunk packs objects of the fields {', '.join(keys)}")
        rows.append(list(item.values()))
    return dumps_fast(rows)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(messages, min_size=1, max_size=32))
def test_a_transcript_chunk_is_packed_as_before(items: list[Any]) -> None:
    assert _packed(items, _MESSAGE_KEYS) == _packed_before(items, _MESSAGE_KEYS)


@settings(max_examples=150, deadline=None)
@given(items=st.lists(records, min_size=1, max_size=32))
def test_an_action_log_chunk_is_packed_as_before(items: list[Any]) -> None:
    assert _either(lambda rows: _packed(rows, _RECORD_FIELDS), items) == _either(
        lambda rows: _packed_before(rows, _RECORD_FIELDS), items
    )


def test_a_packed_chunk_reads_back_to_its_items() -> None:
    items = [
        {
            "role": "tool",
            "content": 'say "hi"\\\n\x00\U0001f600',
            "tool_calls": [{"name": "a", "arguments": "{}", "id": "1"}],
            "tool_call_id": "1",
            "name": "a",
        }
    ] * 3
    text = _packed(items, _MESSAGE_KEYS)
    assert loads(text) == [list(item.values()) for item in items]


def test_items_of_other_fields_are_refused_as_before() -> None:
    good = {key: "" for key in _MESSAGE_KEYS}
    for bad in ({**good, "extra": ""}, dict(reversed(good.items())), Fields(good), ["x"]):
        with pytest.raises(ValueError, match="a chunk packs objects"):
            _packed([good, bad], _MESSAGE_KEYS)


# --- a spend's cost ------------------------------------------------------------------------

moneys = st.sampled_from(["0", "0.0", "-0", "1.50", "1.5", "800", "1E+2", "1E+500", "0E-600"]).map(
    Decimal
) | st.decimals(allow_nan=False, allow_infinity=False, places=2)


class Money(Decimal):
    pass


def exact(value: Any) -> Any:
    return fingerprint(value)


def _count_plain(new: dict[str, Any], parts: dict[str, Any], name: str, item: Any) -> None:
    """``_count`` without its shortcuts: the item encoded and compared."""
    now = _encode(item)
    if not _same(now, new[name]):
        new[name] = parts[name] = now


@settings(max_examples=400, deadline=None)
@given(item=moneys, before=st.data())
def test_a_cost_is_counted_as_encoded_and_compared(item: Decimal, before: st.DataObject) -> None:
    other = before.draw(moneys)
    encodings = [
        _encode(other),
        _encode(item),
        Decimal(str(item)),
        {"$decimal": str(item)},
        {"$decimal": Text(str(item))},
        {Text("$decimal"): str(item)},
        {"$decimal": str(item), "more": 1},
        Money(str(item)),
        str(item),
        0,
        None,
    ]
    was = before.draw(st.sampled_from(encodings))
    made: tuple[dict[str, Any], dict[str, Any]] = ({"cost": was}, {})
    plain: tuple[dict[str, Any], dict[str, Any]] = ({"cost": was}, {})
    _count(made[0], made[1], "cost", item)
    _count_plain(plain[0], plain[1], "cost", item)
    assert exact(made) == exact(plain)
    assert (made[0]["cost"] is was) == (plain[0]["cost"] is was)
    assert list(made[1]) == list(plain[1])


def _takes(amount: Decimal) -> bool:
    try:
        Spend(cost=amount)
    except ValueError:
        return False
    return True


costs = moneys.filter(_takes)


@settings(max_examples=200, deadline=None)
@given(cost=costs, cost_before=costs, kept=st.booleans())
def test_a_spend_s_change_with_a_new_cost_is_by_fields_s(
    cost: Decimal, cost_before: Decimal, kept: bool
) -> None:
    previous = Spend(tokens=1, cost=cost_before, tool_calls=2, model_calls=3)
    value = Spend(tokens=1, cost=Decimal(str(cost_before)) if kept else cost, tool_calls=2)
    encoded: Any = _encode(previous.model_dump())
    made = _spend_change(value, previous, encoded)
    plain = _by_fields(value, previous, encoded, _SPEND_FIELDS, _SPEND_VALUES)
    assert made is not None
    assert plain is not None
    assert exact(made) == exact(plain)
    assert exact(made[0]) == exact(_encode(value.model_dump()))
    # An unchanged spelling keeps the very encoding there; another is set.
    assert (made[0]["cost"] is encoded["cost"]) == (str(value.cost) == str(previous.cost))


def test_a_cost_of_the_same_value_but_another_spelling_is_set() -> None:
    # 0 and 0.00 are equal Decimals, written differently: the new spelling is stored.
    previous = Spend(cost=Decimal("0"))
    value = Spend(cost=Decimal("0.00"))
    encoded: Any = _encode(previous.model_dump())
    made = _spend_change(value, previous, encoded)
    assert made is not None
    assert made[1] == {"cost": Decimal("0.00")}
    assert str(made[1]["cost"]) == "0.00"
