# pyright: reportPrivateUsage=false
"""``Observing.observe`` leaves the library's exact ``Observing`` (``_leave("observe")``)
in its own frame while the class holds ``Phase._leave``: an exact ``_Ticket`` held by
this very phase and not left is left; anything else goes through ``_leave``, which
judges and raises.

Checked against the plain way: a phase's errors against ``Phase._leave`` itself on a
twin (a fresh phase, one left already by ``observe`` or another transition, one with no
ticket, one holding another phase's ticket, an unbound ticket, a dead holder's ticket,
another object in the slot, a hand-made copy), the same error (class and text) or none,
the same ``left_by`` after; the Planning made against ``observe`` with its shortcut off
(``_PHASE_LEAVE`` not the class's): the same class, step, transcript, pending, loop and
ticket. A subclass, and a ``_leave`` replaced on ``Observing``, ``Active`` or ``Phase``,
go through ``_leave`` (called once an observe); the exact class does not call it.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Generator
from contextlib import contextmanager
from types import FrameType
from typing import Any, cast

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Active,
    Agent,
    Observing,
    Phase,
    PhaseForgedError,
    PhaseReusedError,
    Phases,
    ReadCall,
    read_tool,
)
from statemachine import _phases as phases_module
from statemachine._seal import _Ticket


class KeyArgs(BaseModel):
    key: str


@read_tool
async def look(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


@attrs.frozen(kw_only=True)
class SubObserving(Observing[None]):
    """A subclass holding Phase's _leave: it goes through _leave all the same."""


_AGENT = Agent[None](name="observe17", tools=[look])
_SUB = Agent[None](name="observe17sub", tools=[look], phases=Phases[None](observing=SubObserving))


def _observing(agent: Agent[None], key: str, output: Any) -> Any:
    planning = agent.start(None, "hi").receive("hi")
    call = agent.tools.route("look", f'{{"key": "{key}"}}')
    assert isinstance(call, ReadCall)
    calling = planning.call_tool(call)
    calling._leave("execute")
    return calling._next(
        agent.phases.observing, call=call, call_id=calling.call_id, output=output, pending=()
    )


def _hand_made(source: object, ticket: object, *, keep_ticket: bool = True) -> Any:
    """An Observing made by object.__new__ with ``source``'s fields (and ``ticket``)."""
    cls = cast("type[Any]", type(source))
    made: Any = object.__new__(cls)
    for field in attrs.fields(cls):
        if field.name != "_ticket":
            object.__setattr__(made, field.name, getattr(source, field.name))
    if keep_ticket:
        object.__setattr__(made, "_ticket", ticket)
    return made


_KINDS = (
    "fresh",
    "left-observe",
    "left-other",
    "no-ticket",
    "shared",
    "copy",
    "unbound",
    "dead-holder",
    "other-object",
)


def _phase(kind: str, sub: bool, key: str, output: Any) -> Any:
    agent = _SUB if sub else _AGENT
    phase = _observing(agent, key, output)
    if kind == "fresh":
        return phase
    if kind == "left-observe":
        phase._leave("observe")
        return phase
    if kind == "left-other":
        phase._leave("advance")
        return phase
    if kind == "no-ticket":
        return _hand_made(phase, None, keep_ticket=False)
    if kind == "shared":  # another phase's ticket in this one's slot (that one lives)
        other = _observing(agent, key, output)
        object.__setattr__(other, "_ticket", phase._ticket)
        _ALIVE.append(phase)
        return other
    if kind == "copy":  # a copy made by hand, sharing the ticket of a phase still alive
        _ALIVE.append(phase)
        return _hand_made(phase, phase._ticket)
    if kind == "unbound":
        return _hand_made(phase, _Ticket(None, "hand"))
    if kind == "dead-holder":
        gone = _observing(agent, key, output)
        ticket = gone._ticket
        del gone
        gc.collect()
        assert ticket.holder is not None
        assert ticket.holder() is None
        return _hand_made(phase, ticket)
    assert kind == "other-object"
    return _hand_made(phase, object())


_ALIVE: list[Any] = []


def _left_by(phase: Any) -> object:
    try:
        ticket = object.__getattribute__(phase, "_ticket")
    except AttributeError:
        return "no slot"
    return ticket.left_by if type(ticket) is _Ticket else "not a ticket"


def _error(error: Exception) -> tuple[str, type[Exception], str]:
    return ("raised", type(error), str(error))


def _made(planning: Any, observed: Any) -> Any:
    ticket = planning._ticket
    return (
        type(planning),
        planning.step,
        tuple(planning.transcript),
        planning.pending,
        planning.loop.model_dump(),
        ticket.parent is observed._ticket,
        ticket.via,
        ticket.left_by,
        ticket.holder() is planning,
    )


@contextmanager
def _shortcut_off() -> Generator[None, None, None]:
    saved: object = getattr(phases_module, "_PHASE_LEAVE")  # noqa: B009 - typed as object
    setattr(phases_module, "_PHASE_LEAVE", object())  # noqa: B010 - a Final, replaced
    try:
        yield
    finally:
        setattr(phases_module, "_PHASE_LEAVE", saved)  # noqa: B010


def _observed(phase: Any) -> Any:
    try:
        made = phase.observe()
    except Exception as error:  # compared
        return _error(error), _left_by(phase)
    return _made(made, phase), _left_by(phase)


_OUTPUTS = st.one_of(
    st.dictionaries(st.text("xyz", max_size=2), st.integers(-3, 3), max_size=3),
    st.text("abc ", max_size=5),
    st.integers(-5, 5),
    st.lists(st.booleans(), max_size=3),
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(_KINDS),
            st.booleans(),
            st.text("abc", min_size=1, max_size=3),
            _OUTPUTS,
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_observe_leaves_as_the_plain_way(
    phases: list[tuple[str, bool, str, Any, int]],
) -> None:
    try:
        for kind, sub, key, output, times in phases:
            fast, judged, plain = (_phase(kind, sub, key, output) for _ in range(3))
            for _ in range(times):
                # The leave judged by Phase._leave itself.
                try:
                    Phase[Any]._leave(judged, "observe")
                    expected_error = None
                except Exception as error:  # compared
                    expected_error = _error(error)
                result, left = _observed(fast)
                with _shortcut_off():
                    plain_result, plain_left = _observed(plain)
                assert left == plain_left == _left_by(judged)
                if expected_error is not None:
                    assert result == plain_result == expected_error
                else:
                    assert result == plain_result
                    assert result[0] is phases_module.Planning
                    assert left == "observe"
    finally:
        _ALIVE.clear()


@contextmanager
def _leave_calls() -> Generator[list[str], None, None]:
    """The calls of Phase._leave's code, seen by a profile function."""
    code = Phase[Any]._leave.__code__
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            seen.append(frame.f_locals["transition"])

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def test_the_exact_class_leaves_in_its_own_frame() -> None:
    phase = _observing(_AGENT, "a", {"key": "a"})
    with _leave_calls() as seen:
        phase.observe()
    assert seen == []
    assert phase._ticket.left_by == "observe"
    with _leave_calls() as seen, pytest.raises(PhaseReusedError):
        phase.observe()
    assert seen == ["observe"]
    plain = _observing(_AGENT, "a", {"key": "a"})
    with _leave_calls() as seen, _shortcut_off():
        plain.observe()
    assert seen == ["observe"]


def test_a_subclass_goes_through_leave() -> None:
    phase = _observing(_SUB, "a", {"key": "a"})
    assert type(phase) is SubObserving
    with _leave_calls() as seen:
        phase.observe()
    assert seen == ["observe"]


@pytest.mark.parametrize("owner", [Observing, Active, Phase])
def test_a_replaced_leave_is_called(owner: type[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    own = Phase[Any]._leave

    def spy(self: Any, transition: str) -> None:
        calls.append(transition)
        own(self, transition)

    monkeypatch.setattr(owner, "_leave", spy)
    phase = _observing(_AGENT, "a", {"key": "a"})
    calls.clear()  # the transitions that made it
    phase.observe()
    assert calls == ["observe"]
    with pytest.raises(PhaseReusedError, match="observe"):
        phase.observe()
    assert calls == ["observe", "observe"]


def test_each_refusal() -> None:
    try:
        for kind, error in (
            ("no-ticket", PhaseForgedError),
            ("shared", PhaseForgedError),
            ("copy", PhaseForgedError),
            ("unbound", PhaseForgedError),
            ("dead-holder", PhaseForgedError),
            ("other-object", PhaseForgedError),
            ("left-observe", PhaseReusedError),
            ("left-other", PhaseReusedError),
        ):
            phase = _phase(kind, False, "a", {"key": "a"})
            with pytest.raises(error):
                phase.observe()
    finally:
        _ALIVE.clear()
