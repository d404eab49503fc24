"""statemachine._guard: repairs keep every JSON type; money text says which separator is which."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from support import exactly

from statemachine import (
    Diagnostic,
    GuardOutcome,
    Invalid,
    Money,
    OutputGuard,
    Parsed,
    Repair,
    SetupError,
    dumps,
    loads,
)
from statemachine.testing import reply


class Total(BaseModel):
    """One object with a number and a note: what the reply must be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total: int
    note: str


class Refund(BaseModel):
    """An amount of money and a reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    amount: Money
    reason: str = "late"


class Anything(BaseModel):
    """Any JSON object, kept as sent."""

    model_config = ConfigDict(frozen=True, extra="allow")


TOTAL = '{"total": 1, "note": "a"}'


def parsed(outcome: GuardOutcome[Any]) -> Parsed[Any]:
    """``outcome``, asserted to be Parsed."""
    assert isinstance(outcome, Parsed), outcome
    return outcome


def invalid(outcome: GuardOutcome[Any]) -> Invalid:
    """``outcome``, asserted to be Invalid."""
    assert isinstance(outcome, Invalid), outcome
    return outcome


def codes(outcome: GuardOutcome[Any]) -> list[str]:
    """The diagnostic codes of an invalid outcome, in order."""
    return [item.code for item in invalid(outcome).diagnostics]


# --- repairs keep the type ----------------------------------------------------------------


def test_an_unterminated_array_is_not_repaired_into_its_first_object() -> None:
    """'[{...}' stays an array: nothing is cut, and the diagnostics say an object is wanted."""
    outcome = invalid(OutputGuard(Total).check(reply("[" + TOTAL)))
    assert (outcome.repairs, outcome.document) == ((), None)
    assert outcome.diagnostics[1] == Diagnostic(
        code="json.not_object",
        message="the reply begins with a JSON array, but the schema wants one JSON object",
        allowed_fixes=("send one JSON object instead of a JSON array",),
    )
    assert codes(outcome) == ["json.syntax", "json.not_object"]


def test_a_whole_array_is_read_as_an_array_and_refused_by_the_schema() -> None:
    """'[{...}]' is read as it is, and the type-check says the schema wants an object."""
    outcome = invalid(OutputGuard(Total).check(reply(f"[{TOTAL}]")))
    assert outcome.document == [{"total": 1, "note": "a"}]
    assert [(item.path, item.message) for item in outcome.diagnostics] == [
        ("$", "Input should be a valid dictionary or instance of Total")
    ]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"[{TOTAL}, {TOTAL}", "array"),
        (f"```json\n[{TOTAL}\n```", "array"),
        (f'"see {TOTAL}', "string"),
        (f'"see" {TOTAL}', "string"),
        (f"1 {TOTAL}", "number"),
        (f"-2{TOTAL}", "number"),
        (f"true {TOTAL}", "boolean"),
        (f"null {TOTAL}", "null"),
    ],
)
def test_text_that_begins_another_value_is_never_cut_to_an_object(text: str, kind: str) -> None:
    """An array, string, number, boolean or null is not repaired into the object inside it."""
    outcome = invalid(OutputGuard(Total).check(reply(text)))
    assert outcome.repairs == ()
    named = "JSON null" if kind == "null" else f"a JSON {kind}"
    assert outcome.diagnostics[-1].message == (
        f"the reply begins with {named}, but the schema wants one JSON object"
    )


@pytest.mark.parametrize(
    "text",
    [
        f"Here you go: [{TOTAL}",
        f"Here you go: [{TOTAL}]",
        f"Here you go:\n[\n  {TOTAL},\n  {TOTAL}\n]",
        f'Note: "use {{}} here" {TOTAL}',
        'Here: "a {} b"',
    ],
)
def test_an_object_inside_an_array_or_a_string_after_prose_is_not_cut_out(text: str) -> None:
    """Prose, then an array or a string: the braces inside belong to that value."""
    outcome = invalid(OutputGuard(Anything).check_text(text))
    assert (outcome.repairs, codes(outcome)) == ((), ["json.syntax"])


@pytest.mark.parametrize(
    "text",
    [
        f"Sure [1 of 1]: {TOTAL} done",
        f'He said "ok" then {TOTAL}',
        f"{TOTAL}]",
        f"```\nok: {TOTAL}\n```",
    ],
)
def test_prose_around_an_object_is_still_cut(text: str) -> None:
    """Closed brackets and strings in prose, or a stray bracket after, do not stop the cut."""
    result = parsed(OutputGuard(Total).check(reply(text)))
    assert Repair.CUT_TO_BRACES in result.repairs
    assert result.value == Total(total=1, note="a")


def test_an_unterminated_object_is_not_closed() -> None:
    """Repair deletes; it never adds the brace the model did not write."""
    outcome = invalid(OutputGuard(Total).check(reply(TOTAL[:-1])))
    assert (outcome.repairs, codes(outcome)) == ((), ["json.syntax"])


# --- money text -------------------------------------------------------------------------


def amount_of(text: str, guard: OutputGuard[Refund] | None = None) -> GuardOutcome[Refund]:
    """The outcome of a refund whose amount is ``text``."""
    guard = OutputGuard(Refund) if guard is None else guard
    return guard.check(reply(dumps({"amount": text, "reason": "late"})))


@pytest.mark.parametrize(
    ("text", "grouped", "pointed", "marks"),
    [
        ("1.000", "1000", "1.000", ("$",)),
        ("1,000", "1000", "1.000", ("$",)),
        ("$1.000", "1000", "1.000", ("$",)),
        ("$1,000", "1000", "1.000", ("$",)),
        ("1,000 USD", "1000", "1.000", ("USD",)),
        ("€2,500", "2500", "2.500", ("€",)),
        ("-$12.345", "-12345", "-12.345", ("$",)),
        ("999,999", "999999", "999.999", ("$",)),
    ],
)
def test_one_separator_before_three_digits_is_ambiguous_with_or_without_a_mark(
    text: str, grouped: str, pointed: str, marks: tuple[str, ...]
) -> None:
    """'$1.000' is refused like '1,000': each may mean a thousand or one."""
    outcome = invalid(amount_of(text, OutputGuard(Refund, currency_marks=marks)))
    assert outcome.diagnostics == (
        Diagnostic(
            code="money.ambiguous",
            message=f"the amount {dumps(text)} is ambiguous: it may mean {grouped} or {pointed}",
            path="$.amount",
            evidence=dumps(text),
            allowed_fixes=("write the amount as a JSON number, e.g. 1200.50",),
        ),
    )


@pytest.mark.parametrize(
    ("text", "amount"),
    [
        ("1,000.50", "1000.50"),
        ("1.000,50", "1000.50"),
        ("$1,000,000", "1000000"),
        ("1.000.000", "1000000"),
        ("1.000.000,25 USD", "1000000.25"),
        ("1000", "1000"),
        ("$1000.000", "1000.000"),
        ("1.5", "1.5"),
        ("1,5", "1.5"),
        ("$2,50", "2.50"),
        ("0.001", "0.001"),
        ("0,500", "0.500"),
        ("1234.567", "1234.567"),
        ("12.3456", "12.3456"),
        (".5", "0.5"),
    ],
)
def test_a_spelling_that_says_which_separator_is_which_is_read(text: str, amount: str) -> None:
    """Both separators, a repeated one, a leading 0, or not three digits after: unambiguous."""
    result = parsed(amount_of(text))
    assert (str(result.value.amount), result.normalised) == (
        amount,
        (f"$.amount: {dumps(text)} -> {amount}",),
    )


@pytest.mark.parametrize(
    ("separator", "text", "amount"),
    [
        (".", "1.000", "1.000"),
        (".", "$1,000", "1000"),
        (".", "1,000.50", "1000.50"),
        (",", "1.000", "1000"),
        (",", "€2,500", "2.500"),
        (",", "1.000,50", "1000.50"),
    ],
)
def test_a_configured_decimal_separator_settles_the_ambiguity(
    separator: Any, text: str, amount: str
) -> None:
    """Told the decimal separator, the guard reads the other as thousands."""
    guard = OutputGuard(Refund, currency_marks=("$", "€"), decimal_separator=separator)
    assert str(parsed(amount_of(text, guard)).value.amount) == amount


@pytest.mark.parametrize(
    ("separator", "text"),
    [(".", "1.000,50"), (".", "1,5"), (",", "1,000.50"), (",", "1.5"), (",", "0.500")],
)
def test_a_spelling_against_the_configured_separator_is_refused(separator: Any, text: str) -> None:
    """Against the configuration, the text is refused, though Money alone would read '1.5'."""
    guard = OutputGuard(Refund, decimal_separator=separator)
    assert invalid(amount_of(text, guard)).diagnostics == (
        Diagnostic(
            code="money.separator",
            message=f"the amount {dumps(text)} is not written with {separator!r} as its "
            "decimal separator, as configured",
            path="$.amount",
            evidence=dumps(text),
            allowed_fixes=("write the amount as a JSON number, e.g. 1200.50",),
        ),
    )


def test_a_decimal_separator_other_than_a_point_or_a_comma_fails_at_setup() -> None:
    """A space, say, is refused when the guard is built."""
    with pytest.raises(
        SetupError,
        match=exactly(
            "decimal_separator must be '.', ',' or None (read it off the spelling), got ' '"
        ),
    ):
        OutputGuard(Refund, decimal_separator=cast(Any, " "))


def test_a_json_number_is_not_money_text() -> None:
    """1.000 written as a JSON number is the number one: JSON has one decimal point."""
    result = parsed(OutputGuard(Refund).check(reply('{"amount": 1.000}')))
    assert result.value.amount == Decimal("1.000")


def test_an_ambiguous_amount_is_reported_once_beside_other_errors() -> None:
    """The ambiguity replaces the type-check's message at its path; other paths keep theirs."""
    outcome = invalid(OutputGuard(Refund).check(reply('{"amount": "$1.000", "reason": 5}')))
    assert [(item.code, item.path) for item in outcome.diagnostics] == [
        ("money.ambiguous", "$.amount"),
        ("type.invalid", "$.reason"),
    ]


# --- properties -------------------------------------------------------------------------

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
    | st.text(alphabet=st.sampled_from('ab ,}]{["\\`\n'), max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
noise = st.text(alphabet=st.sampled_from('ab ,:}]{["\\`\n1-'), max_size=8)


def json_type(value: Any) -> str:
    """The JSON type of a value read by ``loads``."""
    for kind, types in (
        ("object", dict),
        ("array", list),
        ("string", str),
        ("boolean", bool),
        ("null", type(None)),
    ):
        if isinstance(value, types):
            return kind
    return "number"


def with_trailing_commas(value: Any) -> str:
    """``value`` as JSON with a comma after the last member of every non-empty container."""
    if isinstance(value, dict) and value:
        members = [f"{dumps(key)}: {with_trailing_commas(item)}" for key, item in value.items()]
        return "{" + ", ".join(members) + ", }"
    if isinstance(value, list) and value:
        return "[" + ", ".join(with_trailing_commas(item) for item in value) + ",\n]"
    return dumps(value)


def document_of(outcome: Parsed[Any] | Invalid) -> Any:
    """The JSON value the guard read (after any repair), or ``None`` if it read none."""
    return loads(outcome.data) if isinstance(outcome, Parsed) else outcome.document


@settings(max_examples=200, deadline=None)
@given(value=values)
def test_a_value_that_parses_is_read_unchanged(value: Any) -> None:
    """JSON text of any type is never repaired: the guard reads exactly that value."""
    outcome = OutputGuard(Anything).check_text(dumps(value))
    assert outcome.repairs == ()
    assert dumps(document_of(outcome)) == dumps(value)


@settings(max_examples=300, deadline=None)
@given(value=values, data=st.data())
def test_repair_never_changes_the_type_the_text_begins_with(
    value: Any, data: st.DataObject
) -> None:
    """Cut short anywhere, with noise after it, trailing commas or a fence: same type read."""
    text = with_trailing_commas(value) if data.draw(st.booleans(), label="commas") else dumps(value)
    # A cut keeps what still begins the value: a whole literal, a number's first digit.
    shortest = len(text) if value is None or isinstance(value, bool) else 1 + text.startswith("-")
    cut = data.draw(st.integers(min_value=shortest, max_value=len(text)), label="kept")
    text = text[:cut] + data.draw(noise, label="after")
    if data.draw(st.booleans(), label="fence"):
        text = f"```json\n{text}\n```"
    outcome = OutputGuard(Anything).check_text(text)
    if isinstance(outcome, Invalid) and outcome.document is None:
        return  # nothing was read (or JSON null was: a type no repair can reach)
    assert json_type(document_of(outcome)) == json_type(value), text


@pytest.mark.parametrize(
    "text",
    ["null1{}", "nulla{}", "true1{}", "falseb{}", "null-{}", "```json\nnull1{}\n```", "truex [{}]"],
)
def test_a_literal_run_into_noise_is_not_repaired_into_an_object(text: str) -> None:
    """A literal followed by noise without a space (a case Hypothesis found: ``null1{}``
    was read as the object ``{}``): the text begins that literal, so no cut to braces."""
    outcome = OutputGuard(Anything).check_text(text)
    assert isinstance(outcome, Invalid)
    assert outcome.repairs == ()


@settings(max_examples=300, deadline=None)
@given(value=values, data=st.data())
def test_a_repaired_value_is_the_original_value(value: Any, data: st.DataObject) -> None:
    """Whole JSON of any type, with a fence, trailing commas or text after: repair gives it back."""
    text = with_trailing_commas(value) if data.draw(st.booleans(), label="commas") else dumps(value)
    text += data.draw(st.sampled_from(["", " ", "\nThanks!", " ok."]), label="after")
    if data.draw(st.booleans(), label="fence"):
        text = f"```json\n{text}\n```"
    outcome = OutputGuard(Anything).check_text(text)
    if outcome.repairs:
        assert dumps(document_of(outcome)) == dumps(value), text


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('ab {}[]",:1-tn\n`'), max_size=30))
def test_whatever_the_text_a_repair_keeps_the_type_it_begins_with(text: str) -> None:
    """Arbitrary text: a repaired document has the type of the value the text begins with."""
    outcome = OutputGuard(Anything).check_text(text)
    if not outcome.repairs:
        return
    body = text
    if Repair.STRIP_FENCE in outcome.repairs:
        lines = text.split("\n")
        fences = [index for index, line in enumerate(lines) if line.lstrip().startswith("```")]
        body = "\n".join(lines[fences[0] + 1 : fences[1]])
    begins = re.match(
        r'\s*(?:(?P<object>\{)|(?P<array>\[)|(?P<string>")|(?P<number>-?[0-9])'
        r"|(?P<boolean>(?:true|false)\b)|(?P<null>null\b))",
        body,
    )
    if begins is not None:
        assert json_type(document_of(outcome)) == begins.lastgroup, text


@pytest.mark.parametrize(
    "text", ["```json\nnull{}\n```", "```\n[1, {}\n```", '```json\n"a" {"b": 1}\n```']
)
def test_a_fenced_value_is_not_cut_to_another_type(text: str) -> None:
    """Found by the property above: the fence's body begins the value, so cutting a fenced
    ``null{}`` to ``{}`` changes its type and is not done."""
    outcome = OutputGuard(Anything).check_text(text)
    assert outcome.repairs == () or json_type(document_of(outcome)) != "object", text
