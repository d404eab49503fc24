"""A call site's builder (``_fast._attrs._site``) makes what ``_next`` makes.

The library's hot transitions (``ToolCalling.execute`` to ``Observing``,
``Observing.observe`` to ``Planning``) pass their changes positionally to a builder made
for the site and the class. These tests pin each site against ``leaving._next(cls,
**changes)``: the same fields, the same ticket bound to the new phase, the same class
(found by identity), the same errors, and the check a phase holding a call runs when it
is built.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    LoopState,
    Observing,
    Phase,
    Phases,
    Planning,
    ReadCall,
    ToolCalling,
    UnapprovedWriteError,
    _seal,
    read_tool,
    write_tool,
)
from statemachine._batch import _TO_CALLING
from statemachine._calling import _TO_OBSERVING
from statemachine._fast import _attrs
from statemachine._fast._attrs import _site
from statemachine._model import Message
from statemachine._phases import _OBSERVED


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


@write_tool
async def store(args: KeyArgs) -> dict[str, object]:
    """Store a key."""
    return {"stored": args.key}


AGENT = Agent[None](name="sites", tools=[lookup, store])


def _fields(phase: Phase[Any]) -> dict[str, Any]:
    """Every field of ``phase``, its class, and its ticket's slots (holder: is it ``phase``)."""
    values: dict[str, Any] = {"class": type(phase)}
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            ticket = phase._ticket
            slots = {name: getattr(ticket, name) for name in _seal._Ticket.__slots__[1:]}
            slots["holder"] = ticket.holder is not None and ticket.holder() is phase
            values[field.name] = slots
        else:
            values[field.name] = getattr(phase, field.name)
    return values


def _planning(agent: Agent[Any] = AGENT) -> Planning[Any]:
    return agent.start(None, "hi").receive("hi")


def _calling(agent: Agent[Any] = AGENT) -> ToolCalling[Any]:
    call = agent.tools.call("lookup", {"key": "k"})
    assert isinstance(call, ReadCall)
    return _planning(agent)._next(agent.phases.tool_calling, call=call, call_id="c")


def _twins(leaving: Phase[Any], at: Any, cls: type[Any], **changes: Any) -> tuple[Any, Any]:
    """``cls`` made at the site ``at`` and by ``_next``, from two twins of ``leaving``."""
    other = leaving._copy()  # the same fields, a ticket of the same kind
    fast = at(cls, leaving, *changes.values())
    plain = other._next(cls, **changes)
    return fast, plain


def _same(fast: Any, plain: Any) -> None:
    got, want = _fields(fast), _fields(plain)
    # The two leaving phases are twins, not one object: their tickets are the parents.
    assert got["_ticket"].pop("parent") is not None
    assert want["_ticket"].pop("parent") is not None
    assert got == want
    assert type(fast) is type(plain)


_COUNTS = st.integers(min_value=0, max_value=10**20)
_PENDING = st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3).map(tuple)
_PLANNING_CHANGES = {
    "pending": _PENDING,
    "invalid_streak": _COUNTS,
    "model_attempt": _COUNTS,
    "model_choice": _COUNTS,
    "step": _COUNTS,
    "transcript": st.lists(st.text(max_size=5), max_size=3).map(
        lambda texts: tuple(Message(role="user", content=t) for t in texts)
    ),
}


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_site_builds_the_planning_next_builds(data: st.DataObject) -> None:
    names = data.draw(
        st.lists(st.sampled_from(sorted(_PLANNING_CHANGES)), unique=True, max_size=6), "names"
    )
    changes = {name: data.draw(_PLANNING_CHANGES[name], name) for name in names}
    at = _site(*names)
    fast, plain = _twins(_planning(), at, Planning, **changes)
    _same(fast, plain)
    assert type(fast) is Planning
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        fast.step = 0  # type: ignore[misc]
    fast._leave("fail")  # the seal takes the ticket as the phase's own
    assert fast.left


@settings(max_examples=40, deadline=None)
@given(
    output=st.none() | st.integers() | st.text(max_size=5),
    tokens=_COUNTS,
    pending=_PENDING,
)
def test_the_library_s_sites_build_what_next_builds(
    output: object, tokens: int, pending: tuple[Any, ...]
) -> None:
    calling = _calling()
    spent = calling.spent.add(tokens=tokens, tool_calls=1)
    seen, seen_plain = _twins(
        calling,
        _TO_OBSERVING,
        Observing,
        call=calling.call,
        call_id="c",
        output=output,
        spent=spent,
        pending=pending,
    )
    _same(seen, seen_plain)
    planned, planned_plain = _twins(
        seen,
        _OBSERVED,
        Planning,
        transcript=seen.transcript,
        loop=seen.loop,
        pending=pending,
    )
    _same(planned, planned_plain)
    assert (type(seen), type(planned)) == (Observing, Planning)
    assert planned.step == calling.step + 2


@settings(max_examples=40, deadline=None)
@given(tokens=_COUNTS, pending=_PENDING, call_id=st.text(max_size=5))
def test_planning_s_site_builds_the_tool_calling_next_builds(
    tokens: int, pending: tuple[Any, ...], call_id: str
) -> None:
    """``_batch._take_reply``'s site: Planning -> ToolCalling."""
    planning = _planning()
    call = AGENT.tools.call("lookup", {"key": "k"})
    transcript = planning.transcript.appended(Message(role="assistant", content="a"))
    spent = planning.spent.add(tokens=tokens, model_calls=1)
    loop = LoopState()
    calling, calling_plain = _twins(
        planning,
        _TO_CALLING,
        ToolCalling,
        call=call,
        call_id=call_id,
        transcript=transcript,
        spent=spent,
        loop=loop,
        pending=pending,
    )
    _same(calling, calling_plain)
    assert type(calling) is ToolCalling
    assert calling.step == planning.step + 1


def test_a_site_still_refuses_a_write_that_was_not_approved() -> None:
    """``Observing.__attrs_post_init__`` runs: an unapproved write call is refused; so
    does ToolCalling's."""
    calling = _calling()
    planning = _planning()
    write = AGENT.tools.call("store", {"key": "k"})
    for build in (
        lambda: _TO_OBSERVING(Observing, calling, write, "c", 1, calling.spent, ()),
        lambda: calling._copy()._next(Observing, call=write, call_id="c", output=1),
        lambda: _TO_CALLING(
            ToolCalling,
            planning,
            write,
            "c",
            planning.transcript,
            planning.spent,
            planning.loop,
            (),
        ),
        lambda: planning._copy()._next(ToolCalling, call=write, call_id="c"),
    ):
        with pytest.raises(UnapprovedWriteError):
            build()


def test_a_site_s_wrong_names_fail_as_next_fails() -> None:
    """A name the class does not take, or a required one missing: ``cls(...)``'s error."""
    with pytest.raises(TypeError) as fast_error:
        _site("nope")(Planning, _planning(), 1)
    with pytest.raises(TypeError) as plain_error:
        _planning()._next(Planning, nope=1)
    assert str(fast_error.value) == str(plain_error.value)
    with pytest.raises(TypeError) as fast_error:
        _site("call_id")(ToolCalling, _planning(), "c")
    with pytest.raises(TypeError) as plain_error:
        _planning()._next(ToolCalling, call_id="c")
    assert str(fast_error.value) == str(plain_error.value)


def test_a_site_takes_distinct_names() -> None:
    with pytest.raises(ValueError, match="distinct names"):
        _site("loop", "loop")
    with pytest.raises(ValueError, match="distinct names"):
        _site("a b")


# Classes the site's builder leaves to _next and cls(...).


def _positive(instance: Any, attribute: Any, value: int) -> None:
    if value < 1:
        raise ValueError("model_attempt must be positive")


@attrs.frozen(kw_only=True)
class CheckedPlanning(Planning[None]):
    """A validator of its own on a field."""

    model_attempt: int = attrs.field(default=1, validator=_positive)


HOOKED: list[int] = []


@attrs.frozen(kw_only=True)
class HookedPlanning(Planning[None]):
    """An ``__attrs_post_init__`` of its own (the builder calls it, as ``__init__`` does)."""

    def __attrs_post_init__(self) -> None:
        HOOKED.append(self.step)


class OwnInitPlanning(Planning[None]):
    """An ``__init__`` of its own."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["invalid_streak"] = 7
        super().__init__(**kwargs)


@pytest.mark.parametrize("cls", [CheckedPlanning, HookedPlanning, OwnInitPlanning])
def test_a_user_subclass_is_built_as_next_builds_it(cls: type[Any]) -> None:
    agent = Agent[None](name="sub", tools=[lookup], phases=Phases[None](planning=cls))
    at = _site("model_attempt", "pending")
    leaving = _planning(agent)
    HOOKED.clear()
    fast, plain = _twins(leaving, at, cls, model_attempt=3, pending=())
    _same(fast, plain)
    refused = _attrs._builder(cls, copy=False, site=("model_attempt", "pending")) is _attrs._by_init
    assert refused == (cls is not HookedPlanning)  # a hook alone is called, as __init__ does
    if cls is HookedPlanning:
        steps = [leaving.step, leaving.step + 1, leaving.step + 1]
        assert steps == HOOKED  # the copy, the site, _next
    if cls is OwnInitPlanning:
        assert fast.invalid_streak == 7
    if cls is CheckedPlanning:
        with pytest.raises(ValueError, match="positive"):
            at(cls, _planning(agent), 0, ())


class _LikePlanning(type):
    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(Planning)


@attrs.frozen(kw_only=True)
class _Wider(Planning[None], metaclass=_LikePlanning):
    """A Planning subclass equal to Planning, with a field of its own."""

    extra: str = "x"


@pytest.mark.parametrize("order", [(_Wider, Planning), (Planning, _Wider)])
def test_a_site_builds_the_very_class_it_is_given(order: tuple[type[Any], ...]) -> None:
    """A class equal to Planning by its metaclass gets neither Planning's builder nor its
    place, asked first or after."""
    at = _site("pending")
    for _ in range(2):
        for cls in order:
            made = at(cls, _planning(), ())
            assert type(made) is cls
            assert hasattr(made, "extra") == (cls is _Wider)
    assert _attrs._builder(_Wider, copy=False, site=("pending",)) is not _attrs._by_init
