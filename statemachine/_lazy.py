"""Names a package exports but imports on first use, as attrs' ``_make_getattr`` does.

``statemachine``, ``statemachine.models`` and ``statemachine.persist`` keep optional or
heavy parts (httpx, psycopg, cryptography, the CLI-facing modules) out of their import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, namespace: dict[str, Any], lazy: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package`` (whose globals are
    ``namespace``): each name of ``lazy`` is imported from its module (relative to
    ``package``) when first asked for, and kept in ``namespace`` after."""

    def attribute(name: str) -> object:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(lazy))

    return attribute, names
