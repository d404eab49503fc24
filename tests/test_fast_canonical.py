"""A call's canonical arguments written from the model's own values (``_fast._canonical``).

The text is what approvals and idempotency keys hash (``args_hash``): the shortcut must
write exactly ``_json.canonical(args)`` (which dumps the model), and decline (``None``:
the plain path) for any class or value it does not recognise exactly.
"""

from __future__ import annotations

import warnings
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    computed_field,
    create_model,
    field_serializer,
    model_serializer,
)
from support import written_or_error

from statemachine import _json, _tools
from statemachine._errors import BadArgumentsError
from statemachine._fast import _messages
from statemachine._fast._canonical import _plain_canonical, _plain_fields, _plain_json, _writer


def _plain_hashed(args: BaseModel) -> tuple[str, str] | tuple[str, tuple[str, ...]]:
    """What the plain path gives: the text and its hash, or the error's problems."""
    try:
        text = _json.canonical(args)
        return text, _json.canonical_hash(args)
    except (ValueError, ArithmeticError) as error:
        return "error", (f"not a JSON value: {error}",)


def _hashed(args: BaseModel) -> tuple[str, str] | tuple[str, tuple[str, ...]]:
    try:
        return _tools._hashed("tool", args)
    except BadArgumentsError as error:
        return "error", error.problems


def _same_as_plain(args: BaseModel) -> str | None:
    """Checks the shortcut against the plain path for ``args``; returns its text."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns when dumping a mistyped value
        fast = _plain_canonical(args)
        assert _hashed(args) == _plain_hashed(args)
        if fast is not None:
            assert fast == _json.canonical(args)
    return fast


# --- generated classes and values ------------------------------------------------------------

texts = st.text(max_size=12)  # any code point, surrogates too (the hash then refuses it)
decimals = st.decimals(allow_nan=True, allow_infinity=True, places=None) | st.sampled_from(
    [Decimal("5"), Decimal("5.000"), Decimal("-0"), Decimal("1E+500"), Decimal("sNaN")]
)
ints = st.integers() | st.sampled_from([10**400 - 1, 10**400, -(10**400)])
# A field's type, with values of it and of other types (set behind pydantic's back).
KINDS: dict[str, tuple[Any, st.SearchStrategy[Any]]] = {
    "str": (str, texts),
    "int": (int, ints),
    "bool": (bool, st.booleans()),
    "decimal": (Decimal, decimals),
    "optional_str": (str | None, st.none() | texts),
    "optional_int": (int | None, st.none() | ints),
    "literal": (Literal["a", "b", 3, True, None], st.sampled_from(["a", "b", 3, True, None])),
    "float": (float, st.floats()),
    "list": (list[str], st.lists(texts, max_size=3)),
    "dict": (dict[str, int], st.dictionaries(texts, ints, max_size=3)),
    "any": (Any, st.none() | texts | ints | st.booleans()),
    "upper": (Annotated[str, PlainSerializer(lambda v: v.upper())], texts),
}
odd_values = st.sampled_from(
    [1.5, b"x", [1], {"a": 1}, True, 7, "s", None, Decimal("2.5"), type("S", (str,), {})("s")]
)
OPTIONS = ["alias", "exclude", "extra_allow", "extra_forbid", "frozen", "validation_alias"]


@st.composite
def models(draw: st.DrawFn) -> BaseModel:
    names = draw(st.lists(st.sampled_from(["a", "b", "zz", "é", "A", "x_", "key"]), unique=True))
    kinds = [draw(st.sampled_from(sorted(KINDS))) for _ in names]
    options = draw(st.sets(st.sampled_from(OPTIONS), max_size=2))
    fields: dict[str, Any] = {}
    for index, (name, kind) in enumerate(zip(names, kinds, strict=True)):
        annotation = KINDS[kind][0]
        if index == 0 and "alias" in options:
            fields[name] = (annotation, Field(alias=f"{name}_alias"))
        elif index == 0 and "exclude" in options:
            fields[name] = (annotation, Field(exclude=True))
        elif index == 0 and "validation_alias" in options:
            fields[name] = (annotation, Field(validation_alias=f"{name}_in"))
        else:
            fields[name] = (annotation, ...)
    config = ConfigDict(
        extra="allow"
        if "extra_allow" in options
        else "forbid"
        if "extra_forbid" in options
        else "ignore",
        frozen="frozen" in options,
        populate_by_name=True,
    )
    cls = create_model("Generated", __config__=config, **fields)
    values = {name: draw(KINDS[kind][1]) for name, kind in zip(names, kinds, strict=True)}
    if draw(st.booleans()):
        try:
            return cls.model_validate(values)
        except Exception:  # a value its field refuses: made unvalidated below instead
            pass
    # Values set behind pydantic's back (model_construct does not validate): odd types too.
    for name in names:
        if draw(st.integers(0, 4)) == 0:
            values[name] = draw(odd_values)
    return cls.model_construct(**values)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models())
def test_the_text_and_hash_are_the_plain_path_s_for_generated_models(args: BaseModel) -> None:
    _same_as_plain(args)


# --- the classes it knows, and what it declines ---------------------------------------------


class Refund(BaseModel):
    order: str
    amount: Decimal
    notify: bool = False
    count: int | None = None
    reason: Literal["late", "broken"] = "late"


def test_a_plain_class_takes_the_shortcut_with_every_kind_of_field() -> None:
    args = Refund(order="A-1", amount=Decimal("5.00"), count=3, reason="broken")
    assert _same_as_plain(args) == (
        '{"amount":5,"count":3,"notify":false,"order":"A-1","reason":"broken"}'
    )
    assert _tools._hashed("refund", args)[1] == _json.canonical_hash(
        {"order": "A-1", "amount": 5, "notify": False, "count": 3, "reason": "broken"}
    )


@pytest.mark.parametrize(
    "values",
    [
        {"amount": Decimal("NaN")},  # not finite: the plain path's error
        {"amount": Decimal("Infinity")},
        {"count": 10**400},  # canonical spells it as a Decimal
        {"count": True},  # not an int
        {"order": type("Text", (str,), {})("A-1")},  # a str subclass
        {"order": 5},
        {"amount": 5.5},
        {"order": "\ud800"},  # a lone surrogate: the hash refuses it
    ],
)
def test_a_value_not_of_its_field_s_exact_type_declines(values: dict[str, Any]) -> None:
    args = Refund(order="A-1", amount=Decimal(1))
    for name, value in values.items():
        object.__setattr__(args, name, value)
    if values.get("order") != "\ud800":
        assert _plain_canonical(args) is None
    _same_as_plain(args)


def test_an_extra_entry_in_the_values_or_a_missing_one_declines() -> None:
    args = Refund(order="A-1", amount=Decimal(1))
    args.__dict__["model_dump"] = lambda **_: {"forged": True}
    assert _plain_canonical(args) is None
    assert _tools._canonical(args) == '{"forged":true}'  # the plain path, as before
    args = Refund(order="A-1", amount=Decimal(1))
    del args.__dict__["notify"]
    args.__dict__["other"] = 1
    assert _plain_canonical(args) is None


class Aliased(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    order: str = Field(alias="orderId")


class Excluded(BaseModel):
    order: str
    secret: str = Field(default="s", exclude=True)


class Computed(BaseModel):
    order: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def upper(self) -> str:
        return self.order.upper()


class FieldSerialized(BaseModel):
    order: str

    @field_serializer("order")
    def _order(self, value: str) -> str:
        return value.lower()


class ModelSerialized(BaseModel):
    order: str

    @model_serializer
    def _all(self) -> dict[str, Any]:
        return {"o": self.order}


class Extra(BaseModel):
    model_config = ConfigDict(extra="allow")
    order: str


class Nested(BaseModel):
    inner: Refund


class Floating(BaseModel):
    price: float


class OwnDump(BaseModel):
    order: str

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return {"order": self.order, "dumped": True}


class Subclass(Refund):
    pass


@pytest.mark.parametrize(
    ("cls", "values"),
    [
        (Aliased, {"orderId": "A"}),
        (Excluded, {"order": "A"}),
        (Computed, {"order": "a"}),
        (FieldSerialized, {"order": "A"}),
        (ModelSerialized, {"order": "A"}),
        (Extra, {"order": "A", "more": 1}),
        (Nested, {"inner": {"order": "A", "amount": 1}}),
        (Floating, {"price": 1.0}),
        (OwnDump, {"order": "A"}),
    ],
)
def test_a_class_whose_dump_is_not_its_values_declines(
    cls: type[BaseModel], values: dict[str, Any]
) -> None:
    assert _plain_fields(cls) is None
    assert _writer(cls) is None
    args = cls.model_validate(values)
    assert _plain_canonical(args) is None
    _same_as_plain(args)


def test_a_subclass_is_judged_as_its_own_class() -> None:
    args = Subclass(order="A", amount=Decimal(2))
    assert _same_as_plain(args) is not None


def test_a_class_whose_serializer_is_replaced_declines() -> None:
    class Replaced(BaseModel):
        order: str

    args = Replaced(order="A")
    assert _same_as_plain(args) == '{"order":"A"}'
    Replaced.__pydantic_serializer__ = FieldSerialized.__pydantic_serializer__
    assert _plain_canonical(args) is None


class LookupArgs(BaseModel):
    key: str


@_tools.read_tool
async def lookup(args: LookupArgs) -> str:
    """Look a key up."""
    return "x"


def test_a_routed_call_takes_it() -> None:
    call = _tools.ToolRegistry([lookup]).route("lookup", '{"key": "k\\u00e9\\"0"}')
    assert isinstance(call, _tools.ReadCall)
    assert _plain_canonical(call.args) == '{"key":"ké\\"0"}'
    assert call.args_hash == _json.canonical_hash({"key": 'ké"0'})
    assert call._canonical == _json.canonical(call.args)


# --- a tool's result, written by the plain C encoder -----------------------------------------


class Text(str):
    pass


class Number(int):
    def __repr__(self) -> str:
        return "forged"


# No floats: dumps_fast spells a small one with an exponent (read back as the same number),
# which is the C writer's way, not this shortcut's (it takes no float).
_LEAF_VALUES = (
    texts
    | ints
    | st.booleans()
    | st.none()
    | decimals
    | st.sampled_from([Text("t"), Number(3), b"b", {1, 2}])
)
_RESULTS = st.recursive(
    _LEAF_VALUES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(texts | st.sampled_from([1, None, Text("k")]), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(_RESULTS)
def test_a_result_is_written_as_dumps_writes_it(value: Any) -> None:
    assert written_or_error(_messages._result_text, value) == written_or_error(_json.dumps, value)


def test_a_plain_result_takes_the_plain_encoder_and_a_cycle_still_raises() -> None:
    value = {"key": "k", "value": 42, "unit": "widgets", "more": [True, None, {"a": ("x",)}]}
    assert _plain_json(value)
    assert _messages._result_text(value) == _json.dumps(value)
    looped: dict[str, Any] = {"a": 1}
    looped["self"] = looped
    with pytest.raises(RecursionError):
        _messages._result_text(looped)


@pytest.mark.parametrize(
    "value",
    [
        {"a": Number(3)},
        {"a": [Number(3)]},
        {"a": Text("t")},
        {Text("k"): 1},
        {"a": 10**400},
        {"a": [10**400]},
        {"a": True, "b": None, "c": ("x", [1, {"d": False}])},
        {1: "a"},
        {"a": Decimal("1.50")},
    ],
)
def test_a_result_of_odd_types_is_written_as_dumps_writes_it(value: Any) -> None:
    assert written_or_error(_messages._result_text, value) == written_or_error(_json.dumps, value)
