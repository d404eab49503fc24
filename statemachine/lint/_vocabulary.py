"""The phases the checker knows, and their transitions, read from ``statemachine._phases``."""

from __future__ import annotations

import typing

from .. import _phases

__all__ = ["PHASE_CLASSES", "TRANSITIONS"]


def _is_phase_type(hint: object) -> bool:
    args = typing.get_args(hint)
    if args and typing.get_origin(hint) is not None and not isinstance(hint, type):
        origin = typing.get_origin(hint)
        if isinstance(origin, type) and issubclass(origin, _phases.Phase):
            return True
        return any(_is_phase_type(arg) for arg in args)
    return isinstance(hint, type) and issubclass(hint, _phases.Phase)


_PHASES: tuple[type[_phases.Phase[typing.Any]], ...] = (
    _phases.Phase,
    _phases.Active,
    _phases.Idle,
    _phases.Planning,
    _phases.AwaitApproval,
    _phases.ToolCalling,
    _phases.Observing,
    _phases.Retrying,
    _phases.ModelRetrying,
    _phases.Responding,
    _phases.Failed,
    _phases.Done,
)

#: The names of the phase classes (and their bases) the checker recognises.
PHASE_CLASSES: frozenset[str] = frozenset(cls.__name__ for cls in _PHASES)


def _transitions() -> frozenset[str]:
    names: set[str] = set()
    for cls in _PHASES:
        for name, member in vars(cls).items():
            if name.startswith("_") or not callable(member):
                continue
            hints = typing.get_type_hints(member)
            if _is_phase_type(hints.get("return")):
                names.add(name)
    return frozenset(names)


#: The transition methods: public methods of the phases that return a phase.
TRANSITIONS: frozenset[str] = _transitions()
