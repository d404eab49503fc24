"""The phase codec: a phase as a JSON document, and back, refusing what does not fit.

:func:`dump_phase` turns any phase into a document of JSON values (and ``Decimal``,
which :func:`statemachine.dumps` writes as an exact JSON number)::

    {"version": 3, "kind": "Observing", "class": "statemachine._phases:Observing",
     "agent": "travel", "phases": {"Planning": ["statemachine._phases:Planning",
     ["ctx", "transcript", ...]], ...}, "fields": {"ctx": ..., "transcript": [...], ...}}

``phases`` names, for every kind the agent's phases may be in, the class and the fields
the document of such a phase holds, in order (the agent's, not the run's: the same in
every document of the agent), so that a delta changes the phase by naming its kind.

:func:`load_phase` rebuilds the phase for one of the ``agents`` given, checking as it
goes: the agent, the phase class (the one the agent's ``Phases`` names for that kind),
the tools, each call's arguments against their recorded hash, an approval against its
call, and a verified answer's bytes against their SHA-256. The restored phase is a new
object, never left, equal to the one dumped (the agent is not part of a phase's
equality: it is code, passed back in).

What a document holds, besides plain JSON values:

- a value JSON cannot keep exactly is written as a one-key object: ``{"$decimal":
  "800"}`` for a ``Decimal`` that a JSON number would turn into an ``int`` or spell
  differently (``800``, ``8E+2``, ``-0``), ``{"$float": "0.1"}`` for a float (a JSON
  number is read back as ``Decimal``); a one-key object of the program's own whose key
  starts with ``$`` is wrapped as ``{"$object": {...}}``;
- a context is ``{"type": "pydantic" | "attrs", "class": "module:QualName", "data": ...}``
  (``None`` stays ``null``); pydantic contexts are validated anew, attrs contexts are
  rebuilt field by field from their annotations (so their validators run);
- a tool output is ``{"type": "json", "value": ...}`` or, for a pydantic model,
  ``{"type": "pydantic", "class": ..., "data": ...}``.

Values that a document could not give back equal (a context of another kind, a set
in a tool's output, a class defined inside a function) are refused by ``dump_phase``
with :class:`SetupError`, when the checkpoint is written, not when it is needed.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib
import operator
import types
import typing
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, NoReturn, TypeVar, cast

import attrs
from pydantic import BaseModel, TypeAdapter, ValidationError

from .. import _json
from .._actions import _RECORD_FIELDS, ActionLog, ActionRecord
from .._approval import ApprovedCall, _approval_document, _approve, _restored_approval
from .._budget import Spend
from .._errors import (
    BadArgumentsError,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointTamperedError,
    SetupError,
    UnknownToolError,
)
from .._fast._by_class import by_class
from .._governor import LoopState, _LoopFields
from .._guard import Parsed, Repair
from .._model import Message, ToolRequest, Transcript
from .._phases import Agent, AnyPhase, Done, Failed, Phase, Phases
from .._schema import Diagnostic
from .._seal import _UNSAVED, _Ticket
from .._tools import ReadCall, ReadTool, WriteCall, WriteTool
from ._chunks import _MESSAGE_KEYS, _decode, _load_loop, _load_transcript, _packed, _text

__all__ = ["check_resumable", "DOCUMENT_VERSION", "dump_phase", "load_phase"]

C = TypeVar("C")

DOCUMENT_VERSION: Final = 3
# Version 1 (before 2026-12-02) held every message and action record as an object;
# version 2 holds each full chunk of 32 as one string, its JSON text; version 3 also
# names the agent's phase classes and their fields (``phases``), so that a delta changes
# the phase with one op. All three load.
_READABLE: Final = (1, 2, 3)

# The phase field that ``Phases`` names the class of each kind; Failed and Done are final.
_ROLES: Final = {
    "Idle": "idle",
    "Planning": "planning",
    "AwaitApproval": "await_approval",
    "ToolCalling": "tool_calling",
    "Observing": "observing",
    "Retrying": "retrying",
    "ModelRetrying": "model_retrying",
    "Responding": "responding",
}
_TERMINAL: Final[dict[str, type[Phase[Any]]]] = {"Failed": Failed, "Done": Done}
_SCALARS: Final[dict[str, type]] = {
    "step": int,
    "input": str,
    "invalid_streak": int,
    "model_attempt": int,
    "model_choice": int,
    "call_id": str,
    "attempt": int,
    "error": str,
    "text": str,
    "reason": str,
    "from_phase": str,
    "partial": str,
    "answer": str,
    "answer_sha256": str,
}
_TAGS: Final = ("$decimal", "$float", "$object")
# A ToolRequest's fields, in their order: its model_dump's keys.
_REQUEST_KEYS: Final = tuple(ToolRequest.model_fields)


# --- values ----------------------------------------------------------------------------


def _class_path(cls: type[Any]) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


@functools.lru_cache(maxsize=256)
def _import(path: str) -> Any:
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _importable(cls: type[Any], what: str) -> str:
    """``cls``'s path, once it is known to lead back to ``cls``; else a SetupError."""
    path = _class_path(cls)
    try:
        found = _import(path)
    except (ImportError, AttributeError):
        found = None
    if found is not cls:
        raise SetupError(
            f"{what} {cls.__qualname__} cannot be checkpointed: {path} does not import back "
            "to it. Define the class at module level"
        )
    return path


def check_resumable(ctx: object, store: object) -> None:
    """Refuse, before a durable run starts, a context that no other process could restore.

    A checkpoint names the context's class by its module and qualified name; a worker,
    or ``runs resume`` in another process, imports it by that name. A class defined in
    the script being run (module ``__main__``: ``python file.py`` or ``python -m
    module``) or inside a function cannot be imported so, and such a run could never be
    resumed elsewhere: ``SetupError``, saying how to fix it. A store that lives in this
    process only (``MemoryCheckpointer``) is not checked: nothing else can resume from it.
    """
    if ctx is None or getattr(store, "_in_process", False):
        return
    cls = type(ctx)
    module, name = cls.__module__, cls.__qualname__
    if module == "__main__":
        where = "in the script being run (module __main__)"
    elif "<locals>" in name.split("."):
        where = f"inside a function ({module}:{name})"
    else:
        return
    raise SetupError(
        f"the context class {cls.__name__} is defined {where}, so another process (a "
        "worker, or `runs resume`) could not import it by name to resume this run; "
        "nothing was saved. Define the context class at module level in a module of "
        "its own (for example myagent/context.py) and import it from your script"
    )


def _keeps(value: Decimal) -> bool:
    """Whether a JSON number gives back this very ``Decimal`` (its digits and exponent)."""
    return _keeps_spelled(str(value))  # str spells the digits and the exponent, exactly


@functools.lru_cache(maxsize=1024)
def _keeps_spelled(spelled: str) -> bool:
    value = Decimal(spelled)
    try:
        text = _json.number_text(value)  # what dumps writes for it
    except (ValueError, ArithmeticError):
        return False
    # loads reads a number without a fraction or an exponent as int.
    if "." not in text and "E" not in text and "e" not in text:
        return False
    return Decimal(text).as_tuple() == value.as_tuple()


def _encode(value: Any) -> Any:
    """``value`` as JSON values and exact ``Decimal``; TypeError/ValueError if it cannot be."""
    if value is None or value is True or value is False:
        return value
    # Exact types first, each what the tests below give it: text and an int are their
    # own encoding (``str.__str__`` and ``int`` give back the very object); the library's
    # messages and records, objects and lists are none of text, a number or a model.
    kind = type(value)
    if kind is str or kind is int:
        return value
    if kind is float:  # repr's text; orjson writes the same shortest digits, and in the
        # same notation between 1e-4 and 1e16 (outside it repr writes 1e-05, orjson 0.00001)
        if 1e-4 <= value < 1e16 or -1e16 < value <= -1e-4:
            return {"$float": (_json._orjson or _json._import_orjson()).dumps(value).decode()}
        return {"$float": float.__repr__(value)}
    if kind is dict:  # as a mapping below, in this frame (a frame a level, as before)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"an object key must be text, got {key!r}")
            out[str.__str__(key)] = _encode(item)
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return {"$object": out}
        return out
    if kind is list or kind is tuple:
        return [_encode(item) for item in value]
    if kind is Message:
        return _message(value)
    if kind is ActionRecord:  # its fields, text as it is, the gain encoded
        # Read in place, in model_dump's order: eight exact texts and no gain (a record
        # not yet settled) or a gain, encoded (a float as above); anything else (fields
        # set around the class's converters) the long way below, field by field.
        call_id, tool, effect, exact, key, text, outcome, result, gain = _RECORD_VALUES(value)
        if (
            str
            is type(call_id)
            is type(tool)
            is type(effect)
            is type(exact)
            is type(key)
            is type(text)
            is type(outcome)
            is type(result)
        ):
            return {
                "call_id": call_id,
                "tool": tool,
                "effect": effect,
                "exact": exact,
                "key": key,
                "text": text,
                "outcome": outcome,
                "result": result,
                "gain": None if gain is None else _encode(gain),
            }
        return _record_long(value)
    if isinstance(value, str):
        return str.__str__(value)  # an enum member or other subclass, as plain text
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return {"$float": repr(value)}
    if isinstance(value, Decimal):
        return value if _keeps(value) else {"$decimal": str(value)}
    if isinstance(value, BaseModel):
        plan = _plan(type(value))
        if plan is _Plan.TEXT:
            if _holds_text(value):
                return value.model_dump(mode="json")  # the same values, built in Rust
            # A model made without validation (model_construct): pydantic would write
            # what it holds as it guesses (a float as a bare number); the long way.
            return _encode(value.model_dump(mode="python", warnings=False))
        dumped = value.model_dump(mode="python")
        if plan is _Plan.FLAT:  # only the fields that are not text, int, bool or None
            for key, item in dumped.items():
                if type(item) not in _PLAIN:
                    dumped[key] = _encode(item)
            return dumped
        return _encode(dumped)
    if isinstance(value, LoopState):  # not a model any more: as the model it was
        return _encode(_LoopFields.model_construct(**value._fields()))
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"an object key must be text, got {key!r}")
            out[str.__str__(key)] = _encode(item)
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return {"$object": out}
        return out
    if isinstance(value, list | tuple):
        return [_encode(item) for item in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError("bytes are not a JSON value")
    from pydantic_core import to_jsonable_python

    plain = to_jsonable_python(value)
    if type(plain) is type(value):
        raise TypeError(f"{type(value).__name__} is not a JSON value")
    return _encode(plain)


def _message(value: Message) -> dict[str, Any]:
    """``_encode`` of an exact :class:`Message` (the caller's test). Its text fields are
    text (its converters); each of its calls is written as its model_dump does: a call of
    exactly ``ToolRequest`` whose ``__dict__`` is exactly a dict of its three fields in
    their order, each an exact ``str`` (a validated call), as a copy of that dict, without
    ``_holds_text``'s frame and loop (which answers True for it); anything else as before
    (:func:`_holds_text`, then the same copy or its model_dump, or every call the long way)."""
    requests: list[Any] = []
    for call in value.tool_calls:
        if type(call) is ToolRequest:
            held: Any = call.__dict__  # a dict, unless set around pydantic
            if type(held) is dict and tuple(held) == _REQUEST_KEYS:
                name, arguments, made_id = held.values()
                if type(name) is str and type(arguments) is str and type(made_id) is str:
                    requests.append(held.copy())
                    continue
        if type(call) is not ToolRequest or not _holds_text(call):
            # A call made without validation, or of a class of its own: the long way.
            requests = [_encode(call) for call in value.tool_calls]
            break
        held = call.__dict__
        # Its three fields, in their order, all text: what its model_dump writes.
        requests.append(
            held.copy() if tuple(held) == _REQUEST_KEYS else call.model_dump(mode="json")
        )
    return {
        "role": value.role,
        "content": value.content,
        "tool_calls": requests,
        "tool_call_id": value.tool_call_id,
        "name": value.name,
    }


def _holds_text(model: BaseModel) -> bool:
    """Whether a model of the TEXT plan holds text where its fields say text (a model
    made without validation, by ``model_construct``, may hold anything), and models of
    that plan holding text in its tuples: then ``model_dump(mode="json")`` is its
    encoding, the values themselves."""
    for item in model.__dict__.values():
        if type(item) is str:
            continue
        if type(item) is not tuple:
            return False
        for inner in item:
            if not (
                isinstance(inner, BaseModel)
                and _plan(type(inner)) is _Plan.TEXT
                and _holds_text(inner)
            ):
                return False
    return True


def _plain_json(value: Any) -> bool:
    """Whether ``value`` is JSON of the exact types ``_decode(_encode(value))`` gives back
    equal without a look: dicts of text keys, lists, text, ints, bools and ``None``."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        return all(type(key) is str for key in value) and all(map(_plain_json, value.values()))
    return kind is list and all(map(_plain_json, value))


class _Plan(enum.Enum):
    """How a pydantic model class is encoded: see :func:`_plan`."""

    TEXT = "text"
    FLAT = "flat"
    NESTED = "nested"


_PLAIN: Final = frozenset({str, int, bool, type(None)})
_SCALAR_TYPES: Final = frozenset({str, int, bool, float, Decimal, type(None)})


@by_class
def _plan(cls: type[BaseModel]) -> _Plan:
    """How to encode instances of ``cls`` exactly as ``_encode(model_dump())`` does, fast.

    ``TEXT``: every field is text (or a tuple of such models), so ``model_dump(mode=
    "json")`` is the encoding (once it is seen to be text only: a model made without
    validation may hold anything). ``FLAT``: every field is a scalar (text, numbers,
    bools, ``None``), so only the values that are not text, int, bool or ``None`` need
    encoding. ``NESTED``: anything else (or a dump that a ``model_dump`` of the class's
    own, a serializer, a computed field or extra fields may change), encoded value by
    value. So no float leaves :func:`_encode` but as ``{"$float": ...}``.
    """
    decorators = cls.__pydantic_decorators__
    if (
        cls.model_dump is not BaseModel.model_dump  # its own: whatever it returns, encoded
        or decorators.field_serializers
        or decorators.model_serializers
        or cls.model_computed_fields
        or cls.model_config.get("extra") == "allow"
    ):
        return _Plan.NESTED
    fields = cls.model_fields.values()
    # A serializer in a field's metadata may write the JSON form differently.
    if all(not field.metadata and _text_annotation(field.annotation) for field in fields):
        return _Plan.TEXT
    annotations = [field.annotation for field in fields]
    if all(_scalar_annotation(annotation) for annotation in annotations):
        return _Plan.FLAT
    return _Plan.NESTED


def _text_annotation(annotation: Any) -> bool:
    if annotation is str:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return all(type(arg) is str for arg in args)
    if typing.get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        return isinstance(item, type) and issubclass(item, BaseModel) and _plan(item) is _Plan.TEXT
    return False


def _scalar_annotation(annotation: Any) -> bool:
    if annotation in _SCALAR_TYPES:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return all(type(arg) in _SCALAR_TYPES for arg in args)
    if origin is typing.Union or origin is types.UnionType:
        return all(_scalar_annotation(arg) for arg in args)
    return False


def _dump_transcript(value: Any) -> list[Any]:
    """A transcript as version 2 writes it: each full chunk as its text, then the tail."""
    transcript = value if type(value) is Transcript else Transcript(value)
    if transcript._head:
        transcript = Transcript(transcript)
    return [
        chunk if type(chunk) is str else _packed([_encode(item) for item in chunk], _MESSAGE_KEYS)
        for chunk in transcript._chunks
    ] + [_encode(item) for item in transcript._tail]


def _dump_log(log: ActionLog) -> list[Any]:
    """An action log as version 2 writes it: each full chunk as its text, then the tail."""
    return [
        chunk if type(chunk) is str else _packed([_encode(item) for item in chunk], _RECORD_FIELDS)
        for chunk in log._chunks
    ] + [_encode(item) for item in log._tail]


def _dump_loop(value: Any) -> Any:
    """A loop memory as the checkpoint writes it: its fields in order, each encoded as
    ``_encode`` encoded the pydantic model it was (its ``model_dump``), the actions of an
    ``ActionLog`` as version 2 writes them. A ``LoopState`` itself holding an exact
    ``ActionLog`` (every state a run makes) is written from its slots; anything else
    through the model's own dump (``_LoopFields``, the same fields and types), a subclass's
    actions as that dump writes them (as they were written)."""
    if type(value) is LoopState:
        actions = value.actions
        if type(actions) is ActionLog:
            return {
                "actions": _dump_log(actions),
                "evidence": _encode(value.evidence),
                "tool_iterations": _encode(value.tool_iterations),
                "low_gain_streak": _encode(value.low_gain_streak),
                "finalize": _encode(value.finalize),
                "paused": _encode(value.paused),
                "verdicts": _encode(value.verdicts),
                "flags": _encode(value.flags),
                "failures": _encode(value.failures),
            }
    if not isinstance(value, LoopState):
        return _encode(value)
    encoded = _encode(_LoopFields.model_construct(**value._fields()))
    if type(value) is LoopState and type(value.actions) is ActionLog:
        encoded["actions"] = _dump_log(value.actions)
    return encoded


@functools.lru_cache(maxsize=256)
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _hints(cls: type[Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError) as error:
        raise SetupError(
            f"{cls.__qualname__}'s annotations cannot be resolved ({error}), so a checkpoint "
            "cannot rebuild it; define the types it names at module level"
        ) from None


def _rebuild(annotation: Any, value: Any) -> Any:
    if isinstance(annotation, type) and attrs.has(annotation):
        return _attrs_from(annotation, value)
    return _adapter(annotation).validate_python(value)


def _attrs_fields(value: Any) -> dict[str, Any]:
    return {
        field.name: _encode(getattr(value, field.name))
        for field in attrs.fields(type(value))
        if field.init
    }


def _attrs_from(cls: type[Any], data: Any) -> Any:
    if not isinstance(data, dict):
        raise TypeError(f"the fields of {cls.__qualname__} are an object")
    hints = _hints(cls)
    kwargs = {
        field.alias: _rebuild(hints.get(field.name, Any), _decode(data[field.name]))
        for field in attrs.fields(cls)
        if field.init and field.name in data
    }
    return cls(**kwargs)


# --- dump ------------------------------------------------------------------------------


def dump_phase(phase: Phase[Any]) -> dict[str, Any]:
    """``phase`` as a document of JSON values and exact ``Decimal`` (write it with ``dumps``).

    Raises :class:`SetupError` for a phase a checkpoint could not give back: a context
    that is not a pydantic model, an attrs class or ``None``; a tool output, or a field
    of a phase subclass, that is not JSON values or a pydantic model; a class defined
    inside a function.
    """
    given: object = phase
    cls = type(phase)
    if not isinstance(given, Phase):
        raise SetupError(f"dump_phase takes a phase, got {cls.__name__}")
    fields: dict[str, Any] = {}
    for field in attrs.fields(cls):
        if not field.init or field.name in _UNSAVED:
            continue
        value = getattr(phase, field.name)
        fields[field.name] = _dump_field(cls, field, value)
    return {
        "version": DOCUMENT_VERSION,
        "kind": phase.kind,
        "class": _class_path(cls),
        "agent": phase.agent.name,
        "phases": _copied(_phase_table(phase.agent.phases)),
        "fields": fields,
    }


# _phase_table's answers by the id of the very ``Phases`` asked (held here, so that its id
# is not another's while kept): ``Phases`` compare by their classes with ``==``, which a
# class's metaclass may answer, so an ``lru_cache`` could give one agent's table to
# another's phases. Emptied when it holds 64 (an agent's phases are asked at every save).
_TABLES: dict[int, tuple[Phases[Any], dict[str, list[Any]]]] = {}


def _phase_table(phases: Phases[Any]) -> dict[str, list[Any]]:
    """The ``phases`` of a version 3 document: for each kind an agent's phases may be in,
    the class and the fields :func:`dump_phase` writes, in its order. A delta changes the
    phase with ``["phase", kind]`` (see ``_delta._apply``). Never changed: copy it."""
    known = _TABLES.get(id(phases))
    if known is not None and known[0] is phases:
        return known[1]
    classes = [getattr(phases, role) for role in _ROLES.values()]
    table = {
        cls.kind: [_class_path(cls), list(_field_names(cls))] for cls in (*classes, Failed, Done)
    }
    if len(_TABLES) >= 64:
        _TABLES.clear()
    _TABLES[id(phases)] = (phases, table)
    return table


def _copied(table: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A table of :func:`_phase_table` that its reader may change."""
    return {kind: [path, list(names)] for kind, (path, names) in table.items()}


@by_class
def _field_names(cls: type[Phase[Any]]) -> tuple[str, ...]:
    """The fields :func:`dump_phase` writes for ``cls``, in its order."""
    return tuple(f.name for f in attrs.fields(cls) if f.init and f.name not in _UNSAVED)


def _dump_field(cls: type[Any], field: attrs.Attribute[Any], value: Any) -> Any:
    match field.name:
        case "ctx":
            return _dump_ctx(value)
        case "transcript":
            return _dump_transcript(value)
        case "pending":
            return [_encode(item) for item in value]
        case "loop":
            return _dump_loop(value)
        case "spent":
            return _encode(value.model_dump())  # as a pydantic model of its fields is
        case "call":
            return _dump_call(value)
        case "output":
            return _dump_output(value)
        case "verified":
            return None if value is None else _dump_parsed(value)
        case name if name in _SCALARS and type(value) is _SCALARS[name]:
            return value
    # A field of a phase subclass: plain values, checked now to come back equal.
    encoded: Any = None
    try:
        encoded = _encode(value)
        same = _rebuild(_hints(cls).get(field.name, Any), _decode(encoded)) == value
    except (TypeError, ValueError, ValidationError):
        same = False
    if not same:
        raise SetupError(
            f"{cls.__qualname__}.{field.name} holds {type(value).__name__}, which a "
            "checkpoint cannot give back equal; hold JSON values, Decimal or pydantic "
            "models in phase fields"
        )
    return encoded


def _dump_ctx(ctx: Any) -> Any:
    if ctx is None:
        return None
    cls = type(ctx)
    if isinstance(ctx, BaseModel):
        path = _importable(cls, "the context class")
        return {"type": "pydantic", "class": path, "data": _encode(ctx)}
    if attrs.has(cls):
        path = _importable(cls, "the context class")
        data = _try_encode(_attrs_fields, ctx)
        if data is None or _try_rebuild(lambda: _attrs_from(cls, data)) != ctx:
            raise SetupError(
                f"the context {cls.__qualname__} cannot be checkpointed: its fields do not "
                "come back equal from JSON. Give its fields annotated JSON types, Decimal, "
                "pydantic models or attrs classes"
            )
        return {"type": "attrs", "class": path, "data": data}
    raise SetupError(
        f"a checkpoint cannot hold a context of type {cls.__qualname__}; contexts that can "
        "be checkpointed are pydantic models, attrs classes and None"
    )


def _try_encode(encode: Callable[[Any], Any], value: Any) -> Any:
    try:
        return encode(value)
    except (TypeError, ValueError):
        return None


_FAILED: Final = object()


# An ActionRecord's fields, in model_dump's order, read at once (by exact type only).
_RECORD_VALUES: Final = operator.attrgetter(*_RECORD_FIELDS)


def _record_long(value: ActionRecord) -> dict[str, Any]:
    """``_encode`` of an ActionRecord the long way: its model_dump, text as it is and
    every other value encoded."""
    record = value.model_dump()
    for key, item in record.items():
        if type(item) is not str:
            record[key] = _encode(item)
    return record


def _try_rebuild(build: Callable[[], Any]) -> Any:
    try:
        return build()
    except (TypeError, ValueError, KeyError, ValidationError):
        return _FAILED


def _dump_call(call: ReadCall | WriteCall | ApprovedCall) -> dict[str, Any]:
    name = call.name
    args_hash = call.call.args_hash if isinstance(call, ApprovedCall) else call.args_hash
    document: dict[str, Any] = {
        "type": {ReadCall: "read", WriteCall: "write", ApprovedCall: "approved"}[type(call)],
        # Text (a tool's name, a hash); anything else encoded as every value is.
        "tool": name if type(name) is str else _encode(name),
        "args": _encode(call.args),
        "args_hash": args_hash if type(args_hash) is str else _encode(args_hash),
    }
    if isinstance(call, ApprovedCall):
        document["approval"] = _encode(_approval_document(call.approval))
    return document


def _dump_output(output: Any) -> dict[str, Any]:
    if type(output) is dict:
        flat = _flat(output)
        if flat is not None:
            return {"type": "json", "value": flat}
    if isinstance(output, BaseModel):
        path = _importable(type(output), "the tool output class")
        return {"type": "pydantic", "class": path, "data": _encode(output)}
    plain = _json.to_plain(output)
    encoded = _try_encode(_encode, plain)
    if encoded is None or (
        not _plain_json(plain) and _try_rebuild(lambda: _decode(encoded)) != output
    ):
        raise SetupError(
            f"a tool output of type {type(output).__name__} cannot be checkpointed: it does "
            "not come back equal from JSON. Return JSON values (dicts, lists, text, numbers, "
            "Decimal) or a pydantic model from tools"
        )
    return {"type": "json", "value": encoded}


def _flat(output: dict[Any, Any]) -> dict[str, Any] | None:
    """What the rest of :func:`_dump_output` writes as a tool output's value (its
    ``_encode``, plain JSON that needs no rebuild to check) for a dict whose keys are
    exact text and whose values are exact text, ints, bools or ``None`` (a tool's usual
    output): a copy of it, each key and value its own encoding; ``None`` for any other
    dict (or a one-key object whose key starts with ``$``, which ``_encode`` wraps)."""
    for key, item in output.items():
        if type(key) is not str:
            return None
        kind = type(item)
        if not (kind is str or kind is int or item is None or item is True or item is False):
            return None
    if len(output) == 1 and next(iter(output)).startswith("$"):
        return None
    return output.copy()


def _dump_parsed(parsed: Parsed[Any]) -> dict[str, Any]:
    return {
        "schema": _importable(type(parsed.value), "the answer schema"),
        "data": parsed.data.decode(),
        "sha256": _encode(parsed.sha256),
        "repairs": [str.__str__(repair) for repair in parsed.repairs],
        "normalised": [_encode(note) for note in parsed.normalised],
        "warnings": [_encode(warning) for warning in parsed.warnings],
    }


# --- load ------------------------------------------------------------------------------


def load_phase(
    document: Mapping[str, Any],
    *,
    agents: Mapping[str, Agent[C]],
    run_id: str | None = None,
) -> AnyPhase[C]:
    """The phase ``document`` describes, for the agent it names among ``agents``.

    Raises :class:`CheckpointMismatchError` when the document does not fit (another
    schema version, an agent not given, a phase class or tool the agent no longer
    has), :class:`CheckpointTamperedError` when its contents fail their own hashes,
    and :class:`CheckpointCorruptError` when it is malformed. ``run_id`` names the run
    in those errors.
    """
    loader = _Loader(run_id)
    if not isinstance(document, Mapping):
        loader.corrupt(f"a phase document is a JSON object, got {type(document).__name__}")
    version = document.get("version")
    if type(version) is not int:
        loader.corrupt("the document has no version number; it is not a phase document")
    if version not in _READABLE:
        older = "an older" if version < DOCUMENT_VERSION else "a newer"
        raise CheckpointMismatchError(
            f"the phase document is from {older} schema (version {version}) and this "
            f"library reads versions {_READABLE[0]} to {DOCUMENT_VERSION}; "
            + (
                "resume it with the statemachine release that wrote it, or migrate it"
                if version < DOCUMENT_VERSION
                else "upgrade statemachine to resume it"
            ),
            run_id=run_id,
        )
    name = loader.text(document, "agent")
    agent = agents.get(name)
    if agent is None:
        given = ", ".join(repr(known) for known in agents) or "(none)"
        raise CheckpointMismatchError(
            f"the checkpoint is of agent {name!r}, which was not given (agents given: "
            f"{given}); pass that agent in agents= to resume it",
            run_id=run_id,
        )
    cls = loader.phase_class(document, agent)
    loader.chunked = version >= 2
    fields = document.get("fields")
    if not isinstance(fields, dict):
        loader.corrupt("the document has no fields object")
    # The phase holds one of ``agents``, so its context type is theirs; the context class
    # itself was checked against the document's named class as it was rebuilt.
    # A phase class from the agent's Phases, or Failed/Done: one of AnyPhase's members.
    return cast("AnyPhase[C]", loader.build(cls, agent, fields))


class _Loader:
    """One load: the run id for errors, and the steps that may refuse."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.chunked = False  # version 2: full chunks held as their JSON text

    def corrupt(self, detail: str) -> NoReturn:
        raise CheckpointCorruptError(
            f"{detail}. The stored checkpoint is damaged; restore it from a trusted copy",
            run_id=self.run_id,
        )

    def text(self, document: Mapping[str, Any], key: str) -> str:
        value = document.get(key)
        if not isinstance(value, str):
            self.corrupt(f"the document's {key!r} is not text")
        return value

    def phase_class(self, document: Mapping[str, Any], agent: Agent[Any]) -> type[Phase[Any]]:
        kind = self.text(document, "kind")
        path = self.text(document, "class")
        if kind in _ROLES:
            expected: type[Phase[Any]] = getattr(agent.phases, _ROLES[kind])
        elif kind in _TERMINAL:
            expected = _TERMINAL[kind]
        else:
            raise CheckpointMismatchError(
                f"the checkpoint is in phase {kind!r}, which is not a phase kind "
                f"({', '.join([*_ROLES, *_TERMINAL])}); it was written by other code",
                run_id=self.run_id,
            )
        if _class_path(expected) != path:
            raise CheckpointMismatchError(
                f"the checkpoint's {kind} phase is {path}, but agent {agent.name!r} runs "
                f"{kind} as {_class_path(expected)}; resume it with an agent whose Phases "
                f"names {path}",
                run_id=self.run_id,
            )
        return expected

    def build(self, cls: type[Phase[Any]], agent: Agent[Any], fields: dict[str, Any]) -> Phase[Any]:
        known = {
            field.name: field
            for field in attrs.fields(cls)
            if field.init and field.name not in _UNSAVED
        }
        extra = sorted(set(fields) - set(known))
        if extra:
            raise CheckpointMismatchError(
                f"the checkpoint's {cls.kind} phase has field(s) {', '.join(extra)} that "
                f"{cls.__qualname__} does not; it was written by another version of that class",
                run_id=self.run_id,
            )
        kwargs: dict[str, Any] = {}
        for name, field in known.items():
            if name not in fields:
                if field.default is attrs.NOTHING:
                    self.corrupt(f"the {cls.kind} phase lacks its field {name!r}")
                continue
            try:
                kwargs[field.alias] = self.field(cls, agent, name, fields[name], fields)
            except CheckpointError:
                raise
            except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as error:
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                self.corrupt(f"the {cls.kind} phase's field {name!r} cannot be read ({reason})")
        try:
            return cls(agent=agent, **kwargs, ticket=_Ticket(None, "restore"))
        except CheckpointError:
            raise
        except (TypeError, ValueError) as error:
            self.corrupt(f"the {cls.kind} phase cannot be rebuilt ({error})")

    def field(
        self,
        cls: type[Phase[Any]],
        agent: Agent[Any],
        name: str,
        value: Any,
        fields: Mapping[str, Any],
    ) -> Any:
        match name:
            case "ctx":
                return self.ctx(value)
            case "transcript":
                return _load_transcript(value, self.chunked)
            case "pending":
                return tuple(ToolRequest.model_validate(_decode(item)) for item in value)
            case "spent":
                return Spend.model_validate(_decode(value))
            case "loop":
                return _load_loop(value, self.chunked)
            case "call":
                call_id = fields.get("call_id")
                return self.call(agent, value, call_id if isinstance(call_id, str) else "")
            case "output":
                return self.output(value)
            case "verified":
                return None if value is None else self.parsed(value)
            case _ if name in _SCALARS:
                if type(value) is not _SCALARS[name]:
                    raise TypeError(f"expected {_SCALARS[name].__name__}")
                return value
        return _rebuild(_hints(cls).get(name, Any), _decode(value))

    def model_class(self, path: Any, what: str) -> type[Any]:
        if not isinstance(path, str):
            raise TypeError(f"the {what} class is not text")
        try:
            found = _import(path)
        except (ImportError, AttributeError):
            found = None
        if path.startswith("__main__:") and found is None:
            raise CheckpointMismatchError(
                f"the {what} class {path} was defined in the script that started the run "
                "(module __main__), which this process is not; only that script can "
                "resume it. Run it again to resume the run there, or abort the run; define "
                "such classes in a module of their own so that any process can resume",
                run_id=self.run_id,
            )
        if not (isinstance(found, type) and (issubclass(found, BaseModel) or attrs.has(found))):
            raise CheckpointMismatchError(
                f"the {what} class {path} cannot be imported (or is not a pydantic model or "
                "attrs class); resume with the code that defines it",
                run_id=self.run_id,
            )
        return found

    def ctx(self, value: Any) -> Any:
        if value is None:
            return None
        cls = self.model_class(value["class"], "context")
        if value["type"] == "pydantic" and issubclass(cls, BaseModel):
            return cls.model_validate(_decode(value["data"]))
        if value["type"] == "attrs" and attrs.has(cls):
            return _attrs_from(cls, value["data"])
        raise TypeError(f"a context of type {value['type']!r} and class {value['class']}")

    def output(self, value: Any) -> Any:
        if value["type"] == "json":
            return _decode(value["value"])
        cls = self.model_class(value["class"], "tool output")
        if value["type"] == "pydantic" and issubclass(cls, BaseModel):
            return cls.model_validate(_decode(value["data"]))
        raise TypeError(f"an output of type {value['type']!r}")

    def call(
        self, agent: Agent[Any], value: Any, call_id: str
    ) -> ReadCall | WriteCall | ApprovedCall:
        kind, name, recorded = value["type"], value["tool"], value["args_hash"]
        try:
            tool = agent.tools.get(name)
        except UnknownToolError as error:
            raise CheckpointMismatchError(
                f"the checkpoint holds a call of tool {name!r}, which agent {agent.name!r} no "
                f"longer has (its tools: {', '.join(error.known) or '(none)'}); resume it with "
                "an agent that has the tool, or abort the run",
                run_id=self.run_id,
            ) from None
        expected = ReadTool if kind == "read" else WriteTool
        if kind not in ("read", "write", "approved"):
            raise TypeError(f"a call of type {kind!r}")
        if not isinstance(tool, expected):
            raise CheckpointMismatchError(
                f"the checkpoint holds a {'read' if kind == 'read' else 'write'} call of "
                f"{name!r}, but agent {agent.name!r} now declares {name!r} a {tool.effect} "
                "tool; a call cannot change its effect on resume. Abort the run",
                run_id=self.run_id,
            )
        try:
            call = tool.call(_decode(value["args"]))
        except BadArgumentsError as error:
            raise CheckpointMismatchError(
                f"the arguments of the {name!r} call no longer fit the tool's arguments model "
                f"({'; '.join(error.problems)}); resume with the code that wrote it",
                run_id=self.run_id,
            ) from None
        if call.args_hash != recorded:
            raise CheckpointTamperedError(
                f"the arguments of the {name!r} call do not match their recorded hash "
                f"(recorded {recorded}, now {call.args_hash}): the checkpoint was altered, or "
                "the tool's arguments model reads them differently now. Do not resume it; "
                "restore it from a trusted copy",
                run_id=self.run_id,
            )
        if kind != "approved":
            return call
        assert isinstance(call, WriteCall)
        approval = _restored_approval(
            _decode(value["approval"]), run_id=self.run_id or "", call_id=call_id
        )
        if approval.key != call.key:
            raise CheckpointTamperedError(
                f"the approval in the checkpoint is for {approval.key}, not for the call it "
                f"holds ({call.key}): the checkpoint was altered. Do not resume it; restore it "
                "from a trusted copy",
                run_id=self.run_id,
            )
        return _approve(call, approval)

    def parsed(self, value: Any) -> Parsed[Any]:
        schema = self.model_class(value["schema"], "answer schema")
        data = _text(value["data"], "data").encode()
        actual = hashlib.sha256(data).hexdigest()
        if actual != value["sha256"]:
            raise CheckpointTamperedError(
                f"the verified answer's bytes do not match their SHA-256 (recorded "
                f"{value['sha256']}, now {actual}): the checkpoint was altered. Do not "
                "resume it; restore it from a trusted copy",
                run_id=self.run_id,
            )
        if not issubclass(schema, BaseModel):
            raise TypeError("the answer schema is not a pydantic model")
        return Parsed(
            value=schema.model_validate(_json.loads(data)),
            data=data,
            sha256=actual,
            repairs=tuple(Repair(repair) for repair in value["repairs"]),
            normalised=tuple(_text(note, "note") for note in value["normalised"]),
            warnings=tuple(Diagnostic.model_validate(_decode(w)) for w in value["warnings"]),
        )
