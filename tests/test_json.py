"""statemachine._json: exact numbers in, exact numbers out, one canonical spelling."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import exactly

from statemachine import Money, canonical, canonical_hash, dumps, loads

# Built from sign, coefficient and exponent: fast to draw and shrink. Half the numbers
# have 29 to 40 significant digits, more than decimal's default 28-digit context holds,
# so a canonical form that rounds is caught every run, not by luck.
exponents = st.integers(min_value=-30, max_value=30)
short_decimals = st.builds(
    lambda sign, coefficient, exponent: Decimal(f"{sign}{coefficient}E{exponent}"),
    st.sampled_from(["", "-"]),
    st.integers(min_value=0, max_value=10**12),
    exponents,
)
long_decimals = st.builds(
    lambda sign, coefficient, exponent: Decimal(f"{sign}{coefficient}E{exponent}"),
    st.sampled_from(["", "-"]),
    st.integers(min_value=10**28, max_value=10**40 - 1),
    exponents,
)
finite_decimals = short_decimals | long_decimals

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | finite_decimals | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=10,
)


def reorder(value: Any) -> Any:
    """``value`` with the keys of every object, at every depth, in reverse order."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(item) for item in value]
    return value


def with_trailing_zeros(value: Decimal, zeros: int) -> Decimal:
    """The same number as ``value``, spelled with ``zeros`` more trailing zeros."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    return Decimal((sign, (*digits, *(0,) * zeros), exponent - zeros))


class Priced(BaseModel):
    item: str
    amount: Money


# --- loads ------------------------------------------------------------------------------


def test_loads_reads_a_fraction_as_the_exact_decimal() -> None:
    """137.32 in JSON text becomes Decimal("137.32"), not the float nearest to it."""
    value = loads('{"amount": 137.32}')
    assert value == {"amount": Decimal("137.32")}
    assert type(value["amount"]) is Decimal
    assert str(value["amount"]) == "137.32"


def test_loads_keeps_the_spelling_of_trailing_zeros() -> None:
    """5.00 is read as Decimal("5.00"), so the amount a model wrote is kept as written."""
    assert str(loads("5.00")) == "5.00"


def test_loads_reads_an_exponent_as_decimal() -> None:
    """A number with an exponent is a Decimal too (1e3 is Decimal("1E+3"))."""
    value = loads("1e3")
    assert type(value) is Decimal
    assert value == Decimal("1E+3")


def test_loads_reads_an_integer_as_int() -> None:
    """An integer stays an int: counts and ids are not turned into Decimal."""
    value = loads('{"count": 3}')
    assert value == {"count": 3}
    assert type(value["count"]) is int


def test_loads_accepts_bytes() -> None:
    """JSON arriving as bytes reads the same as text."""
    assert loads(b'{"amount": 0.10}') == {"amount": Decimal("0.10")}


def kinds(value: object) -> set[str]:
    """The kinds of value in a document; "other" for anything the JSON type does not name."""
    if isinstance(value, dict):
        keys = {"text" if type(key) is str else "other" for key in value}
        return {"object"}.union(keys, *(kinds(item) for item in value.values()))
    if isinstance(value, list):
        return {"array"}.union(*(kinds(item) for item in value))
    named = {str: "text", int: "int", bool: "bool", Decimal: "Decimal", type(None): "null"}
    return {named.get(type(value), "other")}


@pytest.mark.parametrize("bounded", [False, True])
def test_loads_returns_only_what_its_json_type_names(bounded: bool) -> None:
    """dict with text keys, list, str, int, Decimal, bool and None: _json.JSON, nothing else."""
    text = '{"a": [1, 2.5, 1e3, "x", true, false, null, {"b": {}}], "c": -0.0}'
    found = kinds(loads(text, bounded=bounded))
    assert found == {"object", "array", "int", "Decimal", "text", "bool", "null"}


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_loads_of_any_document_stays_within_its_json_type(value: Any) -> None:
    """Whatever dumps wrote, loads reads back as the kinds its return type names."""
    assert "other" not in kinds(loads(dumps(value)))


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", '{"amount": NaN}'])
def test_loads_refuses_nan_and_infinity(text: str) -> None:
    """NaN and Infinity are not JSON numbers (RFC 8259); reading them is an error, not a float."""
    constant = text.removeprefix('{"amount": ').removesuffix("}")
    message = f"{constant} is not a JSON number; send a finite number"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        loads(text)


# --- dumps ------------------------------------------------------------------------------


def test_dumps_writes_a_decimal_as_a_json_number() -> None:
    """Decimal("137.32") is written as the bare number 137.32, not as the string "137.32"."""
    assert dumps({"amount": Decimal("137.32")}) == '{"amount":137.32}'


def test_dumps_never_goes_through_float() -> None:
    """Digits a float cannot hold survive: 0.1000000000000000000000000001 is written as is."""
    assert dumps(Decimal("0.1000000000000000000000000001")) == "0.1000000000000000000000000001"
    assert dumps(Decimal("12345678901234567.89")) == "12345678901234567.89"


def test_dumps_keeps_the_decimal_spelling() -> None:
    """dumps does not normalise: 5.00 stays 5.00 (canonical is the normalising form)."""
    assert dumps(Decimal("5.00")) == "5.00"


def test_dumps_writes_compact_json_in_the_given_key_order() -> None:
    """Keys keep their order, there are no spaces, and non-ASCII text is kept as text."""
    value = {"b": [True, False, None], "a": "Zürich", "c": 7}
    assert dumps(value) == '{"b":[true,false,null],"a":"Zürich","c":7}'


def test_dumps_writes_a_pydantic_model_with_its_money_as_a_number() -> None:
    """A model is written as its fields, its Money field as an exact JSON number."""
    priced = Priced(item="flight", amount=Decimal("899.90"))
    assert dumps(priced) == '{"item":"flight","amount":899.90}'


def test_dumps_refuses_a_non_string_key() -> None:
    """A JSON object key must be a string; an int key is a TypeError naming the key."""
    with pytest.raises(TypeError, match=exactly("JSON object keys must be strings, got 1")):
        dumps({1: "one"})


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (Decimal("NaN"), "NaN"),
        (Decimal("Infinity"), "Infinity"),
        (Decimal("-Infinity"), "-Infinity"),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
    ],
)
@pytest.mark.parametrize("write", [dumps, canonical, canonical_hash])
def test_nan_and_infinity_are_refused_when_writing(value: Any, spelled: str, write: Any) -> None:
    """NaN and Infinity, as Decimal or float, are not JSON numbers and are never written."""
    message = f"{spelled} is not a JSON number; money and amounts must be finite"
    with pytest.raises(ValueError, match=exactly(message)):
        write({"amount": value})


def test_dumps_round_trips_a_decimal_with_a_large_exponent() -> None:
    """Decimal("1E+5000") is a finite JSON number; what dumps writes, loads reads back."""
    assert loads(dumps(Decimal("1E+5000"))) == Decimal("1E+5000")


# --- canonical --------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [5, 5.0, Decimal("5"), Decimal("5.0"), Decimal("5.00")])
def test_canonical_spells_every_form_of_five_the_same(amount: Any) -> None:
    """5, 5.0 and Decimal("5.00") are one number, so one canonical text and one hash."""
    assert canonical({"amount": amount}) == '{"amount":5}'
    assert canonical_hash({"amount": amount}) == canonical_hash({"amount": 5})


def test_canonical_ignores_key_order() -> None:
    """Key order is not part of a value: {"b","a"} and {"a","b"} are spelled alike, sorted."""
    first = {"b": 1, "a": {"y": 2, "x": 3}}
    second = {"a": {"x": 3, "y": 2}, "b": 1}
    assert canonical(first) == canonical(second) == '{"a":{"x":3,"y":2},"b":1}'
    assert canonical_hash(first) == canonical_hash(second)


@pytest.mark.parametrize(
    ("number", "spelled"),
    [
        (Decimal("1.50"), "1.5"),
        (Decimal("1E+2"), "100"),
        (Decimal("1.23E+5"), "123000"),
        (Decimal("1.5E-7"), "0.00000015"),
        (Decimal("-0"), "0"),
        (Decimal("0.000"), "0"),
        (Decimal("-12.340"), "-12.34"),
        (0.1, "0.1"),
    ],
)
def test_canonical_spells_numbers_in_one_plain_form(number: Any, spelled: str) -> None:
    """Numbers lose trailing zeros and exponents; a float is read from its shortest repr."""
    assert canonical(number) == spelled


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"amount": 5}, {"amount": Decimal("5.01")}),
        ({"amount": 5}, {"amount": -5}),
        ({"a": 1}, {"b": 1}),
        ({"a": None}, {}),
        ({"a": [1, 2]}, {"a": [2, 1]}),
        ({"a": True}, {"a": 1}),
        ({"city": "Oslo"}, {"city": "oslo"}),
    ],
)
def test_different_values_have_different_canonical_hashes(one: Any, other: Any) -> None:
    """Values that are not equal never share a canonical text or hash."""
    assert canonical(one) != canonical(other)
    assert canonical_hash(one) != canonical_hash(other)


def test_canonical_keeps_every_significant_digit() -> None:
    """Two amounts that differ only in their 29th digit are different calls, not one."""
    one = Decimal("0.12345678901234567890123456789")
    other = Decimal("0.12345678901234567890123456788")
    assert canonical(one) == "0.12345678901234567890123456789"
    assert canonical_hash(one) != canonical_hash(other)


def test_canonical_spells_a_long_integral_decimal_like_the_int() -> None:
    """Decimal(10**30 + 1) equals the int 10**30 + 1, so both have one canonical text."""
    assert canonical(Decimal(10**30 + 1)) == canonical(10**30 + 1) == str(10**30 + 1)


def test_canonical_of_a_decimal_with_a_large_exponent_is_a_number() -> None:
    """canonical answers for any finite Decimal; 1E+5000 is a number, not an error."""
    assert loads(canonical(Decimal("1E+5000"))) == Decimal("1E+5000")


def test_canonical_hash_is_the_sha256_of_the_canonical_text() -> None:
    """The hash is the documented one: SHA-256 hex of the canonical UTF-8 text."""
    value = {"city": "Zürich", "amount": Decimal("137.320")}
    expected = hashlib.sha256('{"amount":137.32,"city":"Zürich"}'.encode()).hexdigest()
    assert canonical_hash(value) == expected


def test_canonical_of_a_model_equals_canonical_of_its_fields() -> None:
    """A pydantic model hashes like the plain dict of its fields."""
    priced = Priced(item="flight", amount=Decimal("899.90"))
    assert canonical_hash(priced) == canonical_hash({"amount": 899.9, "item": "flight"})


# --- properties -------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_loads_reads_back_exactly_what_dumps_wrote(value: Any) -> None:
    """For any JSON-like value with finite Decimal numbers, loads(dumps(v)) == v."""
    assert loads(dumps(value)) == value


@settings(max_examples=200, deadline=None)
@given(finite_decimals)
def test_dumps_keeps_the_exact_decimal_spelling(number: Decimal) -> None:
    """A Decimal with a fraction comes back with the same digits and exponent, not just equal."""
    back = loads(dumps(number))
    assert back == number
    if isinstance(back, Decimal):
        assert back.as_tuple() == number.as_tuple()


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_canonical_hash_ignores_key_order_at_every_depth(value: Any) -> None:
    """Reversing the key order of every object leaves the canonical text and hash unchanged."""
    assert canonical(reorder(value)) == canonical(value)
    assert canonical_hash(reorder(value)) == canonical_hash(value)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_canonical_text_survives_a_round_trip(value: Any) -> None:
    """Writing with dumps and reading with loads does not change a value's canonical hash."""
    assert canonical_hash(loads(dumps(value))) == canonical_hash(value)


@settings(max_examples=200, deadline=None)
@given(finite_decimals, st.integers(min_value=0, max_value=6))
def test_canonical_ignores_trailing_zeros(number: Decimal, zeros: int) -> None:
    """The same number with more trailing zeros has the same canonical text."""
    assert canonical(with_trailing_zeros(number, zeros)) == canonical(number)


@settings(max_examples=200, deadline=None)
@given(finite_decimals)
def test_canonical_text_is_the_same_number(number: Decimal) -> None:
    """Reading the canonical text of a number gives back that number exactly, every digit."""
    assert loads(canonical(number)) == number
