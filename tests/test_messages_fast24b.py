# pyright: reportPrivateUsage=false
"""Round 24's first case of ``_result_text``, against the way it wrote every result before.

A dict whose values are all exactly text, ints, bools or ``None`` (the types asked in C,
``_FLAT``) is written by orjson at once; what orjson refuses (a key that is not exactly
text, an int beyond 64 bits, a lone surrogate) goes the whole way as before. The text, or
the error, is the same as the function's before (``_before``, copied here) for any value.
"""

from __future__ import annotations

import enum
import math
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import _json
from statemachine._fast import _messages
from statemachine._fast._canonical import _INT_BOUND, _plain_item
from statemachine._fast._messages import _FLAT, _c_writes_as_dumps, _result_text


def _before(value: Any) -> str:
    """``_result_text`` as round 23 left it (e4724fd), its check in Python, item by item."""
    if type(value) is dict and _messages._plain_c is not None:
        held = cast("dict[object, object]", value)
        for key, item in held.items():
            if type(key) is not str:
                break
            if type(item) is str or type(item) is bool or item is None:
                continue
            if type(item) is int:
                if -_INT_BOUND < item < _INT_BOUND:
                    continue
                break
            if not _plain_item(item):
                break
        else:
            dumps = _messages._orjson_dumps or _messages._load_orjson()
            try:
                return dumps(value).decode()
            except TypeError:
                return "".join(_messages._plain_c(value, 0))
    if _c_writes_as_dumps(value):
        return _json.dumps_fast(value)
    return _json.dumps(value)


def _outcome(write: Any, value: Any) -> tuple[str, Any]:
    try:
        return ("text", write(value))
    except Exception as error:  # the same error, of the same type and words
        return ("error", (type(error), str(error)))


class _Text(str):
    __slots__ = ()


class _Number(int):
    __slots__ = ()


class _Colour(enum.Enum):
    RED = 42


class _Level(enum.IntEnum):
    HIGH = 42


class _Hiding(dict[str, Any]):
    """A dict whose items hide its last key from ``dumps`` (orjson reads the dict whole)."""

    def items(self) -> Any:
        return list(super().items())[:-1]


_INTS = st.one_of(
    st.integers(),
    st.sampled_from(
        [
            2**63 - 1,
            2**63,
            2**64 - 1,
            2**64,
            -(2**63),
            -(2**63) - 1,
            10**399,
            10**400 - 1,
            10**400,
            -(10**400),
        ]
    ),
)
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-07, 1e16, 1.0, -0.0, 1e300, 5e-324, math.nan, math.inf]),
)
_TEXTS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", '"', "\\", "\u2028", "é"]),
)
_LEAVES = st.one_of(
    _TEXTS,
    _INTS,
    st.booleans(),
    st.none(),
    _FLOATS,
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.builds(_Text, _TEXTS),
    st.builds(_Number, st.integers()),
    st.sampled_from([_Colour.RED, _Level.HIGH, b"x", (1, "a"), [True, None]]),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["\udc00", "k"]),
    st.builds(_Text, st.text(max_size=4)),
    st.integers(-3, 3),
    st.none(),
    st.booleans(),
)
# The flat results the first case is for, often; and any other result, nested or not.
_FLAT_RESULTS = st.dictionaries(
    _KEYS, st.one_of(_TEXTS, _INTS, st.booleans(), st.none()), max_size=5
)
_RESULTS = st.dictionaries(_KEYS, _VALUES, max_size=5)


@settings(max_examples=600)
@given(st.one_of(_FLAT_RESULTS, _RESULTS))
def test_a_result_is_written_as_before(value: dict[Any, Any]) -> None:
    assert _outcome(_result_text, value) == _outcome(_before, value)


@settings(max_examples=200)
@given(st.one_of(_VALUES, st.builds(_Hiding, _FLAT_RESULTS)))
def test_any_other_value_is_written_as_before(value: Any) -> None:
    assert _outcome(_result_text, value) == _outcome(_before, value)


@pytest.mark.parametrize(
    "value",
    [
        {"key": "k0", "value": 42, "unit": "widgets"},
        {},
        {"a": True, "b": False, "c": None, "d": -(2**63), "e": 2**64 - 1},
        {"a": 2**64},  # orjson refuses: the C encoder writes it, as before
        {"a": -(2**63) - 1},
        {"a": 10**400},  # beyond _INT_BOUND: dumps_fast, as before
        {"a": "\ud800"},  # a lone surrogate: orjson refuses, the C encoder writes it
        {"\udc00": 1},
        {_Text("k"): 1},  # a key not exactly text: orjson refuses
        {1: "a"},  # dumps refuses a key that is not text (the C encoder would write "1")
        {None: 1},
        {"a": 1e-07},  # a float: dumps_fast writes repr's spelling
        {"a": 1e16},
        {"a": math.nan},
        {"a": _Colour.RED},  # orjson would write 42
        {"a": _Level.HIGH},
        {"a": _Text("x")},
        {"a": _Number(3)},
        {"a": Decimal("1.50")},
        {"a": [1, {"b": None}]},
        _Hiding({"a": 1, "b": 2}),  # orjson would write both keys; dumps asks items()
    ],
)
def test_each_edge_is_written_as_before(value: Any) -> None:
    assert _outcome(_result_text, value) == _outcome(_before, value)


def test_the_first_case_takes_only_the_four_exact_types() -> None:
    assert frozenset({str, int, bool, type(None)}) == _FLAT
    # Every int orjson writes (64 bits) is within the bound the check below keeps.
    assert _INT_BOUND > 2**64


def test_a_flat_result_is_written_without_the_item_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first case answers before the loop: with the loop's bound at 1 and its
    fallback refusing, an int above the bound is still written, by orjson."""
    _result_text({"warm": 1})  # orjson's dumps loaded

    def refused(value: object) -> bool:
        raise AssertionError(f"the loop's fallback was asked about {value!r}")

    monkeypatch.setattr(_messages, "_INT_BOUND", 1)
    monkeypatch.setattr(_messages, "_c_writes_as_dumps", refused)
    assert _result_text({"key": "k0", "value": 42, "unit": "widgets"}) == (
        '{"key":"k0","value":42,"unit":"widgets"}'
    )
    with pytest.raises(AssertionError, match="fallback was asked"):
        _result_text({"key": 1.5})


def test_the_first_case_loads_orjson_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_messages, "_orjson_dumps", None)
    assert _result_text({"a": 1}) == '{"a":1}'
    assert _messages._orjson_dumps is not None


def test_without_the_c_encoder_the_first_case_is_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where CPython's ``_json`` is missing, every result goes the way it went before."""
    monkeypatch.setattr(_messages, "_plain_c", None)

    def counted(value: object) -> bytes:
        raise AssertionError("orjson was asked")

    monkeypatch.setattr(_messages, "_orjson_dumps", counted)
    assert _result_text({"key": "k0", "value": 42}) == '{"key":"k0","value":42}'
