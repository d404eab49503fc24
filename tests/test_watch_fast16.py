# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""``Watch.accept``'s short way as one generated function per pair of the library's
classes (``_watch._pair_code``, made per Watch by ``_pairs_for``) answers as the plain
form, ``Watch._quick``: accepted exactly when ``_quick`` accepts, with the same counters
(the very objects) and queue recorded and the ticket's chain cut the same; else nothing
changed. ``accept`` itself answers as ``_quick`` then ``_checked`` (the reference of
tests/test_fast_runner4.py), the whole check called exactly when ``_quick`` does not
accept.

Checked over the transitions of real runs (reads, a read timing out and retried, a
write approved and run, a reply of two calls queued), each changed in place as a hostile
phase, tool or model might (the changes of tests/test_watch_quick.py, one or two); the
table of pairs against ``_FAST``, each pair's code its own per Watch, the constants the
kept objects; a budget of other keys judged by the whole check.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import test_fast_runner4 as runner4
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, RetryPolicy, Runner, Runtime, _watch, write_tool
from statemachine.testing import AutoApproveGate, AutoDenyGate, ScriptedModel, reply
from statemachine.testing import tool_call as one_call

_Seen = quick_cases._Seen


class _FlightArgs(BaseModel):
    flight: str


@write_tool
async def book(args: _FlightArgs) -> str:
    """Book a flight."""
    return args.flight


def _two_calls() -> Any:
    """A reply asking for two reads at once (a queue of one after the first)."""
    first = one_call("lookup", {"key": "a"})
    second = one_call("lookup", {"key": "b"})
    return first.model_copy(update={"tool_calls": (*first.tool_calls, *second.tool_calls)})


def _write_run() -> list[_Seen]:
    """A run with a write approved and run, reads, and a reply of two calls."""
    seen: list[_Seen] = []
    plain = _watch.Watch.accept

    def spy(self: _watch.Watch, before: Any, after: Any, kinds: Any = None) -> Any:
        parent = getattr(getattr(after, "_ticket", None), "parent", None)
        seen.append((self, self._counters, self._pending, before, after, parent))
        return plain(self, before, after, kinds)

    agent = Agent[None](
        name="a",
        tools=[quick_cases.lookup, book],
        budget=Budget(tokens=10**6),
        max_steps=10**6,
        retry=RetryPolicy(base_delay=0, max_delay=0),
    )
    turns = [
        one_call("book", {"flight": "TP1"}),
        _two_calls(),
        one_call("lookup", {"key": "c"}),
        reply("done"),
    ]
    runner = Runner(agent, model=ScriptedModel(turns), gate=AutoApproveGate())
    _watch.Watch.accept = spy  # type: ignore[method-assign]
    try:
        anyio.run(runner.run, None, "go")
    finally:
        _watch.Watch.accept = plain  # type: ignore[method-assign]
    return seen


def _runs() -> list[list[_Seen]]:
    return [quick_cases._recorded(2, flaky=True), _write_run()]


_PAIRS_SEEN = {(type(seen[3]).__name__, type(seen[4]).__name__) for run in _runs() for seen in run}


def _fast_of(watch: _watch.Watch, before: Any, after: Any) -> Any:
    pair = watch._pairs.get(type(before))
    if pair is None or pair[0] is not type(before):
        return None
    entry = pair[1].get(type(after))
    if entry is None or entry[0] is not type(after):
        return None
    return entry[1]


def _judged(seen: _Seen, how: str) -> tuple[object, ...]:
    """The pair's function (``fast``) or ``_quick`` (``plain``) on ``seen``: the answer,
    and what the Watch recorded (its counters by identity) and the cut."""
    watch, _counters, _pending, before, after, _parent = seen
    ticket = runner4._state(seen)
    try:
        if how == "fast":
            fast = _fast_of(watch, before, after)
            got: object = None if fast is None else fast(watch, before, after)
            result: tuple[object, object] = ("answer", got is True)
            assert got is True or got is None
        else:
            entry = _watch._FAST.get(type(before), (None, {}))[1].get(type(after))
            got = None if entry is None else watch._quick(before, after, entry[1])
            result = ("answer", got is after)
    except Exception as error:  # an error either way: the same
        result = (type(error).__name__, str(error))
    counters = watch._counters
    return (
        result,
        counters,
        tuple(map(type, counters)),
        tuple(map(id, counters)),
        watch._pending,
        None if ticket is None else ticket.parent is None,
    )


def _changed(seen: _Seen, changes: list[str]) -> _Seen:
    for change in changes:
        try:
            seen = quick_cases._change(seen, change)
        except (TypeError, AttributeError, ValueError):  # a change the class does not allow
            continue
    return seen


def test_the_runs_take_every_pair_with_its_flags() -> None:
    """The runs reach the pairs that hold, run, queue and write."""
    assert {
        ("Idle", "Planning"),
        ("Planning", "AwaitApproval"),
        ("AwaitApproval", "ToolCalling"),
        ("Planning", "ToolCalling"),
        ("ToolCalling", "Observing"),
        ("ToolCalling", "Retrying"),
        ("Observing", "Planning"),
        ("Planning", "Responding"),
        ("Responding", "Done"),
    } <= _PAIRS_SEEN


def test_each_run_is_judged_as_quick_then_as_accept() -> None:
    for run in _runs():
        fast_accepted = 0
        for seen in run:
            answer = _judged(seen, "fast")
            assert answer == _judged(seen, "plain")
            fast_accepted += answer[0] == ("answer", True)
            runner4._judged_alike(seen)
        assert fast_accepted >= len(run) - 4


@settings(max_examples=300, deadline=None)
@given(
    run=st.integers(0, 1),
    at=st.integers(0, 10**6),
    changes=st.lists(st.sampled_from(quick_cases._CHANGES), min_size=1, max_size=2),
)
def test_the_pair_function_answers_as_quick_after_changes(
    run: int, at: int, changes: list[str]
) -> None:
    """Whatever is changed in place, the pair's function accepts exactly what ``_quick``
    accepts, recording the same counters (the very objects), queue and cut; ``accept``
    answers as ``_quick`` then ``_checked``."""
    transitions = _runs()[run]
    seen = _changed(transitions[at % len(transitions)], changes)
    assert _judged(seen, "fast") == _judged(seen, "plain")
    runner4._judged_alike(seen)


def test_the_pairs_are_made_at_first_with_a_code_of_their_own() -> None:
    """Each Watch has an entry for each pair of ``_FAST`` (the classes themselves): a
    maker until the pair's first transition, then its function, made from
    ``_pair_code`` of the pair's flags, with a code object of its own (two Watches'
    too), holding the objects the Watch kept as its constants."""
    codes: list[Any] = []
    for run in _runs():
        watch = run[0][0]
        assert set(watch._pairs) == set(_watch._FAST)
        kept = (*watch._runtime, *watch._terms, *watch._budget, *(watch._raw or ()))
        taken = {(type(seen[3]), type(seen[4])) for seen in run}
        for before_cls, (cls, pairs) in _watch._FAST.items():
            mine = watch._pairs[before_cls]
            assert mine[0] is cls is before_cls
            assert set(mine[1]) == set(pairs)
            for after_cls, (_, flags, index) in pairs.items():
                made_cls, fast = mine[1][after_cls]
                assert made_cls is after_cls
                if (before_cls, after_cls) not in taken:
                    assert fast.__name__ == "first"  # not made: no transition of the pair
                    continue
                assert fast.__name__ == "fast"
                code = _watch._pair_code(
                    index >= 2,
                    index % 2 == 1,
                    *flags[:3],
                    watch._keys,
                    _watch._RAW_KINDS[len(watch._raw or ())],
                )
                assert fast.__code__.co_code == code.co_code
                assert fast.__code__ is not code
                placed = tuple(
                    kept[int(const[len(_watch._KEPT) :])] if _watch._placeholder(const) else const
                    for const in code.co_consts
                )
                assert len(placed) == len(fast.__code__.co_consts)
                assert all(a is b for a, b in zip(placed, fast.__code__.co_consts, strict=True))
                codes.append(fast.__code__)
    assert len(codes) >= 9
    assert len({id(code) for code in codes}) == len(codes)


def _another(was: object) -> object:
    """Another object standing for ``was``: an equal copy where one is made apart."""
    if type(was) is tuple and was:
        return tuple(list(was))
    made = copy.copy(was)
    return made if made is not was else object()


_FIELDS = [
    ("rt", "gate"),
    ("rt", "ledger"),
    ("agent", "budget"),
    ("agent", "tools"),
    ("budget", ""),
]


@settings(max_examples=60, deadline=None)
@given(at=st.integers(0, 10**6), field=st.sampled_from(_FIELDS), run=st.integers(0, 1))
def test_a_pair_made_late_holds_what_the_watch_kept(
    at: int, field: tuple[str, str], run: int
) -> None:
    """A Watch whose runtime, agent or budget is changed in place before a pair's first
    transition: the pair's function, made then, holds the objects kept when the Watch
    was made, and refuses as ``_quick`` does; put back, it accepts as ``_quick``."""
    transitions = _runs()[run]
    old = transitions[at % len(transitions)]
    watch, counters, pending, before, after, parent = old
    fresh = _watch.Watch(watch._rt, watch._agent, before)
    seen: _Seen = (fresh, counters, pending, before, after, parent)
    owner, name = field
    budget = watch._agent.budget
    target: Any = {"rt": watch._rt, "agent": watch._agent, "budget": budget}[owner]
    if owner == "budget":
        values: Any = vars(budget)
        name = next(iter(values))
        was = values[name]
        values[name] = object()
    else:
        was = getattr(target, name)
        object.__setattr__(target, name, _another(was))
    try:
        changed = _judged(seen, "fast")
        assert changed == _judged(seen, "plain")
        assert changed[0] == ("answer", False)
    finally:
        if owner == "budget":
            vars(budget)[name] = was
        else:
            object.__setattr__(target, name, was)
    assert _judged(seen, "fast") == _judged(seen, "plain")


def test_a_budget_of_other_keys_has_no_pair_functions() -> None:
    """A budget whose ``__dict__`` has a key that is not a ``str``: no functions, and
    ``accept`` judges by the whole check."""
    agent = Agent[None](name="a", tools=[quick_cases.lookup])
    budget = Budget()
    odd: Any = vars(budget)
    odd[1] = None
    object.__setattr__(agent, "budget", budget)
    rt = Runtime(run_id="x", model=ScriptedModel([]), gate=AutoDenyGate())
    assert _watch._pairs_for(rt, agent) == {}
    watch = _watch.Watch(rt, agent, agent.start(None, "go"))
    assert watch._pairs == {}
    assert watch._same_all is None
