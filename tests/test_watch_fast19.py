# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A pair's function checks the run's runtime and agent all at once (``_raw_terms``):
they are the very objects the Watch was made with, and each one's words from its type
to its last field are the bytes they were (a view of its memory), where it compared
each of their 30 fields with the object kept. The same verdicts as the fields compared
one at a time (the pair's function made with ``raw=False``, and ``Watch._checked``):
for any field of either set to another object, an equal copy, ``None`` or put back, the
class swapped for a subclass that reads the same or answers another object, the Watch's
runtime replaced; and only the library's exact classes take it.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import attrs
import pytest
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _fast_of

from statemachine import _watch
from statemachine._phases import Agent, Runtime

_Seen = quick_cases._Seen
_RUN = quick_cases._recorded(2, flaky=True)
_FIELDS = [("rt", field.name) for field in attrs.fields(Runtime)] + [
    ("agent", field.name) for field in attrs.fields(Agent)
]
_HOW = ("other", "copy", "none", "back")


class _SameRuntime(Runtime):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """Reads every field as the library's class does."""

    __slots__ = ()


class _LyingRuntime(Runtime):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    """Answers another object for its gate (its slot still holds the kept one)."""

    __slots__ = ()

    @property
    def gate(self) -> Any:  # pyright: ignore[reportIncompatibleVariableOverride]
        return object()


class _SameAgent(Agent[None, Any]):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    __slots__ = ()


def _any(obj: object) -> Any:
    return obj


def _fast(seen: _Seen) -> Any:
    """The pair's function as the Watch made it (its code checks the raw words)."""
    watch, _counters, _pending, before, after, _parent = seen
    fast = _fast_of(watch, before, after)
    assert fast is not None
    assert fast.__code__.co_filename == "<statemachine accept>"
    assert "_raw" in fast.__code__.co_names
    assert "raw" in fast.__code__.co_names
    return fast


def _verdict(seen: _Seen, *, raw: bool = True) -> tuple[object, ...]:
    """The pair's function's answer, the counters and queue it recorded and the cut; with
    the Watch's raw check (``raw``) or without it (the fields one at a time)."""
    watch, counters, pending, before, after, parent = seen
    fast = _fast(seen)
    watch._counters, watch._pending = counters, pending
    after._ticket.parent = parent
    words = watch._raw
    assert words is not None
    if not raw:
        watch._raw = None
    try:
        got: object = fast(watch, before, after)
    except Exception as error:  # an error either way: the same
        got = (type(error).__name__, str(error))
    finally:
        watch._raw = words
    return (got, watch._counters, watch._pending, after._ticket.parent is None)


def _accepted(seen: _Seen, how: str) -> Any:
    return quick_cases._outcome(seen, how)


def _changed(obj: Any, name: str, how: str, was: Any) -> None:
    put = object.__setattr__
    if how == "other":
        put(obj, name, object())
    elif how == "copy":
        try:
            put(obj, name, copy.copy(was))
        except Exception:  # a value that cannot be copied: another object
            put(obj, name, object())
    elif how == "none":
        put(obj, name, None)
    else:  # changed, then put back: the very object again
        put(obj, name, object())
        put(obj, name, was)


def _judged_alike(seen: _Seen) -> None:
    assert _verdict(seen) == _verdict(seen, raw=False)
    assert _accepted(seen, "accept") == _accepted(seen, "checked")


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(0, 10**6),
    changes=st.lists(
        st.tuples(st.sampled_from(_FIELDS), st.sampled_from(_HOW)), min_size=0, max_size=3
    ),
)
def test_fields_changed_in_place_are_judged_as_one_at_a_time(
    at: int, changes: list[tuple[tuple[str, str], str]]
) -> None:
    """Any fields of the runtime or the agent changed in place (to another object, an
    equal copy, None, or changed and put back): the raw check answers as the fields
    compared one at a time, and ``accept`` as ``_checked``."""
    seen = _RUN[at % len(_RUN)]
    watch = seen[0]
    if _fast_of(watch, seen[3], seen[4]) is None:
        return
    objs = {"rt": watch._rt, "agent": watch._agent}
    kept = {(obj, name): getattr(objs[obj], name) for (obj, name), _ in changes}
    unchanged = _verdict(seen)
    try:
        for (obj, name), how in changes:
            _changed(objs[obj], name, how, kept[obj, name])
        _judged_alike(seen)
        if all(how == "back" for _, how in changes):
            assert _verdict(seen) == unchanged
    finally:
        for (obj, name), was in kept.items():
            object.__setattr__(objs[obj], name, was)


@pytest.mark.parametrize("field", _FIELDS)
def test_each_field_changed_is_refused_by_the_raw_check(field: tuple[str, str]) -> None:
    """Each of the 30 fields set to another object: the raw check does not accept (it
    covers every field's word), as the fields compared one at a time."""
    for seen in _RUN:
        watch = seen[0]
        if _fast_of(watch, seen[3], seen[4]) is None:
            continue
        obj = watch._rt if field[0] == "rt" else watch._agent
        was = getattr(obj, field[1])
        unchanged = _verdict(seen)
        object.__setattr__(obj, field[1], object())
        try:
            assert _verdict(seen)[0] is None
            assert _verdict(seen, raw=False)[0] is None
            _judged_alike(seen)
        finally:
            object.__setattr__(obj, field[1], was)
        assert _verdict(seen) == unchanged


@pytest.mark.parametrize("cls", [_SameRuntime, _LyingRuntime])
def test_a_runtime_whose_class_is_swapped_is_judged_as_one_at_a_time(cls: type[Any]) -> None:
    """The runtime's class swapped (past the frozen class) for a subclass that reads its
    fields as the library's does, or answers another gate: the raw check leaves it to the
    whole check, which accepts the one and refuses the other."""
    for seen in _RUN:
        watch = seen[0]
        if _fast_of(watch, seen[3], seen[4]) is None:
            continue
        rt = watch._rt
        object.__setattr__(rt, "__class__", cls)
        try:
            if cls is _LyingRuntime:
                assert _verdict(seen)[0] is None
                assert _accepted(seen, "accept")[0][0] == "IllegalTransitionError"
            _judged_alike(seen)
        finally:
            object.__setattr__(rt, "__class__", Runtime)


def test_an_agent_whose_class_is_swapped_is_left_to_the_whole_check() -> None:
    for seen in _RUN:
        watch = seen[0]
        if _fast_of(watch, seen[3], seen[4]) is None:
            continue
        agent = watch._agent
        object.__setattr__(agent, "__class__", _SameAgent)
        try:
            _judged_alike(seen)
        finally:
            object.__setattr__(agent, "__class__", Agent)


def test_the_watch_s_runtime_or_agent_replaced_is_judged_as_one_at_a_time() -> None:
    """The Watch's own runtime (or agent) replaced by another object, with the same fields
    or one other: the raw check asks for the very objects it was made with."""
    for seen in _RUN:
        watch = seen[0]
        if _fast_of(watch, seen[3], seen[4]) is None:
            continue
        rt, agent = watch._rt, watch._agent
        for name, other in (
            ("_rt", attrs.evolve(rt)),
            ("_rt", attrs.evolve(rt, gate=_any(object()))),
            ("_agent", attrs.evolve(agent, max_steps=agent.max_steps + 1)),
        ):
            object.__setattr__(watch, name, other)
            try:
                assert _verdict(seen)[0] is None
                _judged_alike(seen)
            finally:
                object.__setattr__(watch, name, rt if name == "_rt" else agent)


def test_the_fields_compared_by_address_are_held() -> None:
    """The raw check holds the runtime and the agent, and the pair's function each of
    their fields as they were (no other object takes one's address while it lives)."""
    for seen in _RUN:
        watch = seen[0]
        fast = _fast_of(watch, seen[3], seen[4])
        if fast is None:
            continue
        words = watch._raw
        assert words is not None
        assert words[0] is watch._rt
        assert words[1] is watch._agent
        consts = fast.__code__.co_consts
        for part in (*watch._runtime, *watch._terms):
            assert any(const is part for const in consts)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's layout")
def test_only_the_library_s_exact_classes_take_the_raw_check() -> None:
    watch = _RUN[0][0]
    rt, agent = watch._rt, watch._agent
    assert _watch._laid_out(Runtime) == _watch._WORD * 15
    assert _watch._laid_out(Agent) == _watch._WORD * 17
    assert _watch._raw_terms(rt, agent) is not None
    same_rt = object.__new__(_SameRuntime)
    for field in attrs.fields(Runtime):
        object.__setattr__(same_rt, field.name, getattr(rt, field.name))
    assert _watch._raw_terms(same_rt, agent) is None
    same_agent = object.__new__(_SameAgent)
    for field in attrs.fields(Agent):
        object.__setattr__(same_agent, field.name, getattr(agent, field.name))
    assert _watch._raw_terms(rt, same_agent) is None
