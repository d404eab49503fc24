# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""``Watch.accept``'s counters and terms checks in one function (``_watch._checks_code``,
made per Watch by ``_checks_for``) answer as the two they stand for: the pair's
``_counted(phase, was)`` when it is not ``None`` and ``_same_all`` (itself checked
against the plain checks in tests/test_fast_runner3.py) answers ``True``; else ``None``.
Checked over the phases of real runs (a budget without limits and one with), for any
one field of the runtime, the agent, the budget or either phase's agent swapped in place
for another object, an equal one, one equal to everything, or put back; for counters
changed in place (step, call id, attempt, the attempt kept from before); and for a
budget's ``__dict__`` with a key more or less. ``accept`` itself is checked against
``_quick`` then ``_checked`` by tests/test_fast_runner4.py.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_runner3 import _HOWS, _ODD, _RUNS, _counted_plain, _replacement, _targets

from statemachine import Budget, Observing, Planning, Runtime, ToolCalling, _watch
from statemachine.testing import AutoDenyGate, ScriptedModel

_SEEN = [
    (watch, before, after)
    for run in _RUNS
    for watch, before, after in run
    if type(before) in _watch._FAST and type(after) in _watch._FAST[type(before)][1]
]


def _entry(before: Any, after: Any) -> Any:
    return _watch._FAST[type(before)][1][type(after)]


def _reference(watch: _watch.Watch, before: Any, after: Any, was: Any) -> Any:
    """``accept``'s two calls as they were: the pair's counted, then the terms."""
    counted = _entry(before, after)[1][3]
    now = counted(after, was)
    same = watch._same_all
    if now is None or same is None or not same(watch._rt, watch._agent, before, after):
        return None
    return now


def _merged(watch: _watch.Watch, before: Any, after: Any, was: Any) -> Any:
    checks = watch._checks
    assert checks is not None
    check = checks[_entry(before, after)[2]]
    assert check is not None
    return check(watch._rt, watch._agent, before, after, was)


def _alike(got: Any, expected: Any) -> None:
    assert got == expected
    if got is not None:
        assert type(got) is tuple
        assert [type(value) for value in got] == [type(value) for value in expected]
        assert all(a is b for a, b in zip(got, expected, strict=True))


def test_the_index_names_the_class_kind() -> None:
    kinds = set()
    for _cls, pairs in _watch._FAST.values():
        for after_cls, flags, index in pairs.values():
            names = {field.name for field in attrs.fields(after_cls)}
            kind = ("call_id" in names, "attempt" in names)
            assert index == 2 * kind[0] + kind[1]
            assert flags[3] is _watch._counted(*kind)
            kinds.add(index)
    watch = _SEEN[0][0]
    assert watch._checks is not None
    assert {at for at, check in enumerate(watch._checks) if check is not None} == kinds


def test_the_placed_constants_are_the_plain_ones() -> None:
    """``_placer``'s constants, made in C, are those the plain loop makes."""
    watch = _SEEN[0][0]
    kept = (*watch._runtime, *watch._terms, *watch._budget)
    for code in (
        _watch._same_all_code(watch._keys),
        *(_watch._checks_code(a, b, watch._keys) for a in (False, True) for b in (False, True)),
    ):
        plain = tuple(
            kept[int(const[len(_watch._KEPT) :])] if _watch._placeholder(const) else const
            for const in code.co_consts
        )
        placed = _watch._placer(code)(kept)
        assert len(placed) == len(plain)
        assert all(a is b for a, b in zip(placed, plain, strict=True))


def test_the_terms_check_is_made_of_what_was_kept() -> None:
    """``_same_all``, made when first asked for, holds the objects the Watch kept when it
    was made, even when asked after a field was changed in place."""
    watch, before, after = _SEEN[0]
    fresh = _watch.Watch(watch._rt, watch._agent, before)
    rt = watch._rt
    kept = rt.clock
    object.__setattr__(rt, "clock", lambda: 0.0)
    try:
        same = fresh._same_all
        assert same is not None
        assert not same(rt, watch._agent, before, after)
    finally:
        object.__setattr__(rt, "clock", kept)
    assert same(rt, watch._agent, before, after)
    assert fresh._same_all is same


def test_the_seen_transitions_are_accepted_both_ways() -> None:
    assert {type(after) for _, _, after in _SEEN} >= {
        Planning,
        ToolCalling,
        Observing,
    }
    for watch, before, after in _SEEN:
        was = _watch._counters(before)
        expected = _reference(watch, before, after, was)
        assert expected is not None
        _alike(_merged(watch, before, after, was), expected)


@settings(max_examples=40, deadline=None)
@given(at=st.integers(0, 10**6))
def test_a_changed_term_answers_as_the_two_checks(at: int) -> None:
    watch, before, after = _SEEN[at % len(_SEEN)]
    was = _watch._counters(before)
    for where, target, name in _targets(watch, before, after):
        kept = vars(target)[name] if where == "budget" else getattr(target, name)
        for how in _HOWS:
            object.__setattr__(target, name, _replacement(how, kept))
            try:
                got = _merged(watch, before, after, was)
                _alike(got, _reference(watch, before, after, was))
                now = vars(target)[name] if where == "budget" else getattr(target, name)
                assert (got is not None) is (now is kept), (name, how)
            finally:
                object.__setattr__(target, name, kept)
    assert _merged(watch, before, after, was) is not None


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(0, 10**6),
    call_id=st.one_of(st.just("keep"), _ODD),
    attempt=st.one_of(st.just("keep"), _ODD),
    step=st.integers(-1, 2),
    same_call=st.booleans(),
    was_attempt=st.integers(-1, 4),
    lower=st.one_of(st.just("none"), st.integers(1, 6)),
)
def test_changed_counters_answer_as_the_two_checks(
    at: int,
    call_id: object,
    attempt: object,
    step: int,
    same_call: bool,
    was_attempt: int,
    lower: Any,
) -> None:
    watch, before, after = _SEEN[at % len(_SEEN)]
    names = {field.name for field in attrs.fields(type(after))}
    kept: dict[str, Any] = {
        name: getattr(after, name) for name in ("call_id", "attempt", "step") if name in names
    }
    try:
        if call_id != "keep" and "call_id" in names:
            object.__setattr__(after, "call_id", call_id)
        if attempt != "keep" and "attempt" in names:
            object.__setattr__(after, "attempt", attempt)
        object.__setattr__(after, "step", kept["step"] + step)
        old: Any = _watch._counters(before)
        held = _watch._counters(after)[7] if same_call else old[7]
        was: Any = [*old[:7], held, was_attempt]
        if lower != "none":  # the phase before counted one more than this one does
            now: Any = _watch._counters(after)
            was[lower] = now[lower] + 1
        was = tuple(was)
        got = _merged(watch, before, after, was)
        expected = _reference(watch, before, after, was)
        _alike(got, expected)
        plain = _counted_plain(after, was)
        assert (got is None) is (plain is None)
    finally:
        for name, value in kept.items():
            object.__setattr__(after, name, value)


def test_a_budget_dict_with_a_key_more_or_less_is_refused() -> None:
    watch, before, after = _SEEN[-1]
    was = _watch._counters(before)
    values = vars(watch._agent.budget)
    first = next(iter(values))
    values["extra"] = values[first]
    try:
        assert _merged(watch, before, after, was) is None
        assert _reference(watch, before, after, was) is None
    finally:
        del values["extra"]
    kept = values.pop(first)
    try:
        assert _merged(watch, before, after, was) is None
        assert _reference(watch, before, after, was) is None
    finally:
        values[first] = kept
    assert _merged(watch, before, after, was) is not None


def test_each_watch_checks_its_own_objects() -> None:
    one = next(seen for seen in _SEEN if seen[0] is _RUNS[0][0][0])
    two = next(seen for seen in _SEEN if seen[0] is _RUNS[1][0][0])
    for (watch, _, _), (_, before, after) in ((one, two), (two, one)):
        was = _watch._counters(before)
        assert _merged(watch, before, after, was) is None
        assert _reference(watch, before, after, was) is None


def test_no_functions_for_a_budget_dict_of_other_keys() -> None:
    watch, _, _ = _SEEN[0]
    agent = watch._agent
    kept = agent.budget
    budget = Budget()
    odd: Any = vars(budget)
    odd[1] = None  # a key that is not a str: the whole check judges the run
    object.__setattr__(agent, "budget", budget)
    try:
        rt = Runtime(run_id="x", model=ScriptedModel([]), gate=AutoDenyGate())
        assert _watch._checks_for(rt, agent) is None
        fresh = _watch.Watch(rt, agent, _SEEN[0][1])
        assert fresh._checks is None
        assert fresh._same_all is None
    finally:
        object.__setattr__(agent, "budget", kept)


def test_every_counter_and_attempt_alike() -> None:
    """Each counter one above this phase's in ``was``, and each attempt of the same call
    against each kept one: the same answer, for every transition seen."""
    for watch, before, after in _SEEN:
        now: Any = _watch._counters(after)
        old: Any = _watch._counters(before)
        for at in range(7):
            was: Any = [*old[:7], old[7], old[8]]
            was[at] = now[at] + 1 if at else now[0]
            got = _merged(watch, before, after, tuple(was))
            _alike(got, _reference(watch, before, after, tuple(was)))
            assert got is None
        for kept in range(-1, 5):
            was = (*old[:7], now[7], kept)
            got = _merged(watch, before, after, was)
            _alike(got, _reference(watch, before, after, was))
            assert (got is None) is bool(now[7] and -1 < now[8] < kept)
