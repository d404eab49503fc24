# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""The Watch's terms check with the kept objects as its code's constants
(``_watch._same_all``) answers as the plain checks do: ``_same_run`` on the runtime and
the agent, ``_same_values`` on the budget's ``__dict__``, then both phases' agent, for
any one field swapped in place (``object.__setattr__``, as a hostile phase, tool or
model might) for another object, an equal one, one equal to everything, or put back.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import anyio
import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, Runner, _watch, read_tool
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class _Args(BaseModel):
    key: str


@read_tool
async def lookup(args: _Args) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key}


class _EqualToAll:
    """Equal to everything."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


def _agent(budget: Budget) -> Agent[None]:
    return Agent[None](name="a", tools=[lookup], budget=budget, max_steps=10**6)


def _run_of(agent: Agent[None]) -> list[tuple[_watch.Watch, Any, Any]]:
    """The Watch and the phases of each accept of a short real run."""
    seen: list[tuple[_watch.Watch, Any, Any]] = []
    plain = _watch.Watch.accept

    def spy(self: _watch.Watch, before: Any, after: Any, kinds: Any = None) -> Any:
        seen.append((self, before, after))
        return plain(self, before, after, kinds)

    turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(2)]
    runner = Runner(agent, model=ScriptedModel([*turns, reply("done")]), gate=AutoDenyGate())
    _watch.Watch.accept = spy  # type: ignore[method-assign]
    try:
        anyio.run(runner.run, None, "go")
    finally:
        _watch.Watch.accept = plain  # type: ignore[method-assign]
    return seen


_BUDGETS = (Budget(), Budget(tokens=10**6, cost=Decimal("2.50")))
_RUNS = [_run_of(_agent(budget)) for budget in _BUDGETS]


def _plain(watch: _watch.Watch, before: Any, after: Any) -> bool:
    agent = watch._agent
    return bool(
        _watch._same_run(watch._rt, watch._runtime, agent, watch._terms)
        and watch._same_budget(vars(agent.budget), watch._budget)
        and before.agent is agent
        and after.agent is agent
    )


def _replacement(how: str, value: object) -> object:
    if how == "equal copy":
        try:
            return type(value)(value) if isinstance(value, str | int | Decimal) else value
        except (TypeError, ValueError):  # pragma: no cover - the kinds above copy
            return value
    if how == "equal to all":
        return _EqualToAll()
    if how == "new object":
        return object()
    return value  # "itself": put back, the very object


def test_each_watch_checks_its_own_objects() -> None:
    (first, *_), (second, *_) = _RUNS[0][0], _RUNS[1][0]
    same = first._same_all
    assert same is not None
    assert second._same_all is not None
    assert same.__code__ is not second._same_all.__code__
    assert same.__defaults__ is None
    kept = (*_watch._runtime_parts(first._rt), *_watch._agent_parts(first._agent))
    assert all(any(obj is const for const in same.__code__.co_consts) for obj in kept)
    assert not any(
        type(const) is str and const.startswith(_watch._KEPT) for const in same.__code__.co_consts
    )
    # The other run's runtime and agent are not this run's.
    before, after = _RUNS[1][0][1], _RUNS[1][0][2]
    assert not same(second._rt, second._agent, before, after)
    assert second._same_all(second._rt, second._agent, before, after)


def _targets(watch: _watch.Watch, before: Any, after: Any) -> list[tuple[str, object, str]]:
    """Every field the terms check reads: the runtime's, the agent's, the budget's
    values and both phases' agent."""
    targets: list[tuple[str, object, str]] = []
    for obj in (watch._rt, watch._agent):
        targets += [("field", obj, field.name) for field in attrs.fields(type(obj))]
    targets += [("budget", watch._agent.budget, name) for name in vars(watch._agent.budget)]
    targets += [("field", before, "agent"), ("field", after, "agent")]
    return targets


_HOWS = ("new object", "equal copy", "equal to all", "itself")


@settings(max_examples=40, deadline=None)
@given(run=st.integers(0, len(_RUNS) - 1), at=st.integers(0, 10**6))
def test_the_terms_check_answers_as_the_plain_checks(run: int, at: int) -> None:
    watch, before, after = _RUNS[run][at % len(_RUNS[run])]
    same = watch._same_all
    assert same is not None
    assert same(watch._rt, watch._agent, before, after) is _plain(watch, before, after) is True
    for where, target, name in _targets(watch, before, after):
        was = vars(target)[name] if where == "budget" else getattr(target, name)
        for how in _HOWS:
            object.__setattr__(target, name, _replacement(how, was))
            try:
                got = same(watch._rt, watch._agent, before, after)
                assert got is _plain(watch, before, after), (name, how)
                now = vars(target)[name] if where == "budget" else getattr(target, name)
                assert got is (now is was), (name, how)
            finally:
                object.__setattr__(target, name, was)
    assert same(watch._rt, watch._agent, before, after)


def test_a_budget_dict_with_a_key_more_or_less_is_refused() -> None:
    watch, before, after = _RUNS[1][0]
    same = watch._same_all
    assert same is not None
    values = vars(watch._agent.budget)
    extra = next(iter(values))
    values["extra"] = values[extra]
    try:
        assert not same(watch._rt, watch._agent, before, after)
        assert not _plain(watch, before, after)
    finally:
        del values["extra"]
    kept = values.pop(extra)
    try:
        assert not same(watch._rt, watch._agent, before, after)
        assert not _plain(watch, before, after)
    finally:
        values[extra] = kept
    assert same(watch._rt, watch._agent, before, after)


def _counted_plain(phase: Any, was: Any) -> Any:
    """``_counted``'s answer by ``_counters`` and ``_rules``'s comparisons."""
    now = _watch._counters(phase)
    if now[0] != was[0] + 1:
        return None
    if not all(now[at] >= was[at] for at in range(1, 7)):
        return None
    if now[7] and now[7] == was[7] and -1 < now[8] < was[8]:
        return None
    return now


_ODD = st.one_of(
    st.text(max_size=3), st.integers(-2, 3), st.none(), st.floats(-2, 3), st.booleans()
)


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(0, 10**6),
    call_id=st.one_of(st.just("keep"), _ODD),
    attempt=st.one_of(st.just("keep"), _ODD),
    step=st.integers(-1, 2),
    same_call=st.booleans(),
    was_attempt=st.integers(-1, 4),
)
def test_counted_answers_as_counters_and_the_rules(
    at: int, call_id: object, attempt: object, step: int, same_call: bool, was_attempt: int
) -> None:
    seen = [
        (before, after)
        for run in _RUNS
        for _, before, after in run
        if type(before) in _watch._FAST and type(after) in _watch._FAST[type(before)][1]
    ]
    before, after = seen[at % len(seen)]
    flags = _watch._FAST[type(before)][1][type(after)][1]
    counted = flags[3]
    names = {field.name for field in attrs.fields(type(after))}
    kept = {name: getattr(after, name) for name in ("call_id", "attempt", "step") if name in names}
    try:
        if call_id != "keep" and "call_id" in names:
            object.__setattr__(after, "call_id", call_id)
        if attempt != "keep" and "attempt" in names:
            object.__setattr__(after, "attempt", attempt)
        object.__setattr__(after, "step", kept["step"] + step)
        old = _watch._counters(before)
        held = _watch._counters(after)[7] if same_call else old[7]
        was: Any = (*old[:7], held, was_attempt)
        got = counted(after, was)
        expected = _counted_plain(after, was)
        assert got == expected
        if got is not None and expected is not None:
            assert [type(value) for value in got] == [type(value) for value in expected]
    finally:
        for name, value in kept.items():
            object.__setattr__(after, name, value)
