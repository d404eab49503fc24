"""The checkpoint producer's shortcuts of issue 23's twelfth round give what the plain
paths give.

- ``_delta._call_made``: a call of exactly ``ReadCall`` or ``WriteCall`` whose arguments
  are of a class ``_text_args`` takes, holding its fields' keys with an exact ``str``
  under each, encoded without ``model_dump``: the same JSON as ``_codec._dump_call`` and
  the same record as ``_call_seen``; ``None`` for every other class (an alias, an
  exclusion, a literal, a serializer, a number...) and every instance changed around
  validation (a text of a subclass, a number, keys reordered, added or dropped).
- The functions per pair and the loop memory's append one message or record in place,
  and move a window of texts or ints on by one (``_tuple_change``'s shift and append of
  one) in place: the same encoding and ops as ``_chunked_change`` and ``_tuple_change``.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer
from pydantic_core import SchemaSerializer, core_schema
from test_delta_fast5 import _copy
from test_delta_pairs import Text, exact
from test_delta_pairs2 import STEPS

from statemachine import read_tool, write_tool
from statemachine._actions import ActionRecord
from statemachine._governor import LoopState
from statemachine._phases import Observing, Planning, ToolCalling
from statemachine.persist._codec import _dump_call, _dump_loop
from statemachine.persist._delta import (
    _PAIRS,
    _call_kept,
    _call_made,
    _call_seen,
    _fields_change,
    _loop_change,
    _loop_fields,
    _pair,
    _text_args,
)

# --- a call of text arguments --------------------------------------------------------------


class One(BaseModel):
    key: str


class Two(BaseModel):
    key: str
    note: str = "none"


class Frozen(BaseModel, frozen=True, extra="forbid"):
    key: str
    note: str = Field(default="", description="a note")


class Sub(Two):
    more: str = ""


class Aliased(BaseModel):
    key: str = Field(alias="k")


class Renamed(BaseModel):
    key: str = Field(serialization_alias="k")


class ByAlias(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True)
    key: str = Field(alias="k")


class Excluded(BaseModel):
    key: str
    note: str = Field(default="", exclude=True)


class ExcludedIf(BaseModel):
    key: str
    note: str = Field(default="", exclude_if=lambda value: value == "")


class Literally(BaseModel):
    key: Literal["a", "b"]


class Upper(BaseModel):
    key: str

    @field_serializer("key")
    def _upper(self, value: str) -> str:
        return value.upper()


class Computed(BaseModel):
    key: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def twice(self) -> str:
        return self.key * 2


class Counted(BaseModel):
    key: str
    count: int = 0


class Extra(BaseModel, extra="allow"):
    key: str


class Swapped(BaseModel):
    key: str


# A serializer set around the schema (another class's): only the dump of a made
# instance tells it.
Swapped.__pydantic_serializer__ = Upper.__pydantic_serializer__


class Conditional(BaseModel):
    key: str


def _shout(model: Any) -> dict[str, Any]:
    key = model.__dict__["key"]
    return {"key": key.upper() if key.startswith("x") else key}


# A serializer of the model's own written into its schema (as a core schema of its own
# may): a made instance's dump does not tell it, the schema's key does.
_SCHEMA: Any = {
    **Conditional.__pydantic_core_schema__,
    "serialization": core_schema.plain_serializer_function_ser_schema(_shout),
}
Conditional.__pydantic_core_schema__ = _SCHEMA
Conditional.__pydantic_serializer__ = SchemaSerializer(_SCHEMA)


TAKEN = (One, Two, Frozen, Sub)
REFUSED = (
    *(Aliased, Renamed, ByAlias, Excluded, ExcludedIf, Literally, Upper, Computed),
    *(Counted, Extra, Swapped, Conditional),
)


def _tool(model: type[BaseModel], write: bool) -> Any:
    async def tool(args: Any) -> dict[str, object]:
        return {}

    tool.__annotations__ = {"args": model, "return": dict[str, object]}
    tool.__name__ = tool.__qualname__ = f"{'write' if write else 'read'}_{model.__name__.lower()}"
    return write_tool(tool) if write else read_tool(tool)


TOOLS: dict[tuple[type[BaseModel], bool], Any] = {
    (model, write): _tool(model, write) for model in TAKEN + REFUSED for write in (False, True)
}


def _values(model: type[BaseModel], text: str) -> dict[str, Any]:
    names = {name: field.alias or name for name, field in model.model_fields.items()}
    values: dict[str, Any] = {alias: text for alias in names.values()}
    if model is Literally:
        values["key"] = "a"
    if model is Counted:
        values["count"] = 3
    return values


def _changed(args: BaseModel, how: str) -> None:
    """Change the arguments around validation, as a tool may."""
    held: Any = args.__dict__
    first = next(iter(held))
    if how == "subclass":
        held[first] = Text(held[first])
    elif how == "same text":
        held[first] = "".join(list(held[first]))
    elif how == "number":
        held[first] = 7
    elif how == "none":
        held[first] = None
    elif how == "order":
        held[first] = held.pop(first)
    elif how == "extra":
        held["extra"] = "x"
    elif how == "dropped":
        del held[first]
    elif how == "key of a subclass":
        value = held.pop(first)
        items = dict(held)
        held.clear()
        held[Text(first)] = value
        held.update(items)
    elif how == "dict subclass":
        object.__setattr__(args, "__dict__", type("Held", (dict,), {})(held))


HOWS = [
    *("as made", "subclass", "same text", "number", "none", "order", "extra", "dropped"),
    *("key of a subclass", "dict subclass"),
]
# What leaves the arguments of a class taken still taken (an order of one key is the same).
STILL_TAKEN = {"as made", "same text"}


def _plain_seen(call: Any) -> tuple[Any, Any]:
    with warnings.catch_warnings():  # pydantic's on a value of another type: not ours
        warnings.simplefilter("ignore")
        document = _dump_call(call)
    return document, _call_seen(call, document)


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(TAKEN + REFUSED),
    write=st.booleans(),
    text=st.text(max_size=20) | st.sampled_from(["x", "xy"]),
    how=st.sampled_from(HOWS),
)
def test_a_call_of_text_is_dumped_as_dump_call_dumps_it(
    model: type[BaseModel], write: bool, text: str, how: str
) -> None:
    tool = TOOLS[(model, write)]
    call = tool.call(_values(model, text))
    _changed(call.args, how)
    plain: Any
    seen: Any
    try:
        plain, seen = _plain_seen(call)
    except Exception:  # arguments the plain way cannot write either
        plain = seen = None
    made: Any = _call_made(call)
    one_key = len(model.model_fields) == 1 and how == "order"
    assert (made is not None) == (model in TAKEN and (how in STILL_TAKEN or one_key))
    if made is None:
        return
    assert exact(made[8]) == exact(plain)
    assert list(made[8]) == list(plain)
    assert list(made[8]["args"]) == list(plain["args"])
    assert all(type(value) is str for value in made[8]["args"].values())
    assert seen is not None
    assert len(made) == len(seen)
    for mine, theirs in zip(made[:8], seen[:8], strict=True):
        assert mine is theirs or _same_items(mine, theirs)
    assert _call_kept(call, made, made[8])


def _same_object(one: Any, other: Any) -> bool:
    return one is other


def _same_items(one: Any, other: Any) -> bool:
    """Two tuples of the very same objects."""
    return type(one) is tuple and len(one) == len(other) and all(map(_same_object, one, other))


def test_the_classes_are_told_by_their_schema_and_their_dump() -> None:
    assert [_text_args(model) for model in TAKEN] == [
        ("key",),
        ("key", "note"),
        ("key", "note"),
        ("key", "note", "more"),
    ]
    assert [_text_args(model) for model in REFUSED] == [None] * len(REFUSED)
    assert _text_args(dict) is None
    assert _text_args(str) is None


def test_a_call_of_another_class_is_left_to_dump_call() -> None:
    call = TOOLS[(One, False)].call({"key": "k"})
    assert _call_made(call) is not None
    other: Any = object.__new__(type("Calling", (), {}))
    assert _call_made(other) is None


# --- the library's runs: the shortcuts taken, as the plain path --------------------------------

LIBRARY = (Planning, ToolCalling, Observing)


def _pair_of(old: Any, phase: Any) -> Any:
    before: Any = type(old)
    now: Any = type(phase)
    made: Any = _pair(before, now)
    assert made is not None
    return made


def _counted(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> dict[str, int]:
    """Count the calls the functions per pair and the loop memory's make of ``names``."""
    counts = dict.fromkeys(names, 0)
    spaces = [known[2].__globals__ for known in _PAIRS.values()]
    spaces.append(_loop_fields.__globals__)
    for space in spaces:
        for name in names:
            if name in space:
                held = space[name]

                def counting(*args: Any, _held: Any = held, _name: str = name) -> Any:
                    counts[_name] += 1
                    return _held(*args)

                monkeypatch.setitem(space, name, counting)
    return counts


def test_every_step_of_a_run_agrees_with_the_plain_path_without_the_long_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps = [s for s in STEPS if type(s[0]) in LIBRARY and type(s[2]) in LIBRARY]
    for old, _, phase, _ in steps:
        _pair_of(old, phase)
    counts = _counted(monkeypatch, ("_chunked_change", "_tuple_change", "_dump_field"))
    counts["_call_seen"] = 0
    shifted = appended = 0
    for old, document, phase, seen in steps:
        before = document["fields"]
        ops_plain: list[list[Any]] = []
        calls_plain = [seen]
        plain = _fields_change(type(phase), old, before, phase, ops_plain, calls_plain)
        ops: list[list[Any]] = []
        calls = [seen]
        made = _pair_of(old, phase)(old, before, phase, ops, calls)
        assert made is not None
        assert exact(made[0]) == exact(plain[0])
        assert list(made[0]) == list(plain[0])
        assert exact(made[1]) == exact(plain[1])
        assert exact(ops) == exact(ops_plain)
        assert [made[0][key] is before.get(key) for key in made[0]] == [
            plain[0][key] is before.get(key) for key in plain[0]
        ]
        shifted += sum(op[0] == "shift" for op in ops)
        appended += sum(op[0] == "append" for op in ops)
        if calls_plain[0] is not seen:
            assert calls[0] is not None
            assert calls_plain[0] is not None
            assert calls[0][:8] == calls_plain[0][:8]
    # The run's window moved on and its lists grew, each in place.
    assert shifted >= 5
    assert appended >= 2 * 40
    assert counts["_tuple_change"] == 0
    assert counts["_chunked_change"] <= 4 + sum(type(s[2]) is Observing for s in steps)
    # The calls made were dumped in place, and the outputs too (tests/test_delta_fast8.py).
    assert counts["_dump_field"] == 0


# --- the loop memory's windows -------------------------------------------------------------------

TEXTS = st.sampled_from(["a", "b", "c", "", "long " * 5]) | st.text(max_size=5)
ITEMS = TEXTS | st.integers(-3, 3) | TEXTS.map(Text) | st.booleans() | st.just(1.5)


@st.composite
def _windows(draw: st.DrawFn) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """A tuple and the one after it, as a window moves on, grows, or changes otherwise."""
    old = tuple(draw(st.lists(ITEMS, max_size=40)))
    how = draw(st.sampled_from(["shift", "append", "same", "copy", "replace", "drop", "any"]))
    if how == "shift" and old:
        dropped = draw(st.integers(1, min(3, len(old))))
        new = old[dropped:] + tuple(draw(st.lists(ITEMS, min_size=1, max_size=3)))
    elif how == "append":
        new = (*old, *draw(st.lists(ITEMS, min_size=1, max_size=2)))
    elif how == "same":
        new = old
    elif how == "copy":  # equal items, other objects
        new = tuple(Text(item) if type(item) is str else item for item in old)
    elif how == "replace" and old:
        new = (*old[:-1], draw(ITEMS))
    elif how == "drop" and old:
        new = old[1:]
    else:
        new = tuple(draw(st.lists(ITEMS, max_size=40)))
    return old, new


@settings(max_examples=400, deadline=None)
@given(evidence=_windows(), failures=_windows(), flags=_windows())
def test_a_window_moved_on_is_as_tuple_change_moves_it(
    evidence: tuple[Any, Any], failures: tuple[Any, Any], flags: tuple[Any, Any]
) -> None:
    old = LoopState.model_construct(evidence=evidence[0], failures=failures[0], flags=flags[0])
    new = LoopState.model_construct(evidence=evidence[1], failures=failures[1], flags=flags[1])
    with warnings.catch_warnings():  # pydantic's on items of other types: not ours
        warnings.simplefilter("ignore")
        encoded = _dump_loop(old)
    ops: list[list[Any]] = []
    plain_ops: list[list[Any]] = []
    made = _loop_fields(old, encoded, new, ops)
    plain = _loop_change(old, encoded, new, plain_ops)
    assert exact(made) == exact(plain)
    assert list(made) == list(plain)
    assert exact(ops) == exact(plain_ops)
    assert [type(op) for op in ops] == [type(op) for op in plain_ops]
    for name in ("evidence", "failures", "flags"):
        assert type(made[name]) is type(plain[name])
        assert (made[name] is encoded[name]) == (plain[name] is encoded[name])
        assert [type(item) for item in made[name]] == [type(item) for item in plain[name]]


def test_a_window_of_one_moved_on_is_spliced_as_before() -> None:
    old = LoopState.model_construct(evidence=("a",))
    new = LoopState.model_construct(evidence=("b",))
    ops: list[list[Any]] = []
    plain_ops: list[list[Any]] = []
    encoded = _dump_loop(old)
    assert exact(_loop_fields(old, encoded, new, ops)) == exact(
        _loop_change(old, encoded, new, plain_ops)
    )
    assert ops == plain_ops == [["splice", ["fields", "loop", "evidence"], 0, ["b"]]]


# --- a tail grown by one, and tails that only look so -------------------------------------------


def _agree(old: Any, before: Any, phase: Any, seen: Any) -> None:
    """The pair's function gives what ``_fields_change`` gives, kept objects included."""
    ops_plain: list[list[Any]] = []
    kind: Any = type(phase)
    plain = _fields_change(kind, old, before, phase, ops_plain, [seen])
    ops: list[list[Any]] = []
    made = _pair_of(old, phase)(old, before, phase, ops, [seen])
    assert made is not None
    assert exact(made[0]) == exact(plain[0])
    assert exact(made[1]) == exact(plain[1])
    assert exact(ops) == exact(ops_plain)
    assert [made[0][key] is before.get(key) for key in made[0]] == [
        plain[0][key] is before.get(key) for key in plain[0]
    ]
    loop, plain_loop = made[0]["loop"], plain[0]["loop"]
    assert [loop[key] is before["loop"].get(key) for key in loop] == [
        plain_loop[key] is before["loop"].get(key) for key in plain_loop
    ]


def _grown(old: Any, new: Any) -> bool:
    return old._chunks is new._chunks and len(new._tail) == len(old._tail) + 1


def _tailed(sequence: Any, how: str) -> Any:
    """``sequence`` (a transcript or an action log) made again with its tail changed."""
    tail: Any = sequence._tail
    if how == "equal copy" and tail:
        tail = (tail[0].model_copy(), *tail[1:])
    elif how == "one more":
        tail = (*tail, tail[-1])
    elif how == "one fewer" and tail:
        tail = tail[:-1]
    elif how == "a list":
        tail = list(tail)
    made = _again(sequence)
    if how == "chunks copied":
        made._chunks = (*sequence._chunks, ())[:-1] if sequence._chunks else ((),)
    else:
        made._tail = tail
    return made


def _again(sequence: Any) -> Any:
    """Another object of ``sequence``'s class holding what it holds."""
    kind: Any = type(sequence)
    made: Any = object.__new__(kind)
    names: tuple[str, ...] = kind.__slots__
    for name in names:
        object.__setattr__(made, name, getattr(sequence, name))
    return made


TAILS = ["as made", "equal copy", "one more", "one fewer", "a list", "chunks copied"]
GROWN = [
    s
    for s in STEPS
    if type(s[0]) in LIBRARY
    and type(s[2]) in LIBRARY
    and (_grown(s[0].transcript, s[2].transcript) or _grown(s[0].loop.actions, s[2].loop.actions))
]


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(GROWN) - 1), how=st.sampled_from(TAILS), log=st.booleans())
def test_a_tail_grown_by_one_or_not_quite_is_as_the_plain_path(
    at: int, how: str, log: bool
) -> None:
    old, document, phase, seen = GROWN[at]
    if log:
        loop = phase.loop
        changed = LoopState.model_construct(
            **{**loop._fields(), "actions": _tailed(loop.actions, how)}
        )
        phase = _copy(phase, loop=changed)
    else:
        phase = _copy(phase, transcript=_tailed(phase.transcript, how))
    _agree(old, document["fields"], phase, seen)


def test_steps_of_both_kinds_grow_by_one() -> None:
    assert sum(_grown(s[0].transcript, s[2].transcript) for s in GROWN) >= 20
    assert sum(_grown(s[0].loop.actions, s[2].loop.actions) for s in GROWN) >= 20


# --- the log's last record settled ----------------------------------------------------------------


def _settled(old: Any, new: Any) -> bool:
    return (
        old._chunks is new._chunks
        and len(new._tail) == len(old._tail) > 0
        and new._tail[-1] is not old._tail[-1]
    )


SETTLED = [
    s
    for s in STEPS
    if type(s[0]) in LIBRARY
    and type(s[2]) in LIBRARY
    and _settled(s[0].loop.actions, s[2].loop.actions)
]


def _record_as(record: Any, how: str) -> Any:
    """A settled record, or one changed as code around the class's converters may."""
    if how == "a field of a subclass":
        return _copy(record, result=Text(record.result))
    if how == "a field a number":
        return _copy(record, outcome=7)
    if how == "the gain other":
        return _copy(record, gain=0.25)
    if how == "the same record":
        return None  # the record before, kept
    return record


SETTLES = ["as made", "a field of a subclass", "a field a number", "the gain other"]
SETTLES += ["the same record", "an earlier record copied", "encoded otherwise", "a list"]
SETTLES += ["one field settled", "a record of a subclass"]


class Sly(ActionRecord):  # type: ignore[misc]  # final: a subclass made only here
    """A record of a class of its own, its result read otherwise."""

    @property
    def result(self) -> str:  # type: ignore[override]
        return "sly"


def _outcome(change: Any, *args: Any) -> Any:
    """What ``change(*args)`` gives, or the class of what it raises."""
    try:
        return change(*args)
    except (TypeError, ValueError) as error:
        return type(error)


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(SETTLED) - 1), how=st.sampled_from(SETTLES))
def test_a_record_settled_or_not_quite_is_as_the_plain_path(at: int, how: str) -> None:
    old, document, phase, _ = SETTLED[at]
    log = _again(phase.loop.actions)
    tail: Any = log._tail
    last = _record_as(tail[-1], how)
    before = old.loop.actions._tail[-1]
    if how == "one field settled":
        last = _copy(before, gain=0.5)
    elif how == "a record of a subclass":
        last = object.__new__(Sly)
        for field in attrs.fields(ActionRecord):
            slot = ActionRecord.__dict__[field.name]  # under Sly's property
            slot.__set__(last, getattr(tail[-1], field.name))
    tail = (*tail[:-1], before if last is None else last)
    if how == "an earlier record copied" and len(tail) > 1:
        tail = (_copy(tail[0]), *tail[1:])
    if how == "a list":
        tail = list(tail)
    log._tail = tail
    loop = LoopState.model_construct(**{**phase.loop._fields(), "actions": log})
    encoded = document["fields"]["loop"]
    if how == "encoded otherwise":  # the last record's encoding of other keys
        actions = list(encoded["actions"])
        actions[-1] = {"other": 1}
        encoded = {**encoded, "actions": actions}
    ops: list[list[Any]] = []
    plain_ops: list[list[Any]] = []
    with warnings.catch_warnings():  # pydantic's on a field of another type: not ours
        warnings.simplefilter("ignore")
        made = _outcome(_loop_fields, old.loop, encoded, loop, ops)
        plain = _outcome(_loop_change, old.loop, encoded, loop, plain_ops)
    if type(plain) is type:
        assert made is plain
        return
    assert exact(made) == exact(plain)
    assert exact(ops) == exact(plain_ops)
    assert [made[key] is encoded[key] for key in made] == [
        plain[key] is encoded[key] for key in plain
    ]
    assert [type(item) for item in made["actions"]] == [type(item) for item in plain["actions"]]
    kept = [a is b for a, b in zip(made["actions"], encoded["actions"], strict=False)]
    assert kept == [a is b for a, b in zip(plain["actions"], encoded["actions"], strict=False)]


def test_records_settle_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(SETTLED) >= 30
    counts = _counted(monkeypatch, ("_chunked_change", "_chunked_plain"))
    for old, document, phase, _ in SETTLED:
        _loop_fields(old.loop, document["fields"]["loop"], phase.loop, [])
    assert counts == {"_chunked_change": 0, "_chunked_plain": 0}
