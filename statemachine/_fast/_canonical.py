"""A call's canonical arguments written from the validated model's own values (see ``_fast``).

``_tools._canonical(args)`` is ``_json.canonical(args.model_dump(mode="python"))``: the
text whose SHA-256 is the call's ``args_hash``, which approvals and idempotency keys are
bound to. ``model_dump`` costs more than the rest of it together. For an arguments class
whose pydantic schema is on an allow-list (``_plain_fields``: each field a ``str``,
``int``, ``bool``, ``decimal`` or ``literal`` of those, optionally ``nullable`` and with a
default, nothing that changes how it is dumped) and whose serializer is the one pydantic
built for it from that very schema (``_own_serializer``, asked once per class: not another
class's, nor one made from another schema or config, delegating to another, or made before
its schema was changed), ``model_dump`` returns the model's
``__dict__`` values themselves, so the text can be written from them; each value's type
is checked at every call against its field's (an exact type: a subclass, or a value set
behind pydantic's back, declines). Anything not recognised exactly answers ``None``, and
the caller takes the plain path: the text, and so the hash, never differ.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any, Final

from pydantic import BaseModel
from pydantic_core import SchemaSerializer

from .. import _json
from ._classes import _per_class, _PerClass

__all__ = ["_plain_canonical", "_plain_fields", "_plain_json", "_value_text", "_writer"]

# A field as the writer reads it: its name, what goes before its value (``,"name":``,
# without the comma for the first), and the exact types its value may have.
_Field = tuple[str, str, frozenset[type[Any]]]
# An allow-listed class: its serializer (checked again at every call) and its fields,
# sorted by name as the canonical text sorts them.
_Plain = tuple[object, tuple[_Field, ...]]

_INT_BOUND: Final[int] = 10**_json._PLAIN_DIGITS
_LEAVES: Final = {"str": str, "int": int, "bool": bool, "decimal": Decimal}
# Keys a schema may hold without changing what ``model_dump(mode="python")`` returns for a
# value of its exact type (constraints and defaults act when validating only).
_LEAF_KEYS: Final = frozenset(
    {
        "type", "metadata", "strict", "max_length", "min_length", "pattern",
        "strip_whitespace", "to_lower", "to_upper", "coerce_numbers_to_str",
        "gt", "ge", "lt", "le", "multiple_of", "max_digits", "decimal_places",
        "allow_inf_nan", "expected",
    }
)  # fmt: skip
_DEFAULT_KEYS: Final = frozenset(
    {"type", "schema", "metadata", "default", "default_factory", "default_factory_takes_data",
     "on_error", "validate_default", "copy_default"}
)  # fmt: skip
_FIELD_KEYS: Final = frozenset({"type", "schema", "metadata", "frozen", "validation_alias"})
_FIELDS_KEYS: Final = frozenset({"type", "fields", "model_name", "computed_fields", "strict"})
_MODEL_KEYS: Final = frozenset(
    {"type", "cls", "config", "custom_init", "metadata", "ref", "root_model", "schema",
     "post_init", "generic_origin"}
)  # fmt: skip
# Config that acts when validating only (or in JSON mode only, which is not used here).
_CONFIG_KEYS: Final = frozenset(
    {
        "title", "extra_fields_behavior", "strict", "str_strip_whitespace", "str_to_lower",
        "str_to_upper", "str_max_length", "str_min_length", "validate_by_alias",
        "validate_by_name", "serialize_by_alias", "loc_by_alias", "hide_input_in_errors",
        "coerce_numbers_to_str", "cache_strings", "regex_engine", "allow_inf_nan",
        "from_attributes", "revalidate_instances", "validation_error_cause",
    }
)  # fmt: skip


def _kinds(schema: Mapping[str, Any]) -> frozenset[type[Any]] | None:
    """The exact types a field of ``schema`` dumps as themselves; ``None`` if not known."""
    kind = schema.get("type")
    if kind == "default":
        if not schema.keys() <= _DEFAULT_KEYS:
            return None
        return _kinds(schema["schema"])
    if kind == "nullable":
        if not schema.keys() <= {"type", "schema", "strict", "metadata"}:
            return None
        inner = _kinds(schema["schema"])
        return None if inner is None else inner | {type(None)}
    if not schema.keys() <= _LEAF_KEYS:
        return None
    if kind == "literal":
        expected = schema.get("expected")
        if not isinstance(expected, list) or not expected:
            return None
        types = {type(value) for value in expected}
        return frozenset(types) if types <= {str, int, bool, type(None)} else None
    leaf = _LEAVES.get(kind) if isinstance(kind, str) else None
    return None if leaf is None else frozenset({leaf})


# Words (outside its quoted strings) in a serializer's repr that turn it away: one that
# hands off to whatever serializer a class held when it was made (``Prebuilt``), or runs a
# function (a schema changed after its serializer was made). A deny-list, not the full set
# of words pydantic-core 2.50 writes: a later pydantic-core naming a new field in its repr
# keeps the fast way (the per-call checks still hold), where an allow-list would lose it.
_REFUSED_WORDS: Final = ("Prebuilt", "Function")
_QUOTED: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_WORD: Final = re.compile(r"\b[A-Za-z_]\w*")


def _own_serializer(serializer: SchemaSerializer, model: Mapping[str, Any]) -> bool:
    """Whether ``serializer`` (of the exact type) is one pydantic builds for ``model``'s
    class, from ``model`` itself: made from this very schema object (``__reduce__``'s
    arguments, what a pickle remakes it from) with its config, and its repr naming a model
    serializer and no word of ``_REFUSED_WORDS``: not another serializer's (``Prebuilt``,
    which a serializer made from the schema while the class held another one delegates
    to) nor a function's (a schema changed after its serializer was made). Anything else
    declines: the class then takes the plain path (the schema's allow-list in
    ``_plain_fields`` and the per-call type checks stand besides)."""
    try:
        reduced = serializer.__reduce__()
        made, arguments = reduced[0], reduced[1]
        if (
            made is not SchemaSerializer
            or type(arguments) is not tuple
            or len(arguments) < 2
            or arguments[0] is not model
            or type(arguments[1]) is not dict
            or arguments[1] != model.get("config")
        ):
            return False
        words = set(_WORD.findall(_QUOTED.sub("", repr(serializer))))
    except Exception:
        return False
    return "ModelSerializer" in words and not any(
        refused in word for word in words for refused in _REFUSED_WORDS
    )


def _plain_fields(cls: type[Any]) -> _Plain | None:
    """What ``_plain_canonical`` writes a ``cls`` from, or ``None`` when ``cls`` is not
    recognised exactly (its instances then take the plain path)."""
    if not (
        issubclass(cls, BaseModel)
        and cls.__dict__.get("__pydantic_complete__") is True
        and getattr(cls, "model_dump", None) is BaseModel.model_dump
        and getattr(cls, "__getattribute__", None) is object.__getattribute__
        and type(cls.__dict__.get("__pydantic_serializer__")) is SchemaSerializer
    ):
        return None
    model = cls.__dict__.get("__pydantic_core_schema__")
    if not isinstance(model, Mapping) or not model.keys() <= _MODEL_KEYS:
        return None
    config = model.get("config", {})
    if (
        model.get("type") != "model"
        or model.get("cls") is not cls
        or model.get("root_model") is not False
        or not isinstance(config, Mapping)
        or not config.keys() <= _CONFIG_KEYS
        or config.get("extra_fields_behavior", "ignore") not in ("ignore", "forbid")
    ):
        return None
    serializer = cls.__dict__["__pydantic_serializer__"]
    if not _own_serializer(serializer, model):
        return None
    inner = model.get("schema")
    if (
        not isinstance(inner, Mapping)
        or not inner.keys() <= _FIELDS_KEYS
        or inner.get("type") != "model-fields"
        or inner.get("computed_fields", []) != []
    ):
        return None
    fields: list[_Field] = []
    for name, field in dict(inner["fields"]).items():
        if type(name) is not str or not isinstance(field, Mapping):
            return None
        if not field.keys() <= _FIELD_KEYS or field.get("type") != "model-field":
            return None
        kinds = _kinds(field["schema"])
        if kinds is None:
            return None
        fields.append((name, "", kinds))
    fields.sort()
    heads = tuple(
        (name, ("," if index else "") + encode_basestring(name) + ":", kinds)
        for index, (name, _, kinds) in enumerate(fields)
    )
    return serializer, heads


def _value_text(value: Any, kinds: frozenset[type[Any]]) -> str | None:
    """How ``_json.canonical`` writes ``value``, of one of ``kinds`` (a field's types), in
    a dict that the sorted C encoder writes; ``None`` for any other value."""
    kind = type(value)
    if kind not in kinds:
        return None
    if kind is str:
        return encode_basestring(value)
    if kind is int:
        return int.__repr__(value) if -_INT_BOUND < value < _INT_BOUND else None
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    # A Decimal (the only other kind a field may have): as canonical writes it.
    return _json._number(value, canonical=True) if value.is_finite() else None


_Writer = Callable[[BaseModel], "str | None"]
_ONLY_TEXT: Final[frozenset[type[Any]]] = frozenset({str})
_SERIALIZER: Final = "__pydantic_serializer__"


def _writer(cls: type[Any]) -> _Writer | None:
    """A function writing a ``cls``'s canonical text from its values (``None`` when a
    value is not of its field's types, or its class's serializer was replaced since), made
    once per class; ``None`` when ``cls`` is not recognised exactly.

    The serializer is read from ``cls``'s own namespace (a live view, kept), where
    ``model_dump``'s ``self.__pydantic_serializer__`` finds it first, without the class
    attribute look-up, which pydantic's metaclass ``__getattr__`` hook sends through a
    Python-level ``type.__getattribute__`` call; ``args`` of any class but ``cls``
    itself answers ``None``."""
    plain = _plain_fields(cls)
    if plain is None:
        return None
    serializer, fields = plain
    # Every look-up by subscript, a missing key (a namespace without the serializer, a
    # value without a field) answering None by the KeyError; the text joined by one
    # f-string (the heads' braces doubled, their escapes kept by repr).
    lines = [
        "def write(args):",
        "    try:",
        "        if type(args) is not cls or space[SERIALIZER] is not serializer:",
        "            return None",
        "        values = args.__dict__",
        f"        if len(values) != {len(fields)}:",
        "            return None",
    ]
    namespace: dict[str, Any] = {
        "serializer": serializer, "encode": encode_basestring, "text": _value_text,
        "cls": cls, "space": vars(cls), "SERIALIZER": _SERIALIZER,
    }  # fmt: skip
    template = "{{"
    for index, (name, head, kinds) in enumerate(fields):
        namespace[f"name{index}"], namespace[f"kinds{index}"] = name, kinds
        lines.append(f"        value{index} = values[name{index}]")
        if kinds == _ONLY_TEXT:
            lines += [
                f"        if type(value{index}) is not str:",
                "            return None",
                f"        value{index} = encode(value{index})",
            ]
        else:
            lines += [
                f"        value{index} = text(value{index}, kinds{index})",
                f"        if value{index} is None:",
                "            return None",
            ]
        template += head.replace("{", "{{").replace("}", "}}") + f"{{value{index}}}"
    lines += ["    except KeyError:", "        return None", f"    return f{template + '}}'!r}"]
    exec(
        compile("\n".join(lines), f"<statemachine canonical {cls.__qualname__}>", "exec"), namespace
    )
    write: _Writer = namespace["write"]
    return write


_WRITERS: _PerClass[_Writer | None] = {}


def _plain_canonical(args: BaseModel) -> str | None:
    """``_json.canonical(args.model_dump(mode="python"))`` written from ``args``'s own
    values, or ``None`` when that cannot be known to be the same text."""
    cls = type(args)
    known = _WRITERS.get(id(cls))
    write = (
        known[1] if known is not None and known[0]() is cls else _per_class(_WRITERS, cls, _writer)
    )
    return None if write is None else write(args)


def _plain_json(value: Any) -> bool:
    """Whether ``value`` holds only text, bools, ``None``, ints of up to ``_PLAIN_DIGITS``
    digits, and dicts with text keys, lists and tuples of them (exact types): what the C
    encoder writes as ``_json`` writes it (``canonical`` with its keys sorted, ``dumps``
    in their order).

    A dict's scalar items are checked in its own loop (a call's arguments and a tool's
    result are mostly those); anything else by ``_plain_item``, which says the same of
    every value. A container holding itself raises ``RecursionError``.
    """
    if type(value) is not dict:
        return _plain_item(value)
    for key, item in value.items():
        if type(key) is not str:
            return False
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            number: int = item
            if not -_INT_BOUND < number < _INT_BOUND:
                return False
        elif not _plain_item(item):
            return False
    return True


def _plain_item(value: Any) -> bool:
    """``_plain_json(value)``, by one recursive check for every value."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        number: int = value
        return -_INT_BOUND < number < _INT_BOUND
    if kind is dict:
        return all(type(key) is str and _plain_item(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_plain_item(item) for item in value)
    return False
