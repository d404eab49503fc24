"""What the checker reads off the syntax tree: annotated class names, tracked names, parameters."""

from __future__ import annotations

import ast
from collections.abc import Iterator

__all__ = ["_Function", "_Scope", "_annotated_phase", "_class_name", "_key", "_parameters"]

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Scope = _Function | ast.Lambda


def _names_in_annotation(node: ast.expr | None) -> Iterator[str]:
    if node is None:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            yield child.id
        elif isinstance(child, ast.Attribute):
            yield child.attr


def _annotated_phase(annotation: ast.expr | None, classes: frozenset[str]) -> bool:
    return any(name in classes for name in _names_in_annotation(annotation))


def _class_name(node: ast.expr) -> str | None:
    """``Planning`` for ``Planning``, ``Planning[C]``, ``sm.Planning`` or ``sm.Planning[C]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _key(node: ast.expr | None) -> str | None:
    """The tracked name ``node`` stands for: ``x`` for a variable, ``self.a`` for an attribute."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"self.{node.attr}" if node.value.id == "self" else None
    return None


def _parameters(node: _Scope) -> tuple[list[str], int]:
    """The parameter names (positional first, then keyword-only) and how many are positional."""
    arguments = node.args
    positional = [argument.arg for argument in [*arguments.posonlyargs, *arguments.args]]
    return [*positional, *(argument.arg for argument in arguments.kwonlyargs)], len(positional)
