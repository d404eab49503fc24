# pyright: reportPrivateUsage=false
"""``Phase._leave`` reads its ticket slot in a try, where it called ``getattr(self,
"_ticket", None)``: the same look-up, an AttributeError (or a subclass of it) answering
``None``, any other error raised as it is.

Checked against the former way (``_leave_plain`` below, the code before the change) on
twins: a fresh phase, one left already, one with no ticket (made by ``object.__new__``),
one holding another phase's ticket, and subclasses whose ``__getattribute__`` answers
the ticket, another object, or raises an AttributeError, a subclass of it or another
error: the same error (class and text) or none, and the same ``left_by`` after.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import Agent, Phase, PhaseForgedError, PhaseReusedError, Phases, Planning
from statemachine._seal import _own_ticket, _Ticket


def _leave_plain(self: Any, transition: str) -> None:
    """``Phase._leave`` as it was (getattr with a default)."""
    ticket: object = getattr(self, "_ticket", None)
    if type(ticket) is _Ticket and ticket.holder is not None and ticket.holder() is self:
        owned = ticket
    else:
        owned = _own_ticket(self, transition)
    left_by = owned.left_by
    if left_by is not None:
        raise PhaseReusedError(self.kind, transition, left_by)
    owned.left_by = transition


class _OddAttributeError(AttributeError):
    pass


# How a subclass answers a read of ``_ticket``.
_MODES = ("slot", "attribute-error", "odd-attribute-error", "value-error", "other-object")


@attrs.frozen(kw_only=True)
class OddPlanning(Planning[None]):
    """A subclass whose ``_ticket`` read answers as ``mode`` says (a class attribute)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "_ticket":
            mode = type(self).mode
            if mode == "attribute-error":
                raise AttributeError(name)
            if mode == "odd-attribute-error":
                raise _OddAttributeError(name)
            if mode == "value-error":
                raise ValueError("no ticket for you")
            if mode == "other-object":
                return object()
        return super().__getattribute__(name)

    mode = "slot"


_AGENT = Agent[None](name="leave17")
_ODD = Agent[None](name="leave17odd", phases=Phases[None](planning=OddPlanning))


def _outcome(leave: Any, phase: Any, transition: str) -> Any:
    try:
        leave(phase, transition)
    except Exception as error:  # compared
        return ("raised", type(error), str(error))
    return ("left", phase._ticket.left_by if type(phase) is not OddPlanning else None)


def _phase(kind: str, odd: bool) -> Any:
    agent = _ODD if odd else _AGENT
    planning = agent.start(None, "hi").receive("hi")
    if kind == "fresh":
        return planning
    if kind == "left":
        planning._leave("respond")
        return planning
    if kind == "no-ticket":
        return object.__new__(type(planning))
    # another phase's ticket in this one's slot
    other = agent.start(None, "hi").receive("hi")
    object.__setattr__(other, "_ticket", planning._ticket)
    return other


_KINDS = ("fresh", "left", "no-ticket", "shared")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_KINDS),
            st.booleans(),
            st.sampled_from(_MODES),
            st.sampled_from(("advance", "execute", "observe", "respond")),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_leave_as_the_getattr_way(calls: list[tuple[str, bool, str, str, int]]) -> None:
    for kind, odd, mode, transition, times in calls:
        OddPlanning.mode = "slot"
        fast, plain = _phase(kind, odd), _phase(kind, odd)
        OddPlanning.mode = mode if odd else "slot"
        try:
            for _ in range(times):
                assert _outcome(Phase[Any]._leave, fast, transition) == _outcome(
                    _leave_plain, plain, transition
                )
        finally:
            OddPlanning.mode = "slot"
        if kind == "fresh" and not odd:
            assert fast._ticket.left_by == plain._ticket.left_by == transition


def test_each_way_refuses() -> None:
    planning = _AGENT.start(None, "hi").receive("hi")
    planning._leave("advance")
    with pytest.raises(PhaseReusedError):
        planning._leave("advance")
    with pytest.raises(PhaseForgedError):
        object.__new__(Planning)._leave("advance")
    OddPlanning.mode = "value-error"
    try:
        odd = _ODD.start(None, "hi").receive("hi")
        with pytest.raises(ValueError, match="no ticket for you"):
            odd._leave("advance")
        OddPlanning.mode = "odd-attribute-error"
        with pytest.raises(PhaseForgedError):
            odd._leave("advance")
    finally:
        OddPlanning.mode = "slot"
