"""A site builds its first class in its own frame (``_fast._attrs._site``, round 21).

A site (``_TO_OBSERVING``, ``_OBSERVED``, ``_TO_CALLING``: the run's three builders a tool
call) is given anew, when it makes a builder for the first time, the code that asks for
that class first (by identity) and runs that builder's very lines in its own frame.
These tests pin it against ``leaving._next(cls, **changes)`` (``tests/test_fast_sites.py``'s
twins): the class built first and every other after it, a class the builder refuses
first, a class equal to the first by its metaclass, and the library's own sites.
"""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_sites import (
    _PENDING,
    HOOKED,
    CheckedPlanning,
    HookedPlanning,
    OwnInitPlanning,
    _calling,
    _planning,
    _same,
    _twins,
    _Wider,
    lookup,
)

from statemachine import Agent, Observing, Phases, Planning, ToolCalling, UnapprovedWriteError
from statemachine._batch import _TO_CALLING
from statemachine._calling import _TO_OBSERVING
from statemachine._fast._attrs import _site
from statemachine._phases import _OBSERVED

_CLASSES = (Planning, CheckedPlanning, HookedPlanning, OwnInitPlanning, _Wider)


def _inline(at: Any) -> object:
    """The class ``at`` builds in its own frame (``None``: none yet)."""
    return at.__globals__.get("_inline")


def _agent(cls: type[Any]) -> Agent[Any]:
    return Agent[None](name="sub", tools=[lookup], phases=Phases[None](planning=cls))


def _built(at: Any, cls: type[Any], attempt: int) -> None:
    """``cls`` made at ``at`` and by ``_next`` from twins, compared."""
    leaving = _planning(_agent(cls))
    HOOKED.clear()
    fast, plain = _twins(leaving, at, cls, model_attempt=attempt, pending=())
    _same(fast, plain)
    assert type(fast) is cls
    if cls is HookedPlanning:  # the copy, the site, _next: the hook runs at the site
        assert [leaving.step, leaving.step + 1, leaving.step + 1] == HOOKED
    if cls is OwnInitPlanning:
        assert fast.invalid_streak == 7


@settings(max_examples=60, deadline=None)
@given(
    order=st.lists(st.sampled_from(_CLASSES), min_size=1, max_size=8),
    attempt=st.integers(min_value=1, max_value=10**20),
)
def test_every_class_in_any_order_is_built_as_next_builds_it(
    order: list[type[Any]], attempt: int
) -> None:
    """A new site, asked for classes in any order: each built as ``_next`` builds it; the
    class built in ``at``'s frame is the first one a builder was made for."""
    at = _site("model_attempt", "pending")
    for cls in order:
        _built(at, cls, attempt)
    built = [cls for cls in order if cls is not CheckedPlanning and cls is not OwnInitPlanning]
    assert _inline(at) is (built[0] if built else None)


@pytest.mark.parametrize("first", [Planning, _Wider])
def test_a_class_equal_to_the_first_is_not_built_as_it(first: type[Any]) -> None:
    """``_Wider`` equals Planning by its metaclass: neither is built as the other,
    whichever came first."""
    at = _site("pending")
    at(first, _planning(), ())
    assert _inline(at) is first
    classes: tuple[type[Any], ...] = (_Wider, Planning)
    for _ in range(2):
        for cls in classes:
            made = at(cls, _planning(), ())
            assert hasattr(made, "extra") == (cls is _Wider)
            assert type(made) is cls


def test_a_refused_class_first_leaves_the_frame_to_the_next() -> None:
    """A class the builder refuses (a validator of its own) goes through ``_next``, its
    check included, and is not the one built in ``at``'s frame."""
    at = _site("model_attempt", "pending")
    with pytest.raises(ValueError, match="positive"):
        at(CheckedPlanning, _planning(_agent(CheckedPlanning)), 0, ())
    assert _inline(at) is None
    _built(at, Planning, 2)
    assert _inline(at) is Planning
    with pytest.raises(ValueError, match="positive"):
        at(CheckedPlanning, _planning(_agent(CheckedPlanning)), 0, ())


@settings(max_examples=40, deadline=None)
@given(output=st.none() | st.integers() | st.text(max_size=5), pending=_PENDING)
def test_the_library_s_sites_build_their_class_in_their_frame(
    output: object, pending: tuple[Any, ...]
) -> None:
    calling = _calling()
    seen, seen_plain = _twins(
        calling,
        _TO_OBSERVING,
        Observing,
        call=calling.call,
        call_id="c",
        output=output,
        spent=calling.spent,
        pending=pending,
    )
    _same(seen, seen_plain)
    planned, planned_plain = _twins(
        seen, _OBSERVED, Planning, transcript=seen.transcript, loop=seen.loop, pending=pending
    )
    _same(planned, planned_plain)
    assert (_inline(_TO_OBSERVING), _inline(_OBSERVED)) == (Observing, Planning)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        planned.step = 0  # type: ignore[misc]


def test_the_frame_still_refuses_a_write_that_was_not_approved() -> None:
    calling = _calling()
    _TO_OBSERVING(Observing, calling, calling.call, "c", 1, calling.spent, ())
    assert _inline(_TO_OBSERVING) is Observing
    write = calling.agent.tools.call("store", {"key": "k"})
    with pytest.raises(UnapprovedWriteError):
        _TO_OBSERVING(Observing, calling, write, "c", 1, calling.spent, ())
    planning = _planning()
    with pytest.raises(UnapprovedWriteError):
        _TO_CALLING(
            ToolCalling,
            planning,
            write,
            "c",
            planning.transcript,
            planning.spent,
            planning.loop,
            (),
        )
