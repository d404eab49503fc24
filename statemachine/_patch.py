"""State patches: a change the model proposes to a state, accepted whole or rejected whole.

The patch is applied to a copy. The copy must be a valid state (its pydantic schema,
cross-field validators included) and the move from the old state to the new one must
be allowed (``allowed``). Either everything in the patch is taken, or nothing is, and
the old state is never touched: after a rejection it is still the last valid version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, final

import attrs
from pydantic import BaseModel, ValidationError

from ._schema import Diagnostic, _type_diagnostics

__all__ = ["PatchAccepted", "PatchRejected", "apply_patch"]

M = TypeVar("M", bound=BaseModel)

Transition = Callable[[Any, Any], "str | None"]
"""``(old, new) -> reason`` the move is not allowed, or ``None`` when it is."""


@final
@attrs.frozen(kw_only=True)
class PatchAccepted(Generic[M]):
    """The patched copy, valid and reachable from the old state; ``changed`` lists paths."""

    state: M
    changed: tuple[str, ...]


@final
@attrs.frozen(kw_only=True)
class PatchRejected(Generic[M]):
    """The patch was refused whole; ``state`` is the old state, untouched."""

    state: M
    diagnostics: tuple[Diagnostic, ...]


def _merge(
    old: dict[str, Any], patch: Mapping[str, Any], path: str, unknown: list[Diagnostic]
) -> dict[str, Any]:
    merged = dict(old)
    for key, value in patch.items():
        where = f"{path}.{key}"
        if key not in old:
            unknown.append(
                Diagnostic(
                    code="patch.unknown_field",
                    message=f"the state has no field {key!r}",
                    path=where,
                    evidence=repr(value)[:200],
                    allowed_fixes=(f"patch only these fields: {', '.join(sorted(old))}",),
                )
            )
            continue
        if isinstance(value, Mapping) and isinstance(old[key], dict):
            merged[key] = _merge(old[key], value, where, unknown)
        else:
            merged[key] = value
    return merged


def _changes(old: Any, new: Any, path: str) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in old.keys() | new.keys():
            found += _changes(old.get(key), new.get(key), f"{path}.{key}")
        return sorted(found)
    return [] if old == new else [path]


def apply_patch(
    state: M,
    patch: Mapping[str, Any],
    *,
    allowed: Transition | None = None,
) -> PatchAccepted[M] | PatchRejected[M]:
    """Apply ``patch`` (nested mappings merge into nested models) to a copy of ``state``.

    Rejected whole, with diagnostics, when the patch names a field the state does not
    have, when the patched copy fails the state's schema, or when ``allowed(old, new)``
    gives a reason the move is not allowed.
    """
    old = state.model_dump(mode="python")
    unknown: list[Diagnostic] = []
    merged = _merge(old, patch, "$", unknown)
    if unknown:
        return PatchRejected(state=state, diagnostics=tuple(unknown))
    try:
        candidate = type(state).model_validate(merged)
    except ValidationError as error:
        return PatchRejected(state=state, diagnostics=_type_diagnostics(error, merged))
    if allowed is not None:
        reason = allowed(state, candidate)
        if reason is not None:
            refused = Diagnostic(
                code="patch.transition",
                message=reason,
                path="$",
                allowed_fixes=("propose a change that the state may make from where it is",),
            )
            return PatchRejected(state=state, diagnostics=(refused,))
    changed = tuple(_changes(old, candidate.model_dump(mode="python"), "$"))
    return PatchAccepted(state=candidate, changed=changed)
