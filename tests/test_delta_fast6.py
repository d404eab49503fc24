"""The checkpoint producer's shortcut of issue 23's eleventh round (second part) gives
what the plain path gives.

- ``_codec._encode`` of an exact ``ActionRecord`` reads its fields in place (no
  ``model_dump``, no ``_encode(None)`` for a gain not yet given): the same object of the
  same keys in the same order, each value of the same type, as the record's
  ``model_dump`` with every value not of exact ``str`` encoded; a field that is not an
  exact ``str`` (set around the class's converters) takes that long way.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import _RECORD_FIELDS, ActionRecord
from statemachine.persist._codec import _encode, _record_long


class Text(str):
    """Text of a class of its own: encoded as plain text, never kept as it is."""

    __slots__ = ()


def _plain(record: ActionRecord) -> dict[str, Any]:
    """``_encode`` of a record as it was before the shortcut: its model_dump, text of
    exact ``str`` as it is, every other value encoded."""
    dumped = record.model_dump()
    return {key: item if type(item) is str else _encode(item) for key, item in dumped.items()}


def _typed(value: Any) -> Any:
    """``value`` with each leaf's type beside it (so that ``==`` compares types too)."""
    if type(value) is dict:
        pairs = cast("dict[str, Any]", value)
        return ("dict", [(key, _typed(item)) for key, item in pairs.items()])
    if type(value) is list:
        items = cast("list[Any]", value)
        return ("list", [_typed(item) for item in items])
    return (type(value), value)


def _made(fields: dict[str, Any]) -> ActionRecord:
    """A record holding ``fields`` as they are, set around the class's converters."""
    made = object.__new__(ActionRecord)
    for name, value in fields.items():
        object.__setattr__(made, name, value)
    return made


WORDS = st.one_of(st.text(max_size=6), st.sampled_from(["ok", "pending", "read", "write", ""]))
ODD = st.one_of(
    WORDS.map(Text),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
)
GAINS = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=1e-6, max_value=1.0),
    st.integers(),
    WORDS,
    WORDS.map(Text),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
)


def _check(record: ActionRecord) -> None:
    encoded = _encode(record)
    assert list(encoded) == list(_RECORD_FIELDS)
    assert _typed(encoded) == _typed(_plain(record))
    assert _typed(encoded) == _typed(_record_long(record))


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries({name: WORDS for name in _RECORD_FIELDS[:-1]}),
    st.dictionaries(st.sampled_from(_RECORD_FIELDS[:-1]), ODD, max_size=3),
    GAINS,
)
def test_a_record_of_any_fields_encodes_as_its_model_dump(
    texts: dict[str, str], odd: dict[str, Any], gain: Any
) -> None:
    _check(_made({**texts, **odd, "gain": gain}))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["read", "write"]),
    st.sampled_from(["pending", "ok", "failed", "refused", "suppressed"]),
    WORDS,
    st.one_of(st.none(), st.floats(min_value=-1e20, max_value=1e20), st.integers(-5, 5)),
)
def test_a_record_made_by_the_class_encodes_as_its_model_dump(
    effect: Any, outcome: Any, result: str, gain: float | None
) -> None:
    record = ActionRecord(
        call_id="c1",
        tool="look",
        effect=effect,
        exact="e" * 8,
        key="k",
        text="look()",
        outcome=outcome,
        result=result,
        gain=gain,
    )
    _check(record)


@pytest.mark.parametrize("field", _RECORD_FIELDS[:-1])
def test_each_text_field_of_a_class_of_its_own_is_written_as_plain_text(field: str) -> None:
    fields: dict[str, Any] = dict.fromkeys(_RECORD_FIELDS[:-1], "w")
    fields[field] = Text("odd")
    encoded = _encode(_made({**fields, "gain": None}))
    assert type(encoded[field]) is str
    assert encoded[field] == "odd"
    _check(_made({**fields, "gain": None}))


@pytest.mark.parametrize(
    ("gain", "expected"),
    [
        (None, None),
        (0.5, {"$float": "0.5"}),
        (1e-05, {"$float": "1e-05"}),
        (-math.pi, {"$float": repr(-math.pi)}),
        (3, 3),
        (Decimal("0.25"), Decimal("0.25")),
    ],
)
def test_the_gain_is_encoded(gain: Any, expected: Any) -> None:
    fields: dict[str, Any] = dict.fromkeys(_RECORD_FIELDS[:-1], "w")
    encoded = _encode(_made({**fields, "gain": gain}))
    assert _typed(encoded["gain"]) == _typed(expected)
    _check(_made({**fields, "gain": gain}))
