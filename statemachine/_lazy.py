"""Names a package exports but imports on first use, as attrs' ``_make_getattr`` does.

``statemachine`` imports every public name on first use; ``statemachine.models`` and
``statemachine.persist`` keep optional or heavy parts (httpx, psycopg, cryptography,
the stores) out of their import the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["by_module", "lazy_names"]


def by_module(modules: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The map of name to module that :func:`lazy_names` reads, from each module's names.

    A name listed under two modules is a mistake in the package's table: a
    ``ValueError`` names it, so the package does not import at all rather than
    export the wrong object."""
    found: dict[str, str] = {}
    for module, names in modules.items():
        for name in names:
            if name in found:
                raise ValueError(f"{name!r} is listed under {found[name]!r} and {module!r}")
            found[name] = module
    return found


def lazy_names(
    package: str,
    namespace: dict[str, Any],
    lazy: Mapping[str, str],
    submodules: tuple[str, ...] = (),
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package`` (whose globals are
    ``namespace``): each name of ``lazy`` is imported from its module (relative to
    ``package``) when first asked for, and kept in ``namespace`` after; each name of
    ``submodules`` is the subpackage of that name, imported when first asked for."""

    def attribute(name: str) -> object:
        module = lazy.get(name)
        if module is None:
            if name in submodules:
                return importlib.import_module(f".{name}", package)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value: object = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(lazy) | set(submodules))

    return attribute, names
