# pyright: reportPrivateUsage=false
"""A builder makes its class's twin (``_fast._attrs._unfrozen``) by calling it, the twin's
``__init__`` being ``object.__init__``, where it called ``object.__new__(twin)``; a class
with no twin (another metaclass, a ``__del__``, an ``__init_subclass__``) is made by
``object.__new__`` as before.

Checked against the class's own attrs ``__init__`` (``cls(...)`` with the fields ``_next``
carries and a ticket minted as ``_next`` mints it): through a call site and through
``_next``, for ``Planning``, a subclass with a hook, and classes with no twin, in any
order: the same class exactly, the same fields and the same ticket (holder this very
object, ``left_by``, ``via``, ``origin``, ``runtime``, ``parent``); the twin's
``__init__`` is object's and nothing the builders make is of the twin's class.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import Agent, Phase, Phases, Planning, _seal
from statemachine._fast._attrs import _site, _unfrozen


@attrs.frozen(kw_only=True)
class HookedPlanning(Planning[None]):
    """A hook of its own (called by the builder)."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "model_choice", self.model_choice + 100)


class _Meta(type):
    pass


@attrs.frozen(kw_only=True)
class MetaPlanning(Planning[None], metaclass=_Meta):
    """Another metaclass: no twin."""


@attrs.frozen(kw_only=True)
class DelPlanning(Planning[None]):
    """A ``__del__``: no twin."""

    def __del__(self) -> None:
        pass


@attrs.frozen(kw_only=True)
class SubclassingPlanning(Planning[None]):
    """An ``__init_subclass__``: no twin."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)


_CLASSES: tuple[type[Any], ...] = (
    Planning,
    HookedPlanning,
    MetaPlanning,
    DelPlanning,
    SubclassingPlanning,
)
_AGENTS = {cls: Agent[None](name="build17", phases=Phases[None](planning=cls)) for cls in _CLASSES}


def _fields(phase: Phase[Any], leaving: Phase[Any]) -> dict[str, Any]:
    values: dict[str, Any] = {"class": type(phase)}
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            ticket = phase._ticket
            slots = {name: getattr(ticket, name) for name in _seal._Ticket.__slots__[1:]}
            slots["holder"] = ticket.holder is not None and ticket.holder() is phase
            slots["parent"] = slots["parent"] is leaving._ticket
            values[field.name] = slots
        else:
            values[field.name] = getattr(phase, field.name)
    return values


def _plain(cls: type[Any], leaving: Any, attempt: int, choice: int) -> Any:
    return cls(
        agent=leaving.agent,
        ctx=leaving.ctx,
        transcript=leaving.transcript,
        spent=leaving.spent,
        step=leaving.step + 1,
        loop=leaving.loop,
        ticket=_seal._Ticket(leaving._ticket, "transition"),
        model_attempt=attempt,
        model_choice=choice,
    )


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_CLASSES), st.integers(0, 3), st.integers(0, 5), st.booleans()),
        min_size=1,
        max_size=8,
    )
)
def test_built_as_the_classes_init_builds(calls: list[tuple[type[Any], int, int, bool]]) -> None:
    at = _site("model_attempt", "model_choice")
    for cls, attempt, choice, by_site in calls:
        leaving = _AGENTS[cls].start(None, "hi").receive("hi")
        made = (
            at(cls, leaving, attempt, choice)
            if by_site
            else leaving._next(cls, model_attempt=attempt, model_choice=choice)
        )
        plain = _plain(cls, leaving, attempt, choice)
        assert type(made) is cls
        assert _fields(made, leaving) == _fields(plain, leaving)
        twin = _unfrozen(cls)
        assert (twin is None) == (cls not in (Planning, HookedPlanning))
        if twin is not None:
            assert twin.__init__ is object.__init__
            assert type(made) is not twin


def test_a_copy_is_built_as_before() -> None:
    for cls in _CLASSES:
        leaving = _AGENTS[cls].start(None, "hi").receive("hi")
        copied = leaving._copy()
        plain = cls(
            **{
                field.alias: getattr(leaving, field.name)
                for field in attrs.fields(cls)
                if field.init and field.name != "_ticket"
            },
            ticket=_seal._Ticket(leaving._ticket, "copy"),
        )
        assert type(copied) is cls
        assert _fields(copied, leaving) == _fields(plain, leaving)
