"""A branch of a loop state reads its parent's index through an overlay (issue 23).

A state that records where a later state of its line already did, a state that fails a
call after another of its line failed one, and ``model_copy`` with the very actions of
the state all keep the index they share with their line: the branch's own records,
settles and failures go in small dicts of its own, and look-ups fall back to the line
it branched from, capped at the branch point. Every answer of such an index is checked
here against the plain one, ``_Line.of``, made from the state's own actions; and every
check the governor makes against a state restored from its JSON (indexed anew).
"""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import ActionRecord, Budget, LoopGovernor, LoopState, Spend
from statemachine._governor import _DEPTH, _Line
from statemachine._similarity import call_anchors

TOOLS = ("search", "lookup")
KEYS = tuple(f"k{n}" for n in range(4))
EXACTS = tuple(f"e{n}" for n in range(5))
CALL_IDS = tuple(f"c{n}" for n in range(6))
# Texts with an anchor (the number) each: two share one, so failures share a key.
TEXTS = (
    'search({"query":"refund order 1042"})',
    'search({"query":"refund the order 1042"})',
    'search({"query":"parcel late 77"})',
    'search({"query":"invoice copy 9"})',
)


def action(call_id: str, tool: str, exact: str, key: str, text: str) -> ActionRecord:
    return ActionRecord(call_id=call_id, tool=tool, effect="read", exact=exact, key=key, text=text)


# Mostly the latest state (a run), often an older one (a branch).
pick = st.one_of(st.just(-1), st.just(-1), st.integers(0, 10**6))
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("record"),
            pick,
            st.sampled_from(CALL_IDS),
            st.sampled_from(TOOLS),
            st.sampled_from(EXACTS),
            st.sampled_from(KEYS),
            st.sampled_from(TEXTS),
            st.booleans(),  # recorded as suppressed (never settled)
        ),
        st.tuples(
            st.just("settle"),
            pick,
            st.sampled_from(CALL_IDS),
            st.sampled_from(["ok", "failed", "refused"]),
        ),
        st.tuples(st.just("copy"), pick),
        st.tuples(st.just("restore"), pick),
    ),
    min_size=10,
    max_size=80,
)


def run(steps: list[tuple[Any, ...]]) -> list[LoopState]:
    """Every state ``steps`` make, from ``LoopState()``."""
    pool = [LoopState()]
    for kind, at, *rest in steps:
        loop = pool[at % len(pool)]
        if kind == "record":
            call_id, tool, exact, key, text, suppressed = rest
            made = action(call_id, tool, exact, key, text)
            if suppressed:
                made = made.model_copy(update={"outcome": "suppressed", "result": "no"})
            loop = loop.record(made)
        elif kind == "settle":
            loop = loop.settle(rest[0], rest[1], f"result of {rest[0]}")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


def answers(line: _Line, loop: LoopState) -> dict[str, Any]:
    """What the checks ask of an index about ``loop``."""
    actions, count = loop.actions, len(loop.failures)
    found: dict[str, Any] = {}
    for key in KEYS + EXACTS + ("absent",):
        latest = line.latest(key, actions)
        found[f"latest {key}"] = None if latest is None else id(latest)
    for call_id in CALL_IDS:
        for size in range(len(actions) + 1):
            found[f"call {call_id} {size}"] = line.call(call_id, size)
    anchored = {(a.tool, call_anchors(a.text)) for a in actions}
    for anchors in sorted(anchored):
        for oldest in range(-1, count + 1):
            found[f"alike {anchors} {oldest}"] = line.alike_positions(anchors, count, oldest)
    return found


@settings(max_examples=150, deadline=None)
@given(operations)
def test_a_branch_answers_as_the_index_made_from_its_own_actions(
    steps: list[tuple[Any, ...]],
) -> None:
    """Records, settles, copies and restores from any state of the pool: every state's
    index answers every look-up as ``_Line.of`` of its actions and failures does."""
    pool = run(steps)
    for loop in pool:
        line = loop._line()
        assert line.size >= len(loop.actions)
        plain = _Line.of(loop.actions, loop.failures)
        assert answers(line, loop) == answers(plain, loop)
        assert plain.failing <= line.failing  # a filter: it may know more tools, not fewer
        assert line.depth <= _DEPTH


@settings(max_examples=60, deadline=None)
@given(operations, st.sampled_from([0.92, 0.5]), st.sampled_from([1, 2, 64]))
def test_a_branch_decides_as_its_restored_copy(
    steps: list[tuple[Any, ...]], threshold: float, window: int
) -> None:
    """Every tier decides each call on a state sharing its line's index as on the same
    state restored from its JSON (an index of its own, made from the actions)."""
    governor = LoopGovernor(semantic_threshold=threshold, semantic_window=window, cycle_window=4)
    pool = run(steps)
    for loop in pool[-3:] + pool[:: max(1, len(pool) // 4)]:
        restored = LoopState.model_validate_json(loop.model_dump_json())
        for call_id, tool, exact, key, text in zip(
            CALL_IDS,
            TOOLS * 3,
            EXACTS,
            (*KEYS, "new"),
            (*TEXTS, 'lookup({"id":"1042"})'),
            strict=False,
        ):
            made = action(call_id, tool, exact, key, text)
            decisions = [
                governor.before_action(
                    state, made, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
                )
                for state in (loop, restored)
            ]
            assert decisions[0] == decisions[1]


@pytest.mark.parametrize("seed", range(6))
def test_long_random_runs_answer_as_the_plain_index(seed: int) -> None:
    """Runs of a hundred steps, two in five from an older state (branches of branches,
    failures parting ways): as the Hypothesis test, over more and longer runs."""
    rng = random.Random(seed)
    steps: list[tuple[Any, ...]] = []
    for _ in range(100):
        at = -1 if rng.random() < 0.6 else rng.randrange(10**6)
        roll = rng.random()
        if roll < 0.55:
            made = (rng.choice(CALL_IDS), rng.choice(TOOLS), rng.choice(EXACTS))
            steps.append(
                ("record", at, *made, rng.choice(KEYS), rng.choice(TEXTS), rng.random() < 0.1)
            )
        elif roll < 0.9:
            outcome = rng.choice(["ok", "failed", "refused"])
            steps.append(("settle", at, rng.choice(CALL_IDS), outcome))
        else:
            steps.append((rng.choice(["copy", "restore"]), at))
    pool = run(steps)
    assert sum(loop._line().parent is not None for loop in pool) > len(pool) // 4
    for loop in pool:
        assert answers(loop._line(), loop) == answers(_Line.of(loop.actions, loop.failures), loop)


def test_a_call_settled_in_a_branch_below_its_branch_point() -> None:
    """A pending call older than the branch, settled in the branch, while a later call of
    the line below with the same key is settled: the latest is the later one."""
    loop = LoopState().record(action("c0", "search", "e0", "k", TEXTS[0]))
    loop = loop.record(action("c1", "search", "e1", "k", TEXTS[1]))
    loop = loop.settle("c1", "ok", "r")
    loop.record(action("c2", "search", "e2", "k2", TEXTS[2]))  # the line grows past it
    branch = loop.record(action("c3", "search", "e3", "k3", TEXTS[3]))
    assert branch._line().parent is loop._line()
    settled = branch.settle("c0", "ok", "r")
    assert settled.earlier("k") is settled.actions[1]
    assert settled.earlier("e0") is settled.actions[0]
    plain = _Line.of(settled.actions, settled.failures)
    assert answers(settled._line(), settled) == answers(plain, settled)


def test_a_branch_of_a_branch_whose_failures_parted_ways() -> None:
    """A branch made where a failure parted ways (its own failure below its branch point),
    then a branch of it at the same length: it reads that failure, not the line's."""
    loop = big(20)
    pending = loop.record(action("x", "search", "ex", "kx", TEXTS[0]))
    pending.settle("x", "failed", "down")
    refused = pending.settle("x", "refused", "no")  # parts ways: its own failure rank
    refused.record(action("y", "lookup", "ey", "ky", TEXTS[2]))
    again = refused.record(action("z", "lookup", "ez", "kz", TEXTS[3]))  # a branch of it
    anchored = ("search", call_anchors(TEXTS[0]))
    positions = again._line().alike_positions(anchored, len(again.failures), 0)
    assert again.actions[positions[0]].outcome == "refused"
    plain = _Line.of(again.actions, again.failures)
    assert answers(again._line(), again) == answers(plain, again)


def big(size: int) -> LoopState:
    """A state of ``size`` settled calls, one in ten failed."""
    loop = LoopState()
    for n in range(size):
        loop = loop.record(action(f"c{n}", "search", f"e{n}", f"k{n}", TEXTS[n % 4]))
        loop = loop.settle(f"c{n}", "failed" if n % 10 == 0 else "ok", "r")
    return loop


def test_branches_and_copies_read_their_parent_instead_of_indexing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy with the same actions, a record from an older state and a failure after
    another state's failure: none of them makes an index from the actions."""
    loop = big(300)
    later = loop.record(action("x", "search", "ex", "kx", TEXTS[0]))
    made: list[int] = []
    original = _Line.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[_Line], actions: Any, failures: tuple[int, ...]) -> _Line:
        made.append(len(actions))
        return original(cls, actions, failures)  # type: ignore[no-any-return]

    monkeypatch.setattr(_Line, "of", classmethod(counted))
    copied = loop.model_copy(update={"actions": loop.actions})
    assert copied._index is loop._index
    assert copied.earlier("k5") is loop.actions[5]
    branch = copied.record(action("y", "search", "ey", "ky", TEXTS[1]))  # `later` recorded
    assert branch._line().parent is loop._line()
    assert branch._line().call("x", len(branch.actions)) is None
    assert later._line().call("x", len(later.actions)) == 300
    failed = later.settle("x", "failed", "down")
    refused = later.settle("x", "refused", "no")  # the line failed `x` first: a branch
    assert refused._line().parent is later._line()
    anchored = ("search", call_anchors(TEXTS[1]))
    for state in (failed, refused):
        positions = state._line().alike_positions(anchored, len(state.failures), 0)
        assert [state.actions[p].call_id for p in positions[:2]] == ["x", "c280"]
    assert refused.actions[300].outcome == "refused"
    assert failed.earlier("ex") is failed.actions[-1]
    assert refused.earlier("ex") is refused.actions[-1]
    assert branch.earlier("ex") is None
    assert made == []


def test_branches_of_branches_stay_shallow() -> None:
    """Each branch from a branch stands on one more line; past ``_DEPTH`` a branch
    indexes its own actions once (flat), and answers as before."""
    loop = big(40)
    lines = []
    for n in range(3 * _DEPTH):
        ahead = loop.record(action(f"a{n}", "search", f"ea{n}", f"ka{n}", TEXTS[2]))
        ahead.settle(f"a{n}", "ok", "r")
        loop = loop.record(action(f"b{n}", "lookup", f"eb{n}", f"kb{n}", TEXTS[3]))
        loop = loop.settle(f"b{n}", "ok", "r")
        lines.append(loop._line())
        plain = _Line.of(loop.actions, loop.failures)
        assert answers(loop._line(), loop) == answers(plain, loop)
    assert max(line.depth for line in lines) == _DEPTH
    assert any(line.parent is None for line in lines[_DEPTH:])


def test_a_copy_with_other_failures_or_a_deep_copy_is_indexed_anew() -> None:
    """Failures dropped (or an equal tuple that is not the state's own) by model_copy: the
    copy's index is made from what it holds, so a failure it no longer has cannot make it
    suppress a call, nor one it has be missed."""
    loop = big(30)
    governor = LoopGovernor()
    near = action("n", "search", "en", "kn", 'search({"query":"refund order 1042 "})')

    def decided(state: LoopState) -> str:
        return governor.before_action(
            state, near, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
        ).check

    assert decided(loop) == "semantic"
    dropped = loop.model_copy(update={"actions": loop.actions, "failures": ()})
    assert dropped._index is None
    assert decided(dropped) == ""
    again = loop.model_copy(
        update={"actions": loop.actions, "failures": tuple(list(loop.failures))}
    )
    assert decided(again) == "semantic"
    deep = loop.model_copy(update={"actions": loop.actions}, deep=True)
    assert deep._index is None
    assert decided(deep) == "semantic"
