# pyright: reportPrivateUsage=false, reportGeneralTypeIssues=false, reportUntypedBaseClass=false, reportAttributeAccessIssue=false
"""The canonical writer made only for a class holding its own serializer, against the plain way.

``_fast._canonical._writer`` writes a call's canonical text from the model's values, which
is ``_json.canonical(args.model_dump(mode="python"))`` only while ``model_dump`` runs the
serializer pydantic built for the class from its schema. A serializer replaced BEFORE
the writer is first made (by another class's, one made from another schema, from this
schema with another config, one delegating to another (``Prebuilt``), one whose schema was
changed after it was made, something not a ``SchemaSerializer``) gets no writer: the
class takes the plain way, and the text (so ``args_hash``) is the plain way's in every
case. A class whose serializer is untouched (or rebuilt by pydantic) keeps its writer,
as do the bench's and the agents' argument classes.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, field_serializer
from pydantic_core import SchemaSerializer, core_schema

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


class _Shouting(BaseModel):
    key: str
    count: int = 0
    price: Decimal | None = None
    kind: Literal["a", "b", 3] = "a"
    flag: bool = False

    @field_serializer("key")
    def _loud(self, value: str) -> str:
        return value.upper() + "!"


class _Impostor:
    """Not a SchemaSerializer: answers what model_dump asks of one, otherwise."""

    def to_python(self, value: Any, **_: Any) -> dict[str, object]:
        return {**vars(value), "key": "forged"}


def _shouting_class() -> type[BaseModel]:
    class Args(BaseModel):
        key: str
        count: int = 0
        price: Decimal | None = None
        kind: Literal["a", "b", 3] = "a"
        flag: bool = False

        @field_serializer("key")
        def _loud(self, value: str) -> str:
            return value.upper() + "!"

    return Args


def _other_schema(cls: type[BaseModel], loud: bool) -> SchemaSerializer:
    """A serializer made from a schema of ``cls``'s fields, not its own schema object."""
    key = core_schema.str_schema(
        serialization=core_schema.plain_serializer_function_ser_schema(lambda v: v + "?")
        if loud
        else None
    )
    fields = {
        "key": core_schema.model_field(key),
        "count": core_schema.model_field(core_schema.int_schema()),
        "price": core_schema.model_field(core_schema.nullable_schema(core_schema.decimal_schema())),
        "kind": core_schema.model_field(core_schema.literal_schema(["a", "b", 3])),
        "flag": core_schema.model_field(core_schema.bool_schema()),
    }
    schema = core_schema.model_schema(cls, core_schema.model_fields_schema(fields))
    # Not delegating to the serializer the (complete) class holds: built from this schema.
    own: Any = cls.__pydantic_core_schema__
    config: Any = dict(own["config"])  # equal to the class's, another dict
    return SchemaSerializer(schema, config, _use_prebuilt=False)


# Each change, and whether the class keeps its writer after it.
_CHANGES: dict[str, bool] = {
    "none": True,
    "rebuilt": True,
    "other_class": False,
    "other_schema": False,
    "other_schema_loud": False,
    "other_config": False,
    "same_schema_copy": False,
    "prebuilt_other": False,
    "prebuilt_own": False,
    "schema_changed": False,
    "impostor": False,
    "not_callable": False,
}


def _changed(change: str) -> type[BaseModel]:
    """A fresh arguments class with ``change`` made to it before any writer is."""
    cls: Any = _shouting_class() if change == "schema_changed" else _args_class()
    own: Any = cls.__pydantic_core_schema__
    if change == "rebuilt":
        cls.model_rebuild(force=True)
    elif change == "other_class":
        cls.__pydantic_serializer__ = _Shouting.__pydantic_serializer__
    elif change in ("other_schema", "other_schema_loud"):
        cls.__pydantic_serializer__ = _other_schema(cls, change == "other_schema_loud")
    elif change == "other_config":
        # The very schema object, with a config of its own.
        cls.__pydantic_serializer__ = SchemaSerializer(
            own, {"title": "Args", "strict": True}, _use_prebuilt=False
        )
    elif change == "same_schema_copy":
        copied: Any = dict(own)  # an equal schema, another object
        cls.__pydantic_serializer__ = SchemaSerializer(copied, own["config"], _use_prebuilt=False)
    elif change in ("prebuilt_other", "prebuilt_own"):
        if change == "prebuilt_other":
            cls.__pydantic_serializer__ = _Shouting.__pydantic_serializer__
        # Made from the class's own schema and config while the class is complete:
        # pydantic-core delegates to the serializer the class holds (Prebuilt).
        cls.__pydantic_serializer__ = SchemaSerializer(own, own["config"])
    elif change == "schema_changed":
        # The field serializer taken off the schema after the serializer was made from it.
        own["schema"]["fields"]["key"]["schema"].pop("serialization")
    elif change == "impostor":
        cls.__pydantic_serializer__ = _Impostor()
    elif change == "not_callable":
        cls.__pydantic_serializer__ = None
    made: type[BaseModel] = cls
    return made


_KEYS = st.text(max_size=12)
_COUNTS = st.integers(min_value=-(10**20), max_value=10**20)
_PRICES = st.none() | st.decimals(allow_nan=False, allow_infinity=False, places=3)
_KINDS = st.sampled_from(["a", "b", 3])


@settings(max_examples=200, deadline=None)
@given(
    key=_KEYS,
    count=_COUNTS,
    price=_PRICES,
    kind=_KINDS,
    flag=st.booleans(),
    change=st.sampled_from(sorted(_CHANGES)),
    first=st.sampled_from(["writer", "canonical"]),
)
def test_serializer_replaced_before_first_use(
    key: str, count: int, price: Decimal | None, kind: Any, flag: bool, change: str, first: str
) -> None:
    cls = _changed(change)
    args: Any = cls(key=key, count=count, price=price, kind=kind, flag=flag)
    plain = _plain(args)
    # The writer made first by _writer itself or by _plain_canonical's first call.
    fast = _plain_canonical(args) if first == "canonical" else None
    write = _writer(cls)
    assert (write is not None) is _CHANGES[change]
    if write is not None:
        got = write(args)
        assert got == _plain_canonical(args)
        if abs(count) < _INT_BOUND:
            assert got is not None
            assert got == plain
        else:
            assert got is None
    through = _plain_canonical(args)
    if not _CHANGES[change]:
        assert through is None
        assert fast is None
    assert through is None or through == plain
    assert fast is None or fast == plain


@settings(max_examples=60, deadline=None)
@given(key=_KEYS, change=st.sampled_from(sorted(_CHANGES)))
def test_route_hash_against_plain(key: str, change: str) -> None:
    """route's args_hash is the SHA-256 of the plain way's text for a class changed
    before its tool is registered (where the writer is first made)."""
    cls = _changed(change)

    async def look(args: Any) -> dict[str, object]:
        """Look."""
        return {}

    look.__annotations__ = {"args": cls, "return": dict[str, object]}
    registry = ToolRegistry([read_tool(look)])
    text = _json.dumps({"key": key})
    try:
        call = registry.route("look", text)
    except Exception:  # only where the plain way raises too (a serializer not callable)
        call = None
    if call is None:
        assert _plain(cls.model_validate({"key": key})) is _ERROR
        return
    assert type(call) is ReadCall
    plain = _plain(call.args)
    assert isinstance(plain, str)
    assert call.args_hash == hashlib.sha256(plain.encode()).hexdigest()


def _bench_and_agents() -> list[type[BaseModel]]:
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "bench"))
    try:
        loops = importlib.import_module("loops")
    finally:
        sys.path.remove(str(root / "bench"))
    research = importlib.import_module("agents.research._agent")
    support = importlib.import_module("agents.support._agent")
    travel = importlib.import_module("agents.travel._agent")
    return [
        loops.LookupArgs,
        research.SearchArgs,
        research.FetchArgs,
        support.LookupArgs,
        support.VerifyArgs,
        travel.WeatherArgs,
    ]


@pytest.mark.parametrize("cls", _bench_and_agents(), ids=lambda cls: cls.__qualname__)
def test_normal_classes_keep_their_writer(cls: type[BaseModel]) -> None:
    """The bench's and the agents' argument classes (their serializers untouched) are
    written by the fast way: the check does not lose it."""
    write = _writer(cls)
    assert write is not None
    fields = cls.model_fields
    values: dict[str, object] = {}
    for name, info in fields.items():
        if info.is_required():
            values[name] = 3 if info.annotation is int else "k"
    args = cls.model_validate(values)
    got = write(args)
    assert got is not None
    assert got == _plain(args)
    assert _plain_canonical(args) == got
