"""The graph of an agent's phases, read from their ``advance`` annotations.

Each active phase's ``advance`` is annotated with the union of the phases it may go to,
and the type checkers check every body against it; the graph is read from those same
annotations, so it cannot drift from the code. ``_successors_of`` reads one class's
targets (once per class); ``_edges`` checks an agent's ``Phases`` against them and names
its edges; ``_check_phase_class`` is the validator of each ``Phases`` field.

The phase classes themselves live in ``_phases``, which imports this module: the base
phases come in as arguments (``_phases._ROLES`` and ``_phases._ORDER``), and the phases
are imported here for the type checkers only.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import SetupError
from ._fast._classes import _per_class, _PerClass

if TYPE_CHECKING:
    from ._phases import Active, Phase, Phases

__all__ = ["_check_phase_class", "_edges", "_successors_of", "_where"]


# The phase classes each class's ``advance`` names, read once per class, kept by the
# class's id with a weak reference checked (``_per_class``): an agent factory that makes a
# phase subclass per call does not keep them all alive, and a class whose metaclass makes
# it equal to (and hash as) a library class is read from its own annotation, never given
# that class's answer, which a dict keyed by the class itself would do.
_TARGETS: _PerClass[tuple[type[Phase[Any]], ...]] = {}


def _base_of(cls: type[Any], order: tuple[type[Phase[Any]], ...]) -> type[Phase[Any]] | None:
    return next((base for base in order if issubclass(cls, base)), None)


def _where(cls: type[Any]) -> str:
    """``Class.advance``, naming the class that defines it when ``cls`` inherits it."""
    owner = next(klass for klass in cls.__mro__ if "advance" in vars(klass))
    inherited = "" if owner is cls else f" (inherited by {cls.__name__})"
    return f"{owner.__module__}.{owner.__qualname__}.advance{inherited}"


def _successors_of(
    cls: type[Active[Any]], order: tuple[type[Phase[Any]], ...]
) -> tuple[type[Phase[Any]], ...]:
    """The phase classes that ``cls.advance`` may return, read from its annotation.

    ``order`` is the base phases (see ``_phases._ORDER``); every target must be one of them.
    """
    return _per_class(_TARGETS, cls, lambda klass: _read_targets(klass, order))


def _read_targets(
    cls: type[Active[Any]], order: tuple[type[Phase[Any]], ...]
) -> tuple[type[Phase[Any]], ...]:
    where = _where(cls)
    advance = inspect.unwrap(cls.advance)
    annotations: dict[str, Any] = getattr(advance, "__annotations__", {})
    if "return" not in annotations:
        raise SetupError(
            f"{where} has no return annotation; annotate it with the phases it may go "
            "to, e.g. -> Planning[C] | Failed[C]"
        )
    written = annotations["return"]
    # Only the return annotation is resolved: a parameter's type may be imported
    # for the type checker alone, and the graph does not need it.
    holder = types.SimpleNamespace(__annotations__={"return": written})
    module = getattr(advance, "__module__", "?")
    try:
        hint = typing.get_type_hints(holder, globalns=getattr(advance, "__globals__", {}))
    except NameError as error:
        name = getattr(error, "name", None) or str(error)
        raise SetupError(
            f"{where} is annotated -> {written}, and {name!r} is not defined in module "
            f"{module}; import it there at run time (not only under TYPE_CHECKING), or "
            "define the phase class at module level"
        ) from error
    except Exception as error:
        raise SetupError(
            f"{where} is annotated -> {written}, which cannot be resolved ({error}); "
            "annotate it with the phases it may go to, e.g. -> Planning[C] | Failed[C]"
        ) from error
    returned = hint["return"]
    members = typing.get_args(returned) if _is_union(returned) else (returned,)
    found: list[type[Phase[Any]]] = []
    for member in members:
        target = typing.get_origin(member) or member
        if not (isinstance(target, type) and _base_of(target, order) is not None):
            names = ", ".join(base.__name__ for base in order)
            raise SetupError(
                f"{where} may return {_show(member)}, which is not a phase; it may return "
                f"only phases ({names}) or subclasses of them"
            )
        found.append(target)
    return tuple(found)


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _show(hint: Any) -> str:
    if hint is type(None):
        return "None"
    return hint.__name__ if isinstance(hint, type) else repr(hint)


def _edges(
    phases: Phases[Any],
    roles: tuple[tuple[str, type[Active[Any]]], ...],
    order: tuple[type[Phase[Any]], ...],
) -> tuple[tuple[tuple[str, type[Active[Any]]], ...], tuple[tuple[str, str], ...]]:
    """The named active phases of an agent running ``phases``, and its edges by name.

    Raises :class:`SetupError` when an ``advance`` annotation cannot be read or names a
    phase subclass this agent does not run (see :func:`statemachine.agent_graph`).
    ``roles`` and ``order`` are ``_phases._ROLES`` and ``_phases._ORDER``.
    """
    running: dict[type[Phase[Any]], type[Active[Any]]] = {
        base: getattr(phases, role) for role, base in roles
    }
    named: list[tuple[str, type[Active[Any]]]] = []
    edges: set[tuple[type[Phase[Any]], type[Phase[Any]]]] = set()
    for _, base in roles:
        cls = running[base]
        named.append((cls.kind, cls))
        for target in cls.successors():
            target_base = _base_of(target, order)
            assert target_base is not None  # successors() admits phases only
            runs = running.get(target_base)
            if runs is not None and not issubclass(runs, target):
                role_of = next(r for r, b in roles if b is target_base)
                raise SetupError(
                    f"{_where(cls)} may return {target.__name__}, but this agent runs "
                    f"{runs.__name__} as its {target_base.__name__} phase: annotate "
                    f"{target_base.__name__}[...] (the agent's own class is used), or "
                    f"build the agent with Phases({role_of}={target.__name__})"
                )
            edges.add((base, target_base))
    kinds: dict[type[Phase[Any]], str] = {
        base: running[base].kind if base in running else base.kind for base in order
    }
    ordered = sorted(edges, key=lambda edge: (order.index(edge[0]), order.index(edge[1])))
    return tuple(named), tuple((kinds[a], kinds[b]) for a, b in ordered)


def _check_phase_class(role: str, base: type[Any]) -> Callable[[Any, Any, Any], None]:
    def check(_: Any, __: Any, value: Any) -> None:
        if not (isinstance(value, type) and issubclass(value, base)):
            raise SetupError(
                f"Phases.{role} must be {base.__name__} or a subclass of it, got {value!r}"
            )

    return check
