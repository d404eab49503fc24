# pyright: reportPrivateUsage=false, reportGeneralTypeIssues=false, reportUntypedBaseClass=false, reportAttributeAccessIssue=false
"""``ToolRegistry.route`` reading a tool's arguments class from what it kept, against the plain way.

Once ``route`` has seen a tool's arguments class answer its look-ups (``_learn``: pydantic's
own metaclass, made directly from ``BaseModel``, no ``model_validate`` of its own, a
validator of pydantic-core's class), it reads that class's own namespace at each call
instead of looking ``model_validate`` and ``__pydantic_validator__`` up, and writes the
canonical text with the writer ``_plain_canonical`` finds for the class. Whatever is
changed between calls (the validator rebuilt or swapped, ``model_validate`` defined on the
class or patched on ``BaseModel``, the tool's class swapped in place, a class with another
base, a validator answering another class), the call is the plain way's (``_route``):
the same class exactly, arguments, hash, canonical text and tool, or the same
``InvalidCall``, or the same error.
"""

from __future__ import annotations

import copy
import pickle
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, model_validator

from statemachine import read_tool, write_tool
from statemachine._tools import InvalidCall, ReadCall, ToolRegistry, WriteCall

_CHANGES = (
    "none",
    "rebuilt",
    "own_validate",
    "base_validate",
    "swapped_model",
    "foreign_validator",
    "no_validator",
    "other_base",
    "base_of_other_validate",
    "subclass_result",
    "writer_refused",
)


def _model(change: str) -> type[BaseModel]:
    """A new arguments class (one per example: the changes act on the class)."""

    class Mixin(BaseModel):
        pass

    base: type[BaseModel] = Mixin if change.startswith(("other_base", "base_of")) else BaseModel

    class Args(base):  # type: ignore[valid-type, misc]
        key: str
        count: int = 0
        price: Decimal | None = None

    if change == "subclass_result":
        # A validator answering another class, which shares the class's serializer (so
        # that only the class's identity tells the writers apart).
        class Wrapping(BaseModel):
            key: str
            count: int = 0

            @model_validator(mode="wrap")
            @classmethod
            def _as_sub(cls, value: Any, handler: Any) -> Any:
                made = handler(value)
                return Sub.model_construct(**dict(made)) if type(made) is Wrapping else made

        class Sub(Wrapping):
            extra: str = "e"

        Sub.__pydantic_serializer__ = Wrapping.__pydantic_serializer__
        return Wrapping
    if change == "writer_refused":

        class Nested(BaseModel):
            key: str
            tags: list[str] = []

        return Nested
    return Args


class _Other(BaseModel):
    key: str
    extra: str = "x"


def _tool(model: type[BaseModel], write: bool) -> Any:
    async def run(args: Any) -> dict[str, Any]:
        return {}

    run.__annotations__ = {"args": model, "return": dict[str, Any]}
    return write_tool(run) if write else read_tool(run)


def _change(change: str, tool: Any, model: type[BaseModel]) -> Any:
    """Make ``change`` after the first call; the undo (or None)."""
    if change == "rebuilt":
        model.model_rebuild(force=True)
    elif change == "own_validate":

        def own(cls: Any, /, obj: Any, **kwargs: Any) -> Any:
            made = BaseModel.model_validate.__func__(cls, obj, **kwargs)  # type: ignore[attr-defined]
            object.__setattr__(made, "key", made.key + "!")
            return made

        model.model_validate = classmethod(own)  # type: ignore[method-assign, assignment]
    elif change == "base_validate":
        kept = BaseModel.__dict__["model_validate"]

        def patched(cls: Any, /, obj: Any, **kwargs: Any) -> Any:
            made = kept.__func__(cls, obj, **kwargs)
            object.__setattr__(made, "count", 7)
            return made

        BaseModel.model_validate = classmethod(patched)  # type: ignore[method-assign, assignment]

        def undo() -> None:
            BaseModel.model_validate = kept  # type: ignore[method-assign]

        return undo
    elif change == "base_of_other_validate":
        mixin = model.__mro__[1]

        def mixed(cls: Any, /, obj: Any, **kwargs: Any) -> Any:
            made = BaseModel.model_validate.__func__(cls, obj, **kwargs)  # type: ignore[attr-defined]
            object.__setattr__(made, "count", -1)
            return made

        mixin.model_validate = classmethod(mixed)  # type: ignore[attr-defined]
    elif change == "swapped_model":
        object.__setattr__(tool, "args_model", _Other)
    elif change == "foreign_validator":
        model.__pydantic_validator__ = _Other.__pydantic_validator__
    elif change == "no_validator":
        del model.__pydantic_validator__
    return None


def _outcome(route: Any, name: Any, arguments: Any) -> Any:
    try:
        return route(name, arguments)
    except Exception as error:  # compared
        return ("raised", type(error), str(error))


def _same(made: Any, plain: Any) -> None:
    assert type(made) is type(plain)
    if type(plain) is tuple or type(plain) is InvalidCall:
        assert made == plain
        return
    assert type(plain) in (ReadCall, WriteCall)
    assert made.tool is plain.tool
    assert type(made.args) is type(plain.args)
    assert made.args.__dict__ == plain.args.__dict__
    assert [type(v) for v in made.args.__dict__.values()] == [
        type(v) for v in plain.args.__dict__.values()
    ]
    assert made.args.model_fields_set == plain.args.model_fields_set
    assert made.args_hash == plain.args_hash
    assert made._canonical == plain._canonical
    assert made == plain
    assert repr(made) == repr(plain)


_KEYS = st.sampled_from(("key", "count", "price", "tags", "extra", "other"))
_VALUES = st.one_of(
    st.text(max_size=6),
    st.integers(-(10**20), 10**20),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=3), max_size=2),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
)


@st.composite
def _arguments(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(("object", "object", "object", "text", "dict")))
    if kind == "text":
        return draw(
            st.sampled_from(('{"key": 1', "[]", '{"key": "a"} ', "{}", "{", '{"key": NaN}'))
        )
    value = draw(st.dictionaries(_KEYS, _VALUES, max_size=4))
    if draw(st.booleans()):
        value["key"] = draw(st.text(max_size=6))
    if kind == "dict":
        return value
    import json

    return json.dumps(value, default=str)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(_CHANGES),
    st.booleans(),
    st.lists(_arguments(), min_size=1, max_size=4),
    st.integers(0, 3),
    st.sampled_from(("lookup", "run", "nope", 3)),
)
def test_route_as_the_plain_way(
    change: str, write: bool, calls: list[Any], changed_at: int, name: Any
) -> None:
    model = _model(change)
    tool = _tool(model, write)
    registry = ToolRegistry([tool])
    twin = ToolRegistry([tool])  # routed the plain way only
    called = name if name != "lookup" else tool.name
    undo = None
    try:
        registry.route(tool.name, '{"key": "first"}')  # the entry is made
        for index, arguments in enumerate(calls):
            if index == changed_at:
                undo = _change(change, tool, model)
            _same(
                _outcome(registry.route, called, arguments),
                _outcome(twin._route, called, arguments),
            )
        if undo is None and changed_at >= len(calls):
            undo = _change(change, tool, model)
        for arguments in [*calls, '{"key": "valid", "count": 2}']:  # one valid at least
            _same(
                _outcome(registry.route, called, arguments),
                _outcome(twin._route, called, arguments),
            )
    finally:
        if undo is not None:
            undo()


def test_entry_kept_for_a_plain_class_only() -> None:
    model = _model("none")
    tool = _tool(model, False)
    registry = ToolRegistry([tool])
    registry.route(tool.name, '{"key": "a"}')
    entry = registry._known[tool.name]
    assert entry[0] is tool
    assert entry[1] is model
    assert entry[2] is not None
    assert entry[3] is model.__dict__["__pydantic_validator__"]
    other = _tool(_model("other_base"), False)
    plain = ToolRegistry([other])
    plain.route(other.name, '{"key": "a"}')
    assert plain._known[other.name][2] is None


def test_copies_and_pickles_forget_the_entries() -> None:
    tool = _tool(_model("none"), False)
    registry = ToolRegistry([tool])
    registry.route(tool.name, '{"key": "a"}')
    for twin in (copy.copy(registry), copy.deepcopy(registry)):
        assert twin._known == {}
        assert type(twin.route(tool.name, '{"key": "b"}')) is ReadCall
        assert twin.names == registry.names
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(registry)  # the tool's function is local, as before
