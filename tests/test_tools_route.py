"""``ToolRegistry.route``'s own frame (the model's usual call: the scan, the validation and
the call made in one frame) pinned against ``ToolRegistry._route``, the plain path it
falls back to: the same call (arguments, hash, canonical text, tool), the same
``InvalidCall`` or the same error, for any text, any tool and any arguments class,
including classes whose validation is their own (a validator with a side effect, a
wrapping model validator that returns something else, ``model_validate`` overridden),
tools of a subclass or changed behind attrs' back, names and texts of a str subclass,
and JSON nested deeper than the shortcut reads.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, field_validator, model_validator

from statemachine import (
    InvalidCall,
    ReadCall,
    ToolRegistry,
    WriteCall,
    _json,
    _tools,
    read_tool,
    write_tool,
)
from statemachine._tools import ReadTool

# --- arguments classes of every kind the shortcut meets -----------------------------------


class Key(BaseModel):
    key: str


class Numbers(BaseModel):
    count: int = 0
    price: Decimal = Decimal(0)
    flag: bool = False
    note: str | None = None


class Floats(BaseModel):  # not on _plain_canonical's allow-list: written the long way
    ratio: float = 0.0
    items: list[int] = []


CHECKED: list[str] = []


class Checked(BaseModel):
    key: str

    @field_validator("key")
    @classmethod
    def _seen(cls, value: str) -> str:
        CHECKED.append(value)
        if value == "boom":
            raise ValueError("no boom")
        if value == "type":
            raise TypeError("a validator's own TypeError")
        return value


class Swapped(BaseModel):  # a wrapping validator that returns another model
    key: str

    @model_validator(mode="wrap")
    @classmethod
    def _other(cls, value: Any, handler: Any) -> Any:
        made = handler(value)
        return Key(key=made.key) if made.key == "swap" else made


class Overridden(BaseModel):
    key: str

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Overridden:
        CHECKED.append(f"overridden {obj!r}")
        return super().model_validate({"key": str(obj.get("key", "")).upper()}, **kwargs)


class Forbids(BaseModel, extra="forbid"):
    key: str


@read_tool
async def key_tool(args: Key) -> str:
    return args.key


@read_tool
async def numbers_tool(args: Numbers) -> str:
    return "n"


@write_tool
async def floats_tool(args: Floats) -> str:
    return "f"


@read_tool
async def checked_tool(args: Checked) -> str:
    return args.key


@write_tool
async def swapped_tool(args: Swapped) -> str:
    return args.key


@read_tool
async def overridden_tool(args: Overridden) -> str:
    return args.key


@read_tool
async def forbids_tool(args: Forbids) -> str:
    return args.key


class SubTool(ReadTool[Any, Any]):  # type: ignore[misc]  # a subclass, its own call
    def call(self, args: Any) -> ReadCall:
        CHECKED.append("subclass call")
        return super().call(args)


sub_tool = SubTool(
    name="sub_tool",
    description="",
    args_model=Key,
    fn=key_tool._fn,
    timeout=1.0,
    retry=None,
    cost=None,
)

TOOLS = ToolRegistry(
    [
        key_tool,
        numbers_tool,
        floats_tool,
        checked_tool,
        swapped_tool,
        overridden_tool,
        forbids_tool,
        sub_tool,
    ]
)
NAMES = [tool.name for tool in TOOLS]


class Name(str):
    pass


class Text(str):
    pass


def _outcome(tools: ToolRegistry, name: Any, arguments: Any) -> tuple[Any, ...]:
    """What routing gives, compared in full: the call's class, fields and canonical
    text, the invalid call, or the error's type and words; and what validators saw."""
    CHECKED.clear()
    try:
        routed = tools.route(name, arguments)
    except Exception as error:  # the error itself is compared
        return ("raised", type(error), str(error), tuple(CHECKED))
    return _shape(routed)


def _plain(tools: ToolRegistry, name: Any, arguments: Any) -> tuple[Any, ...]:
    CHECKED.clear()
    try:
        routed = tools._route(name, arguments)
    except Exception as error:  # the error itself is compared
        return ("raised", type(error), str(error), tuple(CHECKED))
    return _shape(routed)


def _shape(routed: Any) -> tuple[Any, ...]:
    seen = tuple(CHECKED)
    if isinstance(routed, ReadCall | WriteCall):
        args = routed.args
        return (
            type(routed),
            routed.tool,
            type(args),
            args.model_dump(mode="python"),
            args.model_fields_set,
            routed.args_hash,
            routed._canonical,
            seen,
        )
    assert type(routed) is InvalidCall
    return (InvalidCall, routed, seen)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.decimals(allow_nan=False, allow_infinity=False, places=3).map(str).map(json.loads),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["boom", "type", "swap", "\ud800", "k\u00e9y", '"', "\\"]),
)
_FIELDS = st.sampled_from(["key", "count", "price", "flag", "note", "ratio", "items", "x"])
_OBJECTS = st.dictionaries(
    _FIELDS,
    st.one_of(_VALUES, st.lists(st.integers(min_value=-5, max_value=5), max_size=3)),
    max_size=4,
).map(lambda value: json.dumps(value, ensure_ascii=False))
_AROUND = st.sampled_from(["", " ", "\n", "x", ",", "}", "\ufeff", "0"])
_TEXTS = st.one_of(
    _OBJECTS,
    st.tuples(_AROUND, _OBJECTS, _AROUND).map("".join),
    st.text(alphabet='{}[]":,0123456789.eE+-tfnulkey \n\\', max_size=16),
    st.sampled_from(
        [
            "",
            "{",
            "{}",
            "[]",
            '{"key": 1e401}',
            '{"key": NaN}',
            '{"count": ' + "1" * 401 + "}",
            '{"key": "\\ud800"}',
            '{"key": "k", "key": "again"}',
        ]
    ),
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([*NAMES, "nope"]), _TEXTS, st.sampled_from(["str", "name", "text"]))
def test_a_route_is_what_the_plain_route_makes(name: str, text: str, kind: str) -> None:
    """For any text and any tool, ``route`` gives what ``_route`` gives: the same call
    (class, tool, arguments, fields set, hash and canonical text), the same
    ``InvalidCall``, or the same error; validators run as often on both paths."""
    given_name: Any = Name(name) if kind == "name" else name
    given_text: Any = Text(text) if kind == "text" else text
    assert _outcome(TOOLS, given_name, given_text) == _plain(TOOLS, given_name, given_text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("key_tool", '{"key": "k"}'),
        ("numbers_tool", '{"count": 3, "price": 1.50, "flag": true, "note": null}'),
        ("floats_tool", '{"ratio": 0.5, "items": [1, 2]}'),
        ("checked_tool", '{"key": "k"}'),
        ("checked_tool", '{"key": "boom"}'),
        ("checked_tool", '{"key": "type"}'),
        ("swapped_tool", '{"key": "swap"}'),
        ("swapped_tool", '{"key": "stay"}'),
        ("overridden_tool", '{"key": "k"}'),
        ("forbids_tool", '{"key": "k", "more": 1}'),
        ("sub_tool", '{"key": "k"}'),
        ("key_tool", '{"key": "\\ud800"}'),
        ("key_tool", '{"key": "k"} '),
        ("key_tool", '{"key": "k"}x'),
        ("key_tool", "{" * 30 + "}" * 30),
    ],
)
def test_each_kind_of_call_is_routed_as_the_plain_route_does(name: str, text: str) -> None:
    """One example of each kind, named (the Hypothesis test above draws them)."""
    assert _outcome(TOOLS, name, text) == _plain(TOOLS, name, text)


def test_the_usual_call_is_the_call_of_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut's call (made without the plain route) is the one ``tool.call`` makes
    from the parsed arguments."""

    def plain(*args: Any) -> Any:
        raise AssertionError("the usual call took the plain route")

    monkeypatch.setattr(ToolRegistry, "_route", plain)
    routed = TOOLS.route("key_tool", '{"key": "k0"}')
    assert routed == key_tool.call({"key": "k0"})
    assert type(routed) is ReadCall
    assert routed._canonical == '{"key":"k0"}'
    written = TOOLS.route("swapped_tool", '{"key": "k"}')
    assert type(written) is WriteCall
    assert written == swapped_tool.call({"key": "k"})


def test_validators_and_overrides_run_as_on_the_plain_path() -> None:
    """A field validator runs once a call; an overridden ``model_validate`` and a tool
    subclass's ``call`` are used; a wrapping validator's other model is the call's."""
    CHECKED.clear()
    TOOLS.route("checked_tool", '{"key": "k"}')
    assert CHECKED == ["k"]
    CHECKED.clear()
    invalid = TOOLS.route("checked_tool", '{"key": "boom"}')
    assert isinstance(invalid, InvalidCall)
    assert CHECKED == ["boom"]
    assert invalid.problems == ("key: Value error, no boom",)
    with pytest.raises(TypeError, match="a validator's own TypeError"):
        TOOLS.route("checked_tool", '{"key": "type"}')
    CHECKED.clear()
    overridden = TOOLS.route("overridden_tool", '{"key": "k"}')
    assert isinstance(overridden, ReadCall)
    assert overridden.args == Overridden(key="K")
    assert CHECKED == ["overridden {'key': 'k'}"]
    CHECKED.clear()
    sub = TOOLS.route("sub_tool", '{"key": "k"}')
    assert isinstance(sub, ReadCall)
    assert CHECKED == ["subclass call"]
    swapped = TOOLS.route("swapped_tool", '{"key": "swap"}')
    assert isinstance(swapped, WriteCall)
    assert type(swapped.args) is Key


def test_deep_json_is_read_by_the_plain_route() -> None:
    """JSON nested past the shortcut's bound goes the plain way: deeper than the
    recursion limit, the same ``InvalidCall`` (nested too deeply). Python 3.13's JSON
    reader bounds its depth by the C stack instead, and reads 5,000 levels: then the
    arguments are read, and refused for what they hold, on both ways alike."""
    for depth in (65, 100, 5000):
        text = '{"key": "k", "deep": ' + "[" * depth + "]" * depth + "}"
        assert _outcome(TOOLS, "key_tool", text) == _plain(TOOLS, "key_tool", text)
    deepest = '{"key": ' + "[" * 5000 + "]" * 5000 + "}"
    assert _outcome(TOOLS, "key_tool", deepest) == _plain(TOOLS, "key_tool", deepest)
    invalid = TOOLS.route("key_tool", deepest)
    assert isinstance(invalid, InvalidCall)
    assert invalid.problems in (
        ("arguments are nested too deeply",),  # Python 3.11, 3.12
        ("key: Input should be a valid string",),  # 3.13: read, and a list is not a str
    )


def test_a_tool_changed_behind_attrs_back_is_routed_as_before() -> None:
    """A tool whose arguments class was replaced (``object.__setattr__``) by another
    class, or by what is not a class, gives what the plain route gives."""
    tool = ReadTool(
        name="changed",
        description="",
        args_model=Key,
        fn=key_tool._fn,
        timeout=1.0,
        retry=None,
        cost=None,
    )
    tools = ToolRegistry([tool])
    object.__setattr__(tool, "args_model", Numbers)
    text = '{"count": 2}'
    assert _outcome(tools, "changed", text) == _plain(tools, "changed", text)
    assert tools.route("changed", text).args == Numbers(count=2)  # type: ignore[union-attr]
    object.__setattr__(tool, "args_model", 42)
    assert _outcome(tools, "changed", text) == _plain(tools, "changed", text)
    with pytest.raises(AttributeError, match="model_validate"):
        tools.route("changed", text)


@settings(deadline=None)
@given(
    st.binary(max_size=300) | st.text(max_size=80).map(lambda text: text.encode("utf-8", "replace"))
)
def test_the_builtin_sha256_is_hashlibs(data: bytes) -> None:
    """The SHA-256 calls are hashed with (CPython's own C code) gives ``hashlib``'s
    digest, for any bytes."""
    assert _tools._sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
    assert _tools._sha256 is not hashlib.sha256  # this CPython has its own SHA-256


def test_a_calls_hash_is_the_canonical_hash() -> None:
    """A routed call's ``args_hash`` is ``_json.canonical_hash`` of its arguments."""
    for text in ('{"key": "k\\u00e9"}', '{"key": "k"}'):
        routed = TOOLS.route("key_tool", text)
        assert isinstance(routed, ReadCall)
        assert routed.args_hash == _json.canonical_hash(routed.args)
    numbers = TOOLS.route("numbers_tool", '{"count": 3, "price": 1.50}')
    assert isinstance(numbers, ReadCall)
    assert numbers.args_hash == _json.canonical_hash(numbers.args)
