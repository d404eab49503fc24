"""The seal: only a transition makes a phase, and a phase object is left once.

Each phase holds a ticket (``_Ticket``) that the library mints as it builds the phase and
binds to that one object; the ticket, not the phase, records whether the phase was left.
A phase built by its constructor, ``attrs.evolve``, ``copy`` or ``pickle`` has no ticket
of its own, so it is refused (:class:`PhaseForgedError`) and can never transition.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, final

from ._errors import PhaseForgedError

if TYPE_CHECKING:
    from ._phases import Phase
    from ._runtime import Runtime

__all__ = ["_UNSAVED", "_Ticket", "_bind", "_own_ticket"]

# The fields of a phase that are not part of its saved state: the agent (named by the
# document) and the seal (a restored phase is given a new one).
_UNSAVED = frozenset({"agent", "_ticket"})


@final
class _Ticket:
    """A phase's single-use cell, kept outside the phase: one object's right to transition.

    The library mints one each time it builds a phase (``_next``, ``_copy``,
    ``Agent.start``, ``load_phase``) and binds it to that object (a weak reference), so
    a copy of the phase that shares the ticket is not its holder. ``left_by`` is the
    transition that left the phase; ``parent`` the ticket of the phase it came from and
    ``via`` how (``"transition"``, ``"copy"``, or the root's origin: ``"start"``,
    ``"restore"``, ``"hand"``), which the runner reads to check what ``advance`` returned.
    ``runtime`` is the runtime of the Runner's run the phase belongs to: its tools run
    with that runtime only, never one a phase subclass made with a gate of its own.
    """

    __slots__ = (
        "__weakref__",
        "copied",
        "holder",
        "left_by",
        "origin",
        "parent",
        "runtime",
        "via",
    )

    def __init__(self, parent: _Ticket | None, via: str) -> None:
        self.holder: weakref.ref[Phase[Any]] | None = None
        self.left_by: str | None = None
        # Whether the transition that left it (advance) was carried on by a copy already.
        self.copied = False
        self.parent = parent
        self.via = via
        self.origin: str = via if parent is None else parent.origin
        # The runtime of the run a Runner drives this phase in (set by the runner on the
        # phase it starts from, inherited by every phase after it); None: driven by hand.
        self.runtime: Runtime | None = None if parent is None else parent.runtime

    def __reduce_ex__(self, protocol: object) -> Any:
        raise PhaseForgedError("(pickled)", "pickling or copying a phase is refused")


def _bind(phase: Phase[Any], _: Any, ticket: _Ticket) -> None:
    """Bind a fresh minted ticket to the phase being built; refuse anything else."""
    given: object = ticket  # whatever the caller passed, whatever its annotation says
    # A ticket made without its constructor (object.__new__) has no holder slot set.
    if type(given) is not _Ticket or not hasattr(ticket, "holder"):
        raise PhaseForgedError(type(phase).kind, f"building {type(phase).__name__} directly")
    if ticket.holder is not None:
        raise PhaseForgedError(
            type(phase).kind, f"attrs.evolve (or a copy) of a {type(phase).__name__}"
        )
    ticket.holder = weakref.ref(phase)


def _own_ticket(phase: Phase[Any], doing: str) -> _Ticket:
    """``phase``'s ticket, when the library minted it for this very object."""
    ticket: object = None
    try:
        ticket = phase._ticket
        holder = phase._ticket.holder
    except AttributeError:
        holder = None
    if holder is None or type(ticket) is not _Ticket:
        raise PhaseForgedError(type(phase).kind, f"{doing}() on a phase no transition made")
    if holder() is not phase:
        raise PhaseForgedError(
            type(phase).kind, f"{doing}() on a copy of a phase (attrs.evolve, copy, pickle)"
        )
    return ticket
