# pyright: reportPrivateUsage=false
"""A call site (``_fast._attrs._site``) tries the class it built last before its dict.

The site keeps the last class it made a builder for beside that builder (one tuple,
stored whole) and calls it when it is given that very class (``is``), before looking
the class up by its id. Whatever order classes come in (the library's, a subclass with
a hook, one with its own ``__init__`` or a validator, a class equal to ``Planning`` by
its metaclass), each call makes what ``leaving._next(cls, **changes)`` makes: the same
class exactly, fields and ticket, and the same errors.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Phase, Phases, Planning, _seal, read_tool
from statemachine._fast._attrs import _site


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


def _positive(instance: Any, attribute: Any, value: int) -> None:
    if value < 1:
        raise ValueError("model_attempt must be positive")


@attrs.frozen(kw_only=True)
class CheckedPlanning(Planning[None]):
    """A validator of its own (built by ``_next``)."""

    model_attempt: int = attrs.field(default=1, validator=_positive)


@attrs.frozen(kw_only=True)
class HookedPlanning(Planning[None]):
    """A hook of its own (built by the site's builder, which calls it)."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "model_choice", self.model_choice + 100)


class OwnInitPlanning(Planning[None]):
    """An ``__init__`` of its own (built by ``_next``)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["invalid_streak"] = 7
        super().__init__(**kwargs)


class _LikePlanning(type):
    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(Planning)


@attrs.frozen(kw_only=True)
class _Wider(Planning[None], metaclass=_LikePlanning):
    """Equal to every class by its metaclass, with a field of its own."""

    extra: str = "x"


_CLASSES: tuple[type[Any], ...] = (
    Planning,
    CheckedPlanning,
    HookedPlanning,
    OwnInitPlanning,
    _Wider,
)
_AGENTS = {
    cls: Agent[None](name="sites16", tools=[lookup], phases=Phases[None](planning=cls))
    for cls in _CLASSES
}


def _fields(phase: Phase[Any]) -> dict[str, Any]:
    values: dict[str, Any] = {"class": type(phase)}
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            ticket = phase._ticket
            slots = {name: getattr(ticket, name) for name in _seal._Ticket.__slots__[1:]}
            slots["holder"] = ticket.holder is not None and ticket.holder() is phase
            slots.pop("parent")
            values[field.name] = slots
        else:
            values[field.name] = getattr(phase, field.name)
    return values


def _outcome(make: Any) -> Any:
    try:
        made = make()
    except Exception as error:  # compared
        return ("raised", type(error), str(error))
    return _fields(made)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_CLASSES), st.integers(-1, 3), st.integers(0, 5)),
        min_size=1,
        max_size=8,
    )
)
def test_a_site_builds_what_next_builds_in_any_order(
    calls: list[tuple[type[Any], int, int]],
) -> None:
    at = _site("model_attempt", "model_choice")
    for cls, attempt, choice in calls:
        leaving = _AGENTS[cls].start(None, "hi").receive("hi")
        twin = leaving._copy()
        fast = _outcome(lambda: at(cls, leaving, attempt, choice))  # noqa: B023
        plain = _outcome(lambda: twin._next(cls, model_attempt=attempt, model_choice=choice))  # noqa: B023
        assert fast == plain
        if type(fast) is dict:
            assert fast["class"] is cls


@pytest.mark.parametrize("order", [(_Wider, Planning), (Planning, _Wider)])
def test_the_last_class_is_found_by_identity(order: tuple[type[Any], ...]) -> None:
    at = _site("pending")
    for _ in range(3):
        for cls in order:
            made = at(cls, _AGENTS[cls].start(None, "hi").receive("hi"), ())
            assert type(made) is cls
            assert hasattr(made, "extra") == (cls is _Wider)
