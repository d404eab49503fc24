"""A phase built by a site's builder (``_fast._attrs._builder`` with ``site``) is the one
``__init__`` makes, now that a value given by name (an argument, a default) is stored as
it is, without a local of its own: only the leaving phase's fields are read first.

Each builder of the three sites a run takes (``Planning -> ToolCalling -> Observing ->
Planning``) is pinned against ``cls(...)`` with the ticket ``_Ticket(leaving's ticket,
"transition")``: every field the very same object, for arbitrary values, a leaving phase
changed in place, a user subclass with fields of its own, and a write call the hook of
``ToolCalling``/``Observing`` refuses.
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
    Observing,
    Phase,
    Planning,
    ReadCall,
    ToolCalling,
    UnapprovedWriteError,
    _seal,
    read_tool,
    write_tool,
)
from statemachine._fast import _attrs


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


@write_tool
async def store(args: KeyArgs) -> dict[str, object]:
    """Store a key."""
    return {"key": args.key}


AGENT = Agent[None](name="builders6", tools=[lookup, store])

CALLING: tuple[str, ...] = ("call", "call_id", "transcript", "spent", "loop", "pending")
OBSERVING: tuple[str, ...] = ("call", "call_id", "output", "spent", "pending")
OBSERVED: tuple[str, ...] = ("transcript", "loop", "pending")


@attrs.frozen(kw_only=True)
class NotedPlanning(Planning[None]):
    """A user subclass with fields of its own: a default and a factory."""

    note: str = "n"
    seen: list[int] = attrs.field(factory=list)  # pyright: ignore[reportUnknownVariableType]


def _fields(phase: Phase[Any]) -> list[tuple[str, Any]]:
    """Each field of ``phase`` as (name, the object's id, or the ticket's slots)."""
    out: list[tuple[str, Any]] = [("class", type(phase))]
    for field in attrs.fields(type(phase)):
        if field.name == "_ticket":
            ticket = phase._ticket  # pyright: ignore[reportPrivateUsage]
            slots = {n: getattr(ticket, n) for n in _seal._Ticket.__slots__ if n != "__weakref__"}
            slots["holder"] = ticket.holder is not None and ticket.holder() is phase
            out.append(("_ticket", sorted(slots.items(), key=lambda item: item[0])))
        elif field.name in ("seen", "step"):  # made anew each time: the value, its type
            value = getattr(phase, field.name)
            out.append((field.name, (type(value), value)))
        else:
            out.append((field.name, id(getattr(phase, field.name))))
    return out


def _init(cls: type[Any], leaving: Phase[Any], **changes: Any) -> Any:
    """``cls`` made by its ``__init__`` as ``leaving._next(cls, **changes)`` asks it."""
    carried = {name: getattr(leaving, name) for name in ("agent", "ctx", "transcript")}
    carried |= {"spent": leaving.spent, "step": leaving.step + 1, "loop": leaving.loop}
    ticket = _seal._Ticket(leaving._ticket, "transition")  # pyright: ignore[reportPrivateUsage]
    return cls(**(carried | changes), ticket=ticket)


def _site_built(
    cls: type[Any], names: tuple[str, ...], leaving: Any, values: tuple[Any, ...]
) -> Any:
    build = _attrs._builder(cls, copy=False, site=names)
    assert build is not _attrs._by_init
    return build(leaving, *values)


def _planning() -> Planning[None]:
    return AGENT.start(None, "hi").receive("hi")


def _read() -> ReadCall:
    call = AGENT.tools.call("lookup", {"key": "k"})
    assert isinstance(call, ReadCall)
    return call


_OBJECTS = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=4),
    st.builds(object),
    st.tuples(st.integers()).map(tuple),
)


@settings(max_examples=40, deadline=None)
@given(
    call_id=_OBJECTS,
    output=_OBJECTS,
    pending=st.lists(st.text(max_size=3), max_size=3).map(tuple),
    step=st.integers(min_value=0, max_value=10**20),
    changed=st.booleans(),
)
def test_each_site_s_builder_makes_what_init_makes(
    call_id: object, output: object, pending: tuple[Any, ...], step: int, changed: bool
) -> None:
    planning = _planning()
    if changed:  # the leaving phase changed in place: its fields are read as they are now
        object.__setattr__(planning, "step", step)
        object.__setattr__(planning, "spent", attrs.evolve(planning.spent))
    call = _read()
    values: tuple[Any, ...] = (
        call,
        call_id,
        planning.transcript,
        planning.spent,
        planning.loop,
        pending,
    )
    calling = _site_built(ToolCalling, CALLING, planning, values)
    made = _init(ToolCalling, planning, **dict(zip(CALLING, values, strict=True)))
    assert _fields(calling) == _fields(made)

    values = (call, call_id, output, calling.spent, pending)
    observing = _site_built(Observing, OBSERVING, calling, values)
    made = _init(Observing, calling, **dict(zip(OBSERVING, values, strict=True)))
    assert _fields(observing) == _fields(made)

    for cls in (Planning, NotedPlanning):
        values = (observing.transcript, observing.loop, pending)
        planned: Any = _site_built(cls, OBSERVED, observing, values)
        made = _init(cls, observing, **dict(zip(OBSERVED, values, strict=True)))
        assert _fields(planned) == _fields(made)
        assert cls is Planning or planned.seen == []
        assert type(planned) is cls


def test_a_factory_s_value_is_new_for_each_phase() -> None:
    observing_values = (_planning().transcript, _planning().loop, ())
    leaving = _site_built(
        Observing,
        OBSERVING,
        _site_built(
            ToolCalling,
            CALLING,
            _planning(),
            (_read(), "c", *observing_values[:1], _planning().spent, observing_values[1], ()),
        ),
        (_read(), "c", 1, _planning().spent, ()),
    )
    one: Any = _site_built(NotedPlanning, OBSERVED, leaving, observing_values)
    two: Any = _site_built(NotedPlanning, OBSERVED, leaving, observing_values)
    assert one.seen == two.seen == []
    assert one.seen is not two.seen


@pytest.mark.parametrize("cls", [ToolCalling, Observing])
def test_a_write_call_is_refused_by_the_builder_as_by_init(cls: type[Any]) -> None:
    """The hook's check runs on the call given by name, as ``__init__`` runs it."""
    planning = _planning()
    write = AGENT.tools.call("store", {"key": "k"})
    assert not isinstance(write, ReadCall)
    if cls is ToolCalling:
        names = CALLING
        values: tuple[Any, ...] = (
            write,
            "c",
            planning.transcript,
            planning.spent,
            planning.loop,
            (),
        )
        leaving: Any = planning
    else:
        names = OBSERVING
        leaving = _site_built(
            ToolCalling,
            CALLING,
            planning,
            (_read(), "c", planning.transcript, planning.spent, planning.loop, ()),
        )
        values = (write, "c", 1, planning.spent, ())
    with pytest.raises(UnapprovedWriteError) as by_init:
        _init(cls, leaving, **dict(zip(names, values, strict=True)))
    with pytest.raises(UnapprovedWriteError) as by_builder:
        _site_built(cls, names, leaving, values)
    assert str(by_builder.value) == str(by_init.value)
