"""A phase built by its builder through its unfrozen twin is the phase ``__init__`` makes.

``_fast._attrs._builder`` makes a library phase (and a user subclass whose deriving runs
no code of its own) as a subclass that sets attributes as ``object`` does, sets its slots
with plain stores, then makes it the phase's class (``_unfrozen``). These tests pin it
against the builder that calls each slot's ``__set__`` and against ``cls(...)`` /
``attrs.evolve``, and check the classes it must leave to the plain builder.
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Observing,
    Phase,
    Phases,
    Planning,
    ReadCall,
    Runner,
    ToolCalling,
    _seal,
    read_tool,
)
from statemachine._fast import _attrs
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


AGENT = Agent[None](name="builders", tools=[lookup])


def _fields(phase: Phase[Any]) -> dict[str, Any]:
    """Every field of ``phase``, its class, and whether its ticket is bound to it."""
    values: dict[str, Any] = {"class": type(phase)}
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            values[field.name] = _ticket_of(phase)
            continue
        values[field.name] = getattr(phase, field.name)
    return values


def _ticket_of(phase: Phase[Any]) -> dict[str, Any]:
    """Every slot of ``phase``'s ticket; for its holder, whether it is ``phase``."""
    ticket = phase._ticket
    values = {name: getattr(ticket, name) for name in _seal._Ticket.__slots__}
    values["holder"] = ticket.holder is not None and ticket.holder() is phase
    del values["__weakref__"]
    return values


def _planning(agent: Agent[Any] = AGENT) -> Planning[Any]:
    return agent.start(None, "hi").receive("hi")


def _plain(cls: type[Any], *, copy: bool) -> Any:
    """The builder of ``cls`` that sets each slot through its ``__set__``."""
    saved = _attrs._unfrozen
    _attrs._unfrozen = lambda _: None  # type: ignore[assignment]
    try:
        return _attrs._builder(cls, copy=copy)
    finally:
        _attrs._unfrozen = saved


def _both(leaving: Phase[Any], cls: type[Any], via: str, **changes: Any) -> tuple[Any, Any]:
    """``cls`` built by the builder ``_next``/``_copy`` use and by the plain builder."""
    copy = via == "copy"
    made = []
    for build in (_attrs._builder(cls, copy=copy), _plain(cls, copy=copy)):
        made.append(build(leaving, dict(changes)))
    return made[0], made[1]


_COUNTS = st.integers(min_value=0, max_value=10**20)
_PENDING = st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3).map(tuple)


@settings(max_examples=60, deadline=None)
@given(
    streak=st.none() | _COUNTS,
    attempt=st.none() | _COUNTS,
    choice=st.none() | _COUNTS,
    pending=st.none() | _PENDING,
    step=st.none() | _COUNTS,
)
def test_a_planning_built_unfrozen_is_the_one_init_and_the_slot_setters_make(
    streak: int | None,
    attempt: int | None,
    choice: int | None,
    pending: tuple[Any, ...] | None,
    step: int | None,
) -> None:
    given_ = {"invalid_streak": streak, "model_attempt": attempt, "model_choice": choice}
    changes: dict[str, Any] = {
        k: v for k, v in {**given_, "pending": pending}.items() if v is not None
    }
    leaving = _planning()
    fast, plain = _both(leaving, Planning, "transition", **changes)
    made = Planning(
        agent=leaving.agent,
        ctx=leaving.ctx,
        transcript=leaving.transcript,
        spent=leaving.spent,
        step=leaving.step + 1,
        loop=leaving.loop,
        ticket=_seal._Ticket(leaving._ticket, "transition"),
        **changes,
    )
    assert _fields(fast) == _fields(plain) == _fields(made)
    copied, copied_plain = _both(leaving, Planning, "copy", **changes, **_step(step))
    evolved = attrs.evolve(
        leaving, ticket=_seal._Ticket(leaving._ticket, "copy"), **changes, **_step(step)
    )
    assert _fields(copied) == _fields(copied_plain) == _fields(evolved)
    for phase in (fast, copied):
        assert type(phase) is Planning
        assert phase.__class__ is Planning
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            phase.step = 0  # type: ignore[misc]


def _step(step: int | None) -> dict[str, Any]:
    return {} if step is None else {"step": step}


@settings(max_examples=40, deadline=None)
@given(attempt=st.none() | _COUNTS, output=st.none() | st.integers() | st.text(max_size=5))
def test_a_call_s_phases_built_unfrozen_are_the_ones_the_slot_setters_make(
    attempt: int | None, output: object
) -> None:
    leaving = _planning()
    call = AGENT.tools.call("lookup", {"key": "k"})
    assert isinstance(call, ReadCall)
    extra = {} if attempt is None else {"attempt": attempt}
    fast, plain = _both(leaving, ToolCalling, "transition", call=call, call_id="c", **extra)
    assert _fields(fast) == _fields(plain)
    seen, seen_plain = _both(fast, Observing, "transition", call=call, call_id="c", output=output)
    assert _fields(seen) == _fields(seen_plain)
    assert type(fast) is ToolCalling
    assert type(seen) is Observing


def test_every_phase_of_a_run_is_of_the_library_s_class() -> None:
    """No object of an unfrozen twin leaves a builder."""
    model = ScriptedModel([tool_call("lookup", '{"key": "k"}'), reply("Done.")])
    runner = Runner(AGENT, model=model, gate=AutoDenyGate(), keep_states=True)
    result = anyio.run(runner.run, None, "hi")
    assert [type(s).__name__ for s in result.states] == list(result.history)
    assert all(type(s).__module__ == "statemachine._phases" for s in result.states)
    twin = _attrs._unfrozen(Planning)
    assert twin is not None  # the library's phases take the twin, one per class
    assert _attrs._unfrozen(Planning) is twin
    assert [c for c in Planning.__subclasses__() if c.__name__ == "_UnfrozenPlanning"] == [twin]


# User subclasses whose deriving, or whose __class__ assignment, could run their code.

SUBCLASSED: list[str] = []


@attrs.frozen(kw_only=True)
class CountingPlanning(Planning[None]):
    """Counts the classes derived from it."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        SUBCLASSED.append(cls.__name__)


@attrs.frozen(kw_only=True)
class ClassyPlanning(Planning[None]):
    """Answers ``__class__`` itself."""

    @property
    def __class__(self) -> type[Any]:
        return Planning

    @__class__.setter
    def __class__(self, value: type[Any]) -> None:
        raise AssertionError("a builder must not set __class__ through the class's code")


DROPPED: list[int] = []


@attrs.frozen(kw_only=True)
class DroppedPlanning(Planning[None]):
    """Runs code when an object of it is dropped."""

    def __del__(self) -> None:
        DROPPED.append(1)


class Meta(type):
    pass


class MetaPlanning(Planning[None], metaclass=Meta):
    """A metaclass of its own."""


@pytest.mark.parametrize("cls", [CountingPlanning, ClassyPlanning, DroppedPlanning, MetaPlanning])
def test_a_subclass_that_could_run_code_is_built_by_the_slot_setters(cls: type[Any]) -> None:
    before = (list(SUBCLASSED), len(DROPPED))
    assert _attrs._unfrozen(cls) is None
    assert (SUBCLASSED, len(DROPPED)) == before  # nothing derived, nothing dropped
    agent = Agent[None](name="sub", tools=[lookup], phases=Phases[None](planning=cls))
    leaving = _planning(agent)
    made = leaving._next(cls, invalid_streak=2)
    assert type(made) is cls
    assert _attrs._BUILDERS[id(cls)][1] is not _attrs._by_init  # still built slot by slot
    assert made.invalid_streak == 2
    assert made.step == leaving.step + 1
    assert _ticket_of(made)["holder"]
    assert before[0] == SUBCLASSED


@pytest.mark.parametrize("via", ["transition", "copy"])
@pytest.mark.parametrize("root", ["start", "hand"])
@pytest.mark.parametrize("in_a_run", [False, True])
def test_a_builder_mints_the_ticket_the_seal_s_class_makes(
    via: str, root: str, in_a_run: bool
) -> None:
    """Each slot as ``_Ticket(leaving's ticket, via)`` sets it, bound to the new phase."""
    leaving = _planning()
    parent = _seal._Ticket(None, root)
    if in_a_run:
        parent.runtime = object()  # type: ignore[assignment]
    object.__setattr__(leaving, "_ticket", parent)  # a leaving phase with that ticket
    made = _attrs._builder(Planning, copy=via == "copy")(leaving, {})
    minted = _seal._Ticket(parent, via)
    expected = {name: getattr(minted, name) for name in _seal._Ticket.__slots__}
    expected["holder"] = True
    del expected["__weakref__"]
    assert _ticket_of(made) == expected
    assert type(made._ticket) is _seal._Ticket
    made._leave("advance")  # the seal takes it as its own
    assert made.left


def test_a_ticket_passed_to_next_is_replaced_as_before() -> None:
    leaving = _planning()
    forged = _seal._Ticket(None, "hand")
    made = leaving._next(Planning, ticket=forged)
    assert made._ticket is not forged
    assert _ticket_of(made)["parent"] is leaving._ticket
