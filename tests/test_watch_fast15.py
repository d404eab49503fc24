# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""``Watch.accept``'s counters and terms checks, written out in each pair's function
(``_watch._pair_code``, made per Watch by ``_pairs_for``), answer as the two they stand
for: the pair's ``_counted(phase, was)`` when it is not ``None`` and ``_same_all``
(itself checked against the plain checks in tests/test_fast_runner3.py) answers
``True``. The pair's function records those very counters when it accepts, and accepts
nothing they refuse; where the rest of its checks (the ticket chain, the queue, the last
reply) pass, it accepts exactly what they accept. Checked over the phases of real runs (a
budget without limits and one with), for any one field of the runtime, the agent, the
budget or either phase's agent swapped in place for another object, an equal one, one
equal to everything, or put back; for counters changed in place (step, call id, attempt,
the attempt kept from before); and for a budget's ``__dict__`` with a key more or less.
``accept`` itself is checked against ``_quick`` then ``_checked`` by
tests/test_fast_runner4.py and tests/test_watch_fast16.py.
"""

from __future__ import annotations

from typing import Any

import anyio
import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_runner3 import _BUDGETS, _HOWS, _ODD, _agent, _counted_plain, _replacement, _targets

from statemachine import Budget, Observing, Planning, Runner, Runtime, ToolCalling, _watch
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

# What accept was given, and the Watch's state then: (watch, counters, pending, before,
# after, the ticket's parent before the cut).
_Seen = tuple[_watch.Watch, Any, Any, Any, Any, Any]


def _recorded(budget: Budget) -> list[_Seen]:
    """Each accept of a short real run, with the Watch's state before it."""
    seen: list[_Seen] = []
    plain = _watch.Watch.accept

    def spy(self: _watch.Watch, before: Any, after: Any, kinds: Any = None) -> Any:
        parent = getattr(getattr(after, "_ticket", None), "parent", None)
        seen.append((self, self._counters, self._pending, before, after, parent))
        return plain(self, before, after, kinds)

    turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(2)]
    model = ScriptedModel([*turns, reply("done")])
    runner = Runner(_agent(budget), model=model, gate=AutoDenyGate())
    _watch.Watch.accept = spy  # type: ignore[method-assign]
    try:
        anyio.run(runner.run, None, "go")
    finally:
        _watch.Watch.accept = plain  # type: ignore[method-assign]
    return seen


_RUNS = [_recorded(budget) for budget in _BUDGETS]


def _entry(before: Any, after: Any) -> Any:
    return _watch._FAST[type(before)][1][type(after)]


def _fast_of(watch: _watch.Watch, before: Any, after: Any) -> Any:
    """The pair's function ``accept`` calls (its maker before the pair's first use)."""
    pair = watch._pairs[type(before)]
    assert pair[0] is type(before)
    entry = pair[1][type(after)]
    assert entry[0] is type(after)
    return entry[1]


def _restored(seen: _Seen, was: Any) -> None:
    watch, _counters, pending, _before, after, parent = seen
    watch._counters, watch._pending = was, pending
    after._ticket.parent = parent


def _merged(seen: _Seen, was: Any) -> Any:
    """The pair's function on ``seen`` with ``was`` as the Watch's counters: the counters
    it recorded when it accepts, else ``None`` (having changed nothing)."""
    watch, _counters, pending, before, after, parent = seen
    _restored(seen, was)
    try:
        got = _fast_of(watch, before, after)(watch, before, after)
        if got is None:
            assert watch._counters is was
            assert watch._pending is pending
            assert after._ticket.parent is parent
            return None
        assert got is True
        assert watch._pending is pending
        assert after._ticket.parent is None
        return watch._counters
    finally:
        _restored(seen, seen[1])


def _reference(seen: _Seen, was: Any) -> Any:
    """``accept``'s two calls as they were: the pair's counted, then the terms."""
    watch, _counters, _pending, before, after, _parent = seen
    counted = _entry(before, after)[1][3]
    now = counted(after, was)
    same = watch._same_all
    if now is None or same is None or not same(watch._rt, watch._agent, before, after):
        return None
    return now


def _alike(got: Any, expected: Any) -> None:
    assert got == expected
    if got is not None:
        assert type(got) is tuple
        assert [type(value) for value in got] == [type(value) for value in expected]
        assert all(a is b for a, b in zip(got, expected, strict=True))


def _judged(seen: _Seen, was: Any) -> Any:
    """The pair's function against the reference, on a transition whose other checks
    pass: the same counters (the very objects), or ``None`` both."""
    got = _merged(seen, was)
    _alike(got, _reference(seen, was))
    return got


# The transitions the pairs' functions accept as they were (a transition through a copy,
# the last Planning's answer, is another ticket chain: the whole check's).
_SEEN = [
    seen
    for run in _RUNS
    for seen in run
    if type(seen[3]) in _watch._FAST
    and type(seen[4]) in _watch._FAST[type(seen[3])][1]
    and _merged(seen, seen[1]) is not None
]


def test_the_index_names_the_class_kind() -> None:
    """Each pair's index and counted function are its later class's kind (a ``call_id``
    field, an ``attempt`` field), and its function's code reads those fields exactly."""
    kinds = set()
    for _cls, pairs in _watch._FAST.values():
        for after_cls, flags, index in pairs.values():
            names = {field.name for field in attrs.fields(after_cls)}
            kind = ("call_id" in names, "attempt" in names)
            assert index == 2 * kind[0] + kind[1]
            assert flags[3] is _watch._counted(*kind)
            code = _watch._pair_code(*kind, *flags[:3], ("tokens",))
            assert ("call_id" in code.co_names) is kind[0]
            assert ("attempt" in code.co_names) is kind[1]
            kinds.add(index)
    assert kinds == {0, 2, 3}


def test_the_placed_constants_are_the_plain_ones() -> None:
    """``_placer``'s constants, made in C, are those the plain loop makes, for the terms
    check and every pair's code."""
    watch = _SEEN[0][0]
    kept = (*watch._runtime, *watch._terms, *watch._budget, *(watch._raw or ()))
    codes = [_watch._same_all_code(watch._keys)]
    for _cls, pairs in _watch._FAST.values():
        for _after, flags, index in pairs.values():
            codes.append(
                _watch._pair_code(
                    index >= 2,
                    index % 2 == 1,
                    *flags[:3],
                    watch._keys,
                    _watch._RAW_KINDS[len(watch._raw or ())],
                )
            )
    for code in codes:
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
    watch, _, _, before, after, _ = _SEEN[0]
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
    assert {type(seen[4]) for seen in _SEEN} >= {Planning, ToolCalling, Observing}
    assert {id(seen[0]) for seen in _SEEN} == {id(run[0][0]) for run in _RUNS}
    for seen in _SEEN:
        was = _watch._counters(seen[3])
        assert _reference(seen, was) is not None
        assert _judged(seen, was) is not None
        assert _judged(seen, seen[1]) is not None


@settings(max_examples=40, deadline=None)
@given(at=st.integers(0, 10**6))
def test_a_changed_term_answers_as_the_two_checks(at: int) -> None:
    seen = _SEEN[at % len(_SEEN)]
    watch, _, _, before, after, _ = seen
    was = _watch._counters(before)
    for where, target, name in _targets(watch, before, after):
        kept = vars(target)[name] if where == "budget" else getattr(target, name)
        for how in _HOWS:
            object.__setattr__(target, name, _replacement(how, kept))
            try:
                got = _judged(seen, was)
                now = vars(target)[name] if where == "budget" else getattr(target, name)
                assert (got is not None) is (now is kept), (name, how)
            finally:
                object.__setattr__(target, name, kept)
    assert _merged(seen, was) is not None


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
    seen = _SEEN[at % len(_SEEN)]
    before, after = seen[3], seen[4]
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
        got = _merged(seen, was)
        expected = _reference(seen, was)
        plain = _counted_plain(after, was)
        if got is not None:  # accepted: those very counters
            _alike(got, expected)
        assert expected is None or plain is not None
        if expected is None or plain is None:
            assert got is None
        if "call_id" not in names or after.call_id is kept["call_id"]:
            # the held call's id as it was: the reply's check passes, as before the change
            _alike(got, expected)
    finally:
        for name, value in kept.items():
            object.__setattr__(after, name, value)


def test_a_budget_dict_with_a_key_more_or_less_is_refused() -> None:
    seen = next(seen for seen in _SEEN if seen[0] is _RUNS[1][0][0])
    watch, _, _, before, _, _ = seen
    was = _watch._counters(before)
    values = vars(watch._agent.budget)
    first = next(iter(values))
    values["extra"] = values[first]
    try:
        assert _merged(seen, was) is None
        assert _reference(seen, was) is None
    finally:
        del values["extra"]
    kept = values.pop(first)
    try:
        assert _merged(seen, was) is None
        assert _reference(seen, was) is None
    finally:
        values[first] = kept
    assert _merged(seen, was) is not None


def test_each_watch_checks_its_own_objects() -> None:
    one = next(seen for seen in _SEEN if seen[0] is _RUNS[0][0][0])
    two = next(seen for seen in _SEEN if seen[0] is _RUNS[1][0][0])
    assert (type(one[3]), type(one[4])) == (type(two[3]), type(two[4]))
    for mine, theirs in ((one, two), (two, one)):
        crossed: _Seen = (mine[0], *theirs[1:])
        was = _watch._counters(theirs[3])
        assert _merged(crossed, was) is None
        assert _reference(crossed, was) is None
        assert _merged(theirs, was) is not None


def test_no_functions_for_a_budget_dict_of_other_keys() -> None:
    watch, _, _, before, _, _ = _SEEN[0]
    agent = watch._agent
    kept = agent.budget
    budget = Budget()
    odd: Any = vars(budget)
    odd[1] = None  # a key that is not a str: the whole check judges the run
    object.__setattr__(agent, "budget", budget)
    try:
        rt = Runtime(run_id="x", model=ScriptedModel([]), gate=AutoDenyGate())
        assert _watch._pairs_for(rt, agent) == {}
        fresh = _watch.Watch(rt, agent, before)
        assert fresh._pairs == {}
        assert fresh._same_all is None
    finally:
        object.__setattr__(agent, "budget", kept)


def test_every_counter_and_attempt_alike() -> None:
    """Each counter one above this phase's in ``was``, and each attempt of the same call
    against each kept one: the same answer, for every transition seen."""
    for seen in _SEEN:
        before, after = seen[3], seen[4]
        now: Any = _watch._counters(after)
        old: Any = _watch._counters(before)
        for at in range(7):
            was: Any = [*old[:7], old[7], old[8]]
            was[at] = now[at] + 1 if at else now[0]
            assert _judged(seen, tuple(was)) is None
        for kept in range(-1, 5):
            was = (*old[:7], now[7], kept)
            got = _judged(seen, was)
            assert (got is None) is bool(now[7] and -1 < now[8] < kept)
