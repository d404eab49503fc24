"""What a reply or a configuration is checked against: diagnostics, JSON paths, schemas.

:class:`Diagnostic` says what failed, where (a JSON path such as ``$.items[2].amount``),
what was seen there and which fixes are allowed. The schema walker rebuilds a document
following a pydantic schema's annotations (the guard normalises values with it, and
:func:`validate_config` finds unknown keys with it); the type diagnostics turn a
pydantic ``ValidationError`` into located :class:`Diagnostic` s. The output guard
(``_guard``), the agent's configuration and ``_patch`` are built on these.
"""

from __future__ import annotations

import collections.abc
import json
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import date
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeAlias, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from . import _json
from ._errors import ConfigError, SetupError

__all__ = ["Diagnostic", "validate_config"]

C = TypeVar("C", bound=BaseModel)

# A place in a JSON document: object keys and list indexes from the root.
_Path: TypeAlias = tuple[str | int, ...]

_EVIDENCE_CHARS = 200


# --- diagnostics -----------------------------------------------------------------------


class Diagnostic(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """One problem with a reply: what failed, where, what was seen, and how to fix it.

    ``code`` is dotted: ``json.*`` (not JSON), ``type.*`` (schema), ``rule.<name>``
    (a cross-field rule), ``value.changed_after_pass`` (a retry changed a value that
    had passed). ``path`` is a JSON path from the root ``$`` (``$.items[2].amount``);
    ``evidence`` is the JSON spelling of the value seen there (``None``: nothing was
    there); ``allowed_fixes`` are the changes the model may make.
    """

    code: str
    severity: Literal["error", "warning"] = "error"
    message: str
    path: str = "$"
    evidence: str | None = None
    allowed_fixes: tuple[str, ...] = ()

    @classmethod
    def for_rule(
        cls,
        name: str,
        message: str,
        *,
        path: str,
        seen: Any,
        fixes: Iterable[str],
        severity: Literal["error", "warning"] = "error",
    ) -> Diagnostic:
        """A rule's diagnostic: code ``rule.<name>``, ``seen`` written as JSON evidence."""
        return cls(
            code=f"rule.{name}",
            severity=severity,
            message=message,
            path=path,
            evidence=_evidence(seen),
            allowed_fixes=tuple(fixes),
        )


def _evidence(value: Any) -> str:
    """``value`` as JSON text, short, and safe to send (lone surrogates escaped)."""
    try:
        text = _json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = repr(value)
    return _clip(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def _clip(text: str) -> str:
    return text if len(text) <= _EVIDENCE_CHARS else text[:_EVIDENCE_CHARS] + "..."


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_STEP = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _render(path: _Path) -> str:
    """``('items', 2, 'amount')`` -> ``$.items[2].amount``; odd keys as ``["a b"]``."""
    parts = ["$"]
    for step in path:
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.match(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{_evidence(step)}]")
    return "".join(parts)


# Used by _guard's validation loop (pyright counts uses in this module only).
def _parse_path(text: str) -> _Path:  # pyright: ignore[reportUnusedFunction]
    """The inverse of :func:`_render`; a path it cannot read means the whole document."""
    if not text.startswith("$"):
        return ()
    steps: list[str | int] = []
    position = 1
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            return ()
        if match[1] is not None:
            steps.append(match[1])
        elif match[2] is not None:
            steps.append(int(match[2]))
        else:
            try:
                steps.append(json.loads(match[3]))
            except ValueError:
                return ()
        position = match.end()
    return tuple(steps)


# Used by _guard (pyright counts uses in this module only).
def _find_surrogate(document: Any) -> _Path | None:  # pyright: ignore[reportUnusedFunction]
    """The path of a string (or key) holding a lone UTF-16 surrogate, if there is one."""
    stack: list[tuple[_Path, Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if any(0xD800 <= ord(char) <= 0xDFFF for char in node):
                return path
        elif isinstance(node, dict):
            for key, item in node.items():
                if any(0xD800 <= ord(char) <= 0xDFFF for char in key):
                    return (*path, key)
                stack.append(((*path, key), item))
        elif isinstance(node, list):
            stack.extend(((*path, index), item) for index, item in enumerate(node))
    return None


# Used by _guard's validation loop (pyright counts uses in this module only).
def _leaves(document: Any) -> dict[_Path, str]:  # pyright: ignore[reportUnusedFunction]
    """Every scalar (and empty container) of a document by path, as canonical JSON."""
    found: dict[_Path, str] = {}
    stack: list[tuple[_Path, Any]] = [((), document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict) and node:
            stack.extend(((*path, key), item) for key, item in node.items())
        elif isinstance(node, list) and node:
            stack.extend(((*path, index), item) for index, item in enumerate(node))
        else:
            try:
                found[path] = _json.canonical(node)
            except (ValueError, TypeError):
                found[path] = repr(node)
    return found


# Used by _guard's validation loop (pyright counts uses in this module only).
def _related(path: _Path, diagnosed: _Path) -> bool:  # pyright: ignore[reportUnusedFunction]
    """Whether ``path`` is at, inside, or around a diagnosed path."""
    common = min(len(path), len(diagnosed))
    return path[:common] == diagnosed[:common]


# --- schema walking --------------------------------------------------------------------

_SEQUENCES = (
    list,
    tuple,
    set,
    frozenset,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Set,
    collections.abc.MutableSet,
)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)

Leaf: TypeAlias = Callable[[Any, Any, _Path], Any]
OnModel: TypeAlias = Callable[[type[BaseModel], dict[str, Any], _Path], None]


def _unwrap(annotation: Any) -> Any:
    """``Annotated[X, ...]`` -> ``X``; ``X | None`` -> ``X``; other unions unchanged."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is Union or origin is types.UnionType:
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _keys(name: str, field: Any) -> list[str]:
    """The keys a document may use for a field: its validation alias, alias, and name."""
    keys = [key for key in (field.validation_alias, field.alias, name) if isinstance(key, str)]
    return list(dict.fromkeys(keys))


def _walk(
    annotation: Any, value: Any, path: _Path, *, leaf: Leaf, on_model: OnModel | None = None
) -> Any:
    """Rebuild ``value`` following ``annotation``: ``leaf`` maps each non-container node.

    Where the document does not have the shape the schema expects, the node is
    passed to ``leaf`` unchanged: the type-check reports it, not the walk.
    """
    annotation = _unwrap(annotation)
    origin = get_origin(annotation)
    if _is_model(annotation) and isinstance(value, dict):
        if on_model is not None:
            on_model(annotation, value, path)
        rebuilt = dict(value)
        for name, field in annotation.model_fields.items():
            for key in _keys(name, field):
                if key in rebuilt:
                    rebuilt[key] = _walk(
                        field.annotation,
                        rebuilt[key],
                        (*path, key),
                        leaf=leaf,
                        on_model=on_model,
                    )
                    break
        return rebuilt
    if origin in _SEQUENCES and isinstance(value, list):
        args = get_args(annotation)
        if origin is tuple and args and args[-1] is not Ellipsis:
            item_types = list(args)
        elif args:
            item_types = [args[0]] * len(value)
        else:
            return value
        return [
            _walk(item_type, item, (*path, index), leaf=leaf, on_model=on_model)
            for index, (item_type, item) in enumerate(zip(item_types, value, strict=False))
        ] + value[len(item_types) :]
    if origin in _MAPPINGS and isinstance(value, dict):
        args = get_args(annotation)
        if len(args) != 2:
            return value
        return {
            key: _walk(args[1], item, (*path, key), leaf=leaf, on_model=on_model)
            for key, item in value.items()
        }
    return leaf(annotation, value, path)


def _models_in(annotation: Any, seen: set[type[BaseModel]]) -> Iterator[type[BaseModel]]:
    """Every pydantic model class reachable from ``annotation``, each once."""
    annotation = _unwrap(annotation)
    if _is_model(annotation):
        if annotation in seen:
            return
        seen.add(annotation)
        yield annotation
        for field in annotation.model_fields.values():
            yield from _models_in(field.annotation, seen)
        return
    for arg in get_args(annotation):
        yield from _models_in(arg, seen)


# --- type-check ------------------------------------------------------------------------


def _locate(document: Any, loc: tuple[str | int, ...], *, missing: bool) -> _Path:
    """The document path of a pydantic error location.

    Steps that are not places in the document (the member names pydantic adds for
    unions, ``[key]`` for dictionary keys) are skipped; a missing field keeps its
    name as the last step.
    """
    path: list[str | int] = []
    node: Any = document
    for position, step in enumerate(loc):
        # Two branches, so that a type checker sees which key goes with which container.
        if isinstance(node, dict) and isinstance(step, str) and step in node:  # noqa: SIM114
            node = node[step]
            path.append(step)
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
            path.append(step)
        elif missing and position == len(loc) - 1:
            path.append(step)
    return tuple(path)


def _annotation_at(annotation: Any, path: _Path) -> Any:
    """The declared type at ``path`` in a schema, or ``None`` where the schema has none."""
    for step in path:
        annotation = _unwrap(annotation)
        origin = get_origin(annotation)
        args = get_args(annotation)
        if _is_model(annotation) and isinstance(step, str):
            fields = annotation.model_fields.items()
            found = [field for name, field in fields if step in _keys(name, field)]
            if not found:
                return None
            annotation = found[0].annotation
        elif origin in _SEQUENCES and isinstance(step, int) and args:
            fixed = origin is tuple and args[-1] is not Ellipsis
            if fixed and step >= len(args):
                return None
            annotation = args[step] if fixed else args[0]
        elif origin in _MAPPINGS and len(args) == 2:
            annotation = args[1]
        else:
            return None
    return _unwrap(annotation)


def _type_fixes(kind: str, context: Mapping[str, Any], declared: Any) -> tuple[str, ...]:
    if kind == "missing":
        return ("add this field with a value of its declared type",)
    if kind == "extra_forbidden":
        return ("remove this field",)
    if declared is Decimal:
        return ("write the amount as a JSON number, e.g. 1200.50",)
    if declared is date:
        return ("write the date as YYYY-MM-DD",)
    if kind == "string_too_long":
        return (f"shorten the text to at most {context['max_length']} characters",)
    if kind == "string_too_short":
        return (f"write at least {context['min_length']} character(s) of text",)
    if kind in ("literal_error", "enum"):
        return (f"use one of: {context['expected']}",)
    return ("replace this value with one that satisfies the message",)


def _type_diagnostics(
    error: ValidationError, document: Any, schema: type[BaseModel] | None = None
) -> tuple[Diagnostic, ...]:
    """Diagnostics for a pydantic error, located in ``document``.

    With ``schema``, the fixes offered depend on the declared type (money, dates).
    Also used by ``_patch`` (without a schema).
    """
    found = []
    for item in error.errors(include_url=False):
        kind = item["type"]
        context = item.get("ctx", {})
        path = _locate(document, item["loc"], missing=kind == "missing")
        if kind == "missing":
            code, message, evidence = "type.missing", "a required field is missing", None
        elif kind == "extra_forbidden":
            code, message = "type.extra", "this field is not in the schema"
            evidence = _evidence(item["input"])
        else:
            code, evidence = "type.invalid", _evidence(item["input"])
            message = str(context["error"]) if kind == "value_error" else item["msg"]
        found.append(
            Diagnostic(
                code=code,
                message=message,
                path=_render(path),
                evidence=evidence,
                allowed_fixes=_type_fixes(
                    kind, context, None if schema is None else _annotation_at(schema, path)
                ),
            )
        )
    return tuple(found)


# --- configuration ---------------------------------------------------------------------


def _unknown(shown: str, what: str, valid: list[str]) -> str:
    import difflib  # only for an error message

    close = difflib.get_close_matches(shown.strip("'\""), valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown {what} {shown}{hint}; the valid ones are: {', '.join(sorted(valid))}"


def validate_config(schema: type[C], mapping: Mapping[str, Any]) -> C:
    """``mapping`` as an instance of ``schema``, or :class:`ConfigError` at start-up.

    Unknown keys are refused at every depth whatever the model's ``extra`` setting,
    each named with the closest valid key, so that a typo fails loudly instead of
    leaving a default silently in force.
    """
    if not _is_model(schema):
        raise SetupError(f"validate_config needs a pydantic model class, got {schema!r}")
    if not isinstance(mapping, Mapping):
        raise ConfigError((f"$: expected a mapping of settings, got {type(mapping).__name__}",))
    unknown: list[tuple[_Path, str, str | None, str]] = []

    def on_model(model: type[BaseModel], value: dict[str, Any], path: _Path) -> None:
        valid = [key for name, field in model.model_fields.items() for key in _keys(name, field)]
        for key in value:
            if key not in valid:
                import difflib  # only for an error message

                close = difflib.get_close_matches(str(key), valid, n=1)
                problem = _unknown(repr(key), "key", valid)
                unknown.append((path, str(key), close[0] if close else None, problem))

    document = dict(mapping)
    _walk(schema, document, (), leaf=lambda _, value, __: value, on_model=on_model)
    if unknown:
        path, key, suggestion, _ = unknown[0]
        problems = tuple(f"{_render(where)}: {problem}" for where, _, _, problem in unknown)
        raise ConfigError(problems, path=_render(path), key=key, suggestion=suggestion)
    try:
        return schema.model_validate(document)
    except ValidationError as error:
        found = _type_diagnostics(error, document, schema)
        problems = tuple(f"{item.path}: {item.message}" for item in found)
        raise ConfigError(problems, path=found[0].path) from None
