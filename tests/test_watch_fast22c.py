"""The watch's counters check and a builder's ticket, as written out in round 22.

A generated counters check (``_watch._counters_body``: ``_counted``'s, and each pair
function's from ``_pair_code``) unpacks the counters it compares with once, and writes
the ``""`` and ``-1`` of a class without a ``call_id`` or ``attempt`` field in as
constants; these tests pin it against ``_counters`` and ``_rules``'s comparisons written
plainly, for every kind of class, with values on either side of each bound. A builder
(``_fast._attrs``) mints its ticket slot by slot, asking once whether the parent is
``None``: pinned against ``_Ticket(parent, via)`` and ``_bind``.
"""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import types
import weakref
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_sites import _calling, _planning

from statemachine import Observing, Planning, ToolCalling, _seal, _watch
from statemachine._fast._attrs import _builder, _site
from statemachine._governor import ActionLog

_SMALL = st.integers(min_value=-2, max_value=3)


def _plain(
    phase: Any, was: tuple[Any, ...], call_id: bool, attempt: bool
) -> tuple[Any, ...] | None:
    """``_counters(phase)`` when ``_rules`` finds nothing wrong with it after ``was``."""
    spent, loop = phase.spent, phase.loop
    named = phase.call_id if call_id else ""
    tried = phase.attempt if attempt else -1
    now = (
        phase.step,
        spent.tokens,
        spent.cost,
        spent.tool_calls,
        spent.model_calls,
        len(loop.actions),
        loop.tool_iterations,
        named if isinstance(named, str) else "",
        tried if isinstance(tried, int) else -1,
    )
    if now[0] != was[0] + 1:
        return None
    if not all(now[at] >= was[at] for at in range(1, 7)):
        return None
    if now[7] and now[7] == was[7] and -1 < now[8] < was[8]:
        return None
    return now


@st.composite
def _phases(draw: st.DrawFn, call_id: bool, attempt: bool) -> tuple[Any, tuple[Any, ...]]:
    """A phase-like object of the fields a counters check reads, and counters ``was``
    near its own (each value equal, one less or one more)."""
    values = [draw(_SMALL) for _ in range(7)]
    cost = Decimal(draw(_SMALL))
    ids = st.sampled_from(["", "c1", "c2", 7])
    named, tried = draw(ids), draw(st.one_of(_SMALL, st.just("x")))
    spent = types.SimpleNamespace(
        tokens=values[1], cost=cost, tool_calls=values[2], model_calls=values[3]
    )
    actions = draw(st.sampled_from(["list", "log"]))
    made: Any = [object()] * values[4] if values[4] > 0 else []
    if actions == "log":
        made = ActionLog(())
    loop = types.SimpleNamespace(actions=made, tool_iterations=values[5])
    phase = types.SimpleNamespace(step=values[0], spent=spent, loop=loop)
    if call_id:
        phase.call_id = named
    if attempt:
        phase.attempt = tried
    near = st.integers(min_value=-1, max_value=1)
    was = (
        values[0] - 1 + draw(st.sampled_from([0, 0, 0, 1])),
        values[1] + draw(near),
        cost + draw(near),
        values[2] + draw(near),
        values[3] + draw(near),
        len(made) + draw(near),
        values[5] + draw(near),
        draw(ids) if draw(st.booleans()) else (named if isinstance(named, str) else ""),
        draw(_SMALL),
    )
    return phase, was


@pytest.mark.parametrize("call_id", [False, True])
@pytest.mark.parametrize("attempt", [False, True])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_counters_check_answers_as_counters_and_rules_do(
    call_id: bool, attempt: bool, data: st.DataObject
) -> None:
    """``_counted`` of each kind of class: the phase's counters when the step is one
    more, nothing counted is less and the attempt of the same call is not lower; else
    ``None``; the ``""`` and ``-1`` of a missing field in their places."""
    phase, was = data.draw(_phases(call_id, attempt))
    counted = _watch._counted(call_id, attempt)
    assert counted(phase, was) == _plain(phase, was, call_id, attempt)


def test_a_pair_function_records_the_counters_the_phase_has() -> None:
    """Each of the three pairs of a tool call, accepted by its pair function, records
    the very counters ``_counters`` reads of the phase it accepted."""
    calling = _calling()
    watch = _watch.Watch(_runtime(), calling.agent, calling)
    classes: list[type[Any]] = [ToolCalling, Observing, Planning]
    for at, (before, after) in enumerate(_transitions(calling)):
        was_class, made_class = classes[at], classes[at + 1]
        assert type(before) is was_class
        assert type(after) is made_class
        pairs = watch.pairs_from(was_class)
        assert pairs is not None
        entry = pairs.get(made_class)
        assert entry is not None
        watch._counters = _watch._counters(before)
        watch._pending = getattr(before, "pending", ())
        assert entry[1](watch, before, after) is True  # the pair function's own answer
        assert watch._counters == _watch._counters(after)


def _runtime() -> Any:
    from statemachine._runtime import Runtime
    from statemachine.testing import AutoDenyGate, ScriptedModel

    return Runtime(run_id="r", model=ScriptedModel([]), gate=AutoDenyGate())


def _transitions(calling: ToolCalling[Any]) -> list[tuple[Any, Any]]:
    """ToolCalling -> Observing -> Planning, built by the library's sites."""
    from statemachine._calling import _TO_OBSERVING
    from statemachine._phases import _OBSERVED

    observing = _TO_OBSERVING(
        Observing, calling, calling.call, calling.call_id, {"k": 1}, calling.spent, ()
    )
    planning = _OBSERVED(Planning, observing, observing.transcript, observing.loop, ())
    return [(calling, observing), (observing, planning)]


# --- a builder's ticket ------------------------------------------------------------------


def _slots(ticket: Any) -> dict[str, Any]:
    return {name: getattr(ticket, name) for name in _seal._Ticket.__slots__[1:]}


@pytest.mark.parametrize("parent", ["none", "root", "run"])
@pytest.mark.parametrize("how", ["site", "builder", "copier"])
def test_a_builder_mints_the_ticket_its_constructor_and_bind_make(parent: str, how: str) -> None:
    """A builder's ticket: the very slots ``_Ticket(leaving._ticket, via)`` sets, then
    bound to the phase made (a weak reference to it), for a leaving phase whose ticket is
    ``None``, a root's, or one of a Runner's run (a runtime and an origin of its own)."""
    leaving: Any = _planning()
    held = leaving._ticket
    if parent == "none":
        object.__setattr__(leaving, "_ticket", None)
    elif parent == "run":
        held.runtime = object()
        held.origin = "restore"
    parent_ticket = leaving._ticket
    via = "copy" if how == "copier" else "transition"
    if how == "site":
        at = _site("pending")
        made = at(Planning, leaving, ())
    else:
        build = _builder(Planning, copy=how == "copier")
        made = build(leaving, {"pending": ()})
    assert type(made) is Planning
    want = _seal._Ticket(parent_ticket, via)
    got = _slots(made._ticket)
    assert got.pop("holder")() is made
    expected = _slots(want)
    assert expected.pop("holder") is None
    assert got == expected
    assert isinstance(made._ticket.holder, weakref.ref)
