# pyright: reportPrivateUsage=false, reportGeneralTypeIssues=false, reportUntypedBaseClass=false, reportAttributeAccessIssue=false
"""The canonical writer (``_fast._canonical._writer``) reading its class's serializer from
the class's own namespace, against the plain way.

The writer made for a class answers the text ``_json.canonical(args.model_dump(mode="python"))``
would, or ``None`` (the caller then takes that plain way). It reads the serializer from
the class's own namespace (where ``model_dump``'s ``self.__pydantic_serializer__`` finds
it first) and answers ``None`` for an instance of any class but its own: a serializer
replaced or deleted on the class, a subclass dumping otherwise (sharing the serializer or
not), another class, values set behind pydantic's back, a ``__dict__`` missing a field.
Its text is one f-string whatever the field names hold (braces, quotes, backslashes,
``\\N{...}``).
"""

from __future__ import annotations

import copy
import hashlib
import pickle
from decimal import Decimal
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, create_model, field_serializer

from statemachine import _json, read_tool
from statemachine._fast._canonical import _INT_BOUND, _plain_canonical, _writer
from statemachine._tools import ReadCall, ToolRegistry

_ERROR = object()


def _plain(args: BaseModel) -> object:
    """The plain way's text, or ``_ERROR`` when it raises."""
    try:
        return _json.canonical(args.model_dump(mode="python"))
    except Exception:
        return _ERROR


def _args_class() -> type[BaseModel]:
    class Args(BaseModel):
        key: str
        count: int = 0
        price: Decimal | None = None
        kind: Literal["a", "b", 3] = "a"
        flag: bool = False

    return Args


_KEYS = st.text(max_size=12)
_COUNTS = st.integers(min_value=-(10**20), max_value=10**20)
_PRICES = st.none() | st.decimals(allow_nan=False, allow_infinity=False, places=3)
_KINDS = st.sampled_from(["a", "b", 3])


@settings(max_examples=150, deadline=None)
@given(
    key=_KEYS,
    count=_COUNTS,
    price=_PRICES,
    kind=_KINDS,
    flag=st.booleans(),
    change=st.sampled_from(
        [
            "none",
            "copy",
            "pickle",
            "replaced",
            "deleted",
            "sub_shared",
            "sub_own",
            "other_class",
            "behind_back",
            "missing_field",
            "extra_key",
        ]
    ),
)
def test_writer_against_plain(
    key: str, count: int, price: Decimal | None, kind: Any, flag: bool, change: str
) -> None:
    Args = _args_class()
    write = _writer(Args)
    assert write is not None
    args: BaseModel = Args(key=key, count=count, price=price, kind=kind, flag=flag)
    values = {"key": key, "count": count, "price": price, "kind": kind, "flag": flag}
    expect_written = abs(count) < _INT_BOUND
    # The writer _plain_canonical keeps for the class, made before any change.
    assert _plain_canonical(Args(**values)) == _plain(Args(**values)) or not expect_written
    if change == "copy":
        args = copy.deepcopy(args)
    elif change == "pickle":
        globals()["Args"] = Args  # picklable by name for this example
        Args.__qualname__ = "Args"
        args = pickle.loads(pickle.dumps(args))
    elif change == "replaced":

        class Shouting(BaseModel):
            key: str
            count: int = 0
            price: Decimal | None = None
            kind: Literal["a", "b", 3] = "a"
            flag: bool = False

            @field_serializer("key")
            def _loud(self, value: str) -> str:
                return value.upper() + "!"

        Args.__pydantic_serializer__ = Shouting.__pydantic_serializer__
        expect_written = False
    elif change == "deleted":
        del Args.__pydantic_serializer__
        expect_written = False
    elif change in ("sub_shared", "sub_own"):

        class Sub(Args):  # type: ignore[valid-type, misc]
            @field_serializer("key")
            def _loud(self, value: str) -> str:
                return value.upper() + "!"

        if change == "sub_shared":
            # The subclass's serializer is the parent's again: only the class tells.
            Sub.__pydantic_serializer__ = Args.__pydantic_serializer__
        args = Sub(**values)
        expect_written = False
    elif change == "other_class":
        spec: dict[str, Any] = {
            "key": (str, ...),
            "count": (int, 0),
            "price": (Decimal | None, None),
            "kind": (Literal["a", "b", 3], "a"),
            "flag": (bool, False),
        }
        # Same fields, the same serializer object, another class.
        Twin: Any = create_model("Args", **spec)
        Twin.__pydantic_serializer__ = Args.__pydantic_serializer__
        args = Twin(**values)
        expect_written = False
    elif change == "behind_back":
        object.__setattr__(args, "count", str(count))
        expect_written = False
    elif change == "missing_field":
        vars(args).pop("price")  # nullable: a None in its place would write null
        vars(args)["other"] = "x"
        expect_written = False
    elif change == "extra_key":
        vars(args)["__pydantic_serializer__"] = Args.__pydantic_serializer__
        expect_written = False
    got = write(args)
    plain = _plain(args)
    if expect_written:
        assert got is not None
        assert got == plain
    else:
        assert got is None
    # Through _plain_canonical (which finds the writer for the instance's own class).
    through = _plain_canonical(args)
    assert through is None or through == plain


_NAMES = st.lists(
    st.sampled_from([*"ab{}\"\\'N \u2028\x7f\x00é", "\\N{", "{{", "}}"]),
    min_size=1,
    max_size=6,
).map("".join)


@settings(max_examples=150, deadline=None)
@given(
    fields=st.dictionaries(_NAMES, st.tuples(st.sampled_from(["str", "int"]), _KEYS), max_size=4)
)
def test_writer_field_names(fields: dict[str, tuple[str, str]]) -> None:
    """Any field names: the text is the plain way's (the f-string's heads escaped)."""
    spec: dict[str, Any] = {
        name: (str if kind == "str" else int, ...) for name, (kind, _) in fields.items()
    }
    model: Any = create_model("Named", **spec)
    write = _writer(model)
    assert write is not None
    made: Any = model(
        **{name: text if kind == "str" else len(text) for name, (kind, text) in fields.items()}
    )
    got = write(made)
    assert got is not None
    assert got == _plain(made)


@settings(max_examples=60, deadline=None)
@given(key=_KEYS, change=st.sampled_from(["none", "replaced"]))
def test_route_hash_against_plain(key: str, change: str) -> None:
    """route's args_hash is the SHA-256 of the plain way's text, the writer's way or not."""
    Args = _args_class()

    async def look(args: Any) -> dict[str, object]:
        """Look."""
        return {}

    look.__annotations__ = {"args": Args, "return": dict[str, object]}
    registry = ToolRegistry([read_tool(look)])
    text = _json.dumps({"key": key})
    first = registry.route("look", text)
    assert type(first) is ReadCall
    if change == "replaced":

        class Shouting(BaseModel):
            key: str
            count: int = 0
            price: Decimal | None = None
            kind: Literal["a", "b", 3] = "a"
            flag: bool = False

            @field_serializer("key")
            def _loud(self, value: str) -> str:
                return value + "?"

        Args.__pydantic_serializer__ = Shouting.__pydantic_serializer__
    call = registry.route("look", text)
    assert type(call) is ReadCall
    plain = _plain(call.args)
    assert isinstance(plain, str)
    assert call.args_hash == hashlib.sha256(plain.encode()).hexdigest()
    fields = {"key": key, "count": 0, "price": None, "kind": "a", "flag": False}
    assert first.args_hash == hashlib.sha256(_json.canonical(fields).encode()).hexdigest()
