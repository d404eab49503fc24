"""The governor's ``before_action`` shortcut of issue 23's tenth round, against its plain path.

- ``LoopGovernor.before_action`` on a ``LoopState`` itself whose index, a line of its own,
  covers its ``ActionLog`` answers a new call (no key seen before) by reading the index,
  the failures and the cycle check's first tests in place; it must give what
  ``LoopGovernor._checked`` (the plain path: ``_line``, ``_Line.latest`` twice,
  ``_semantic`` and ``_cycle``) gives, for every state of a pool grown by records,
  settles (ok with gains above and below the cycle's, failed, refused), copies, states
  restored from JSON and records on older states (branches), and for calls new and
  seen before, of the same tool and anchors as a failure, reads and writes.
- ``LoopGovernor.action`` reads the tool's name without ``_Call.name``'s frame and makes
  the record without ``_record``'s: the same record as ``_record`` makes.
- Anything else takes the plain path: a subclass of ``LoopState``, a state whose index
  does not cover its actions.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any, Literal, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import Budget, LoopGovernor, Spend
from statemachine._actions import CHUNK, ActionRecord
from statemachine._governor import Decision, LoopState

_IDS = ("a", "b", "c", "d", "e", "f")
# Tools, arguments (exact and canonical keys), anchors: a small alphabet, so that keys,
# tools and anchors repeat.
_TOOLS = ("search", "lookup", "refund")
_ARGS = ("order 12", "order 12 ", "Order 12", "order 13", "cheap flights to oslo")


def _action(call_id: str, tool: str, args: str, canonical_same: bool) -> ActionRecord:
    # Two spellings of one canonical call share the key, not the exact hash.
    key = f"{tool}:{args.strip().lower()}" if canonical_same else f"{tool}:{args}"
    return ActionRecord(
        call_id=call_id,
        tool=tool,
        effect="write" if tool == "refund" else "read",
        exact=f"{tool}\x00{args}",
        key=key,
        text=f"{tool}({args})",
    )


_pick = st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(0, 10**6))
_call = st.tuples(
    st.sampled_from(_IDS), st.sampled_from(_TOOLS), st.sampled_from(_ARGS), st.booleans()
)
# How a call ends (None: left pending); "ok-low" gains less than the cycle check asks.
_outcome = st.sampled_from((None, "ok", "failed", "refused", "ok-low", "ok-none"))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _pick, _call, _outcome),
        st.tuples(st.just("many"), _pick, _call, st.none()),
        st.tuples(st.just("settle"), _pick, _call, _outcome),
        st.tuples(st.just("copy"), _pick, _call, st.none()),
        st.tuples(st.just("restore"), _pick, _call, st.none()),
    ),
    max_size=25,
)


def _settle(loop: LoopState, call_id: str, outcome: str) -> LoopState:
    if outcome.startswith("ok"):
        gain = {"ok": 0.9, "ok-low": 0.05, "ok-none": None}[outcome]
        return loop.settle(call_id, "ok", f"result of {call_id}", gain)
    return loop.settle(call_id, cast('Literal["failed", "refused"]', outcome), f"no: {call_id}")


def _pool(steps: list[tuple[str, int, tuple[str, str, str, bool], str | None]]) -> list[LoopState]:
    pool = [LoopState()]
    for kind, at, (call_id, tool, args, same), outcome in steps:
        loop = pool[at % len(pool)]
        if kind == "record":  # and settled at once, unless left pending
            loop = loop.record(_action(call_id, tool, args, same))
            if outcome is not None:
                loop = _settle(loop, call_id, outcome)
        elif kind == "many":  # past a chunk of the log
            for n in range(CHUNK + 2):
                loop = loop.record(_action(f"{call_id}-{n}", tool, f"{args} {n}", same))
                loop = loop.settle(f"{call_id}-{n}", "ok", "fine", 0.9 if n % 2 else 0.0)
        elif kind == "settle":
            loop = _settle(loop, call_id, outcome or "ok")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


_GOVERNORS = (
    LoopGovernor(),
    LoopGovernor(cycle_window=4, cycle_gain=0.5, semantic_threshold=0.3),
    LoopGovernor(cycle_window=6, semantic_window=1, semantic_threshold=0.0),
)


def _ask(governor: LoopGovernor, loop: LoopState, action: ActionRecord) -> Decision:
    return governor.before_action(
        loop, action, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
    )


def _fields(decision: Decision) -> tuple[Any, ...]:
    return (decision.verdict, decision.reason, decision.message, decision.check)


# Every call of the alphabet: new, or seen before exactly, canonically or alike.
_EVERY = [(tool, args, same) for tool in _TOOLS for args in _ARGS for same in (False, True)]


@settings(max_examples=100, deadline=None)
@given(_steps, st.sampled_from(_IDS))
def test_before_action_answers_as_the_plain_path(
    steps: list[tuple[str, int, tuple[str, str, str, bool], str | None]], call_id: str
) -> None:
    """Every state of the pool, every governor, every call of the alphabet (new or seen
    before): the same verdict, reason, message and check as ``_checked``."""
    pool = _pool(steps)
    for loop in pool:
        for governor in _GOVERNORS:
            for tool, args, same in _EVERY:
                action = _action(call_id, tool, args, same)
                fast = _ask(governor, loop, action)
                plain = governor._checked(loop, action)
                assert _fields(fast) == _fields(plain)
                # The index is the same afterwards either way (asking changes nothing).
                assert _ask(governor, loop, action) == fast


def test_the_shortcut_is_taken_and_answers() -> None:
    """A run's state: a new call continues; a write continues; after a low gain the
    cycle check is asked; a failure sends a like call to the semantic check."""
    governor = LoopGovernor(cycle_window=4, semantic_threshold=0.5)
    loop = LoopState()
    for n, tool in enumerate(("search", "lookup", "search", "lookup")):
        loop = loop.record(_action(f"c{n}", tool, f"q {n}", False))
        loop = loop.settle(f"c{n}", "ok", "nothing", 0.0)
    assert _ask(governor, loop, _action("x", "search", "q 9", False)).check == "cycle"
    assert _ask(governor, loop, _action("x", "refund", "q 9", False)).check == ""
    loop = loop.record(_action("f", "search", "order 12", False))
    loop = loop.settle("f", "failed", "no such order")
    decision = _ask(governor, loop, _action("g", "search", "order 12 ", False))
    assert decision.check == "semantic"
    assert _ask(governor, loop, _action("g", "search", "order 12", False)).check == "exact"
    loop = loop.record(_action("h", "lookup", "Order 13", True)).settle("h", "ok", "r", 0.9)
    again = _action("i", "lookup", "order 13", True)
    assert _ask(governor, loop, again).check == "canonical"


class _Own(LoopState):
    """A subclass: the plain path."""


def test_anything_else_takes_the_plain_path(monkeypatch: Any) -> None:
    called: list[str] = []
    original = LoopGovernor._checked

    def noted(self: LoopGovernor, loop: LoopState, action: ActionRecord) -> Decision:
        called.append(action.call_id)
        return original(self, loop, action)

    monkeypatch.setattr(LoopGovernor, "_checked", noted)
    governor = LoopGovernor()
    run = LoopState().record(_action("a", "search", "q", False)).settle("a", "ok", "r", 0.5)
    _ask(governor, run, _action("new", "search", "r", False))  # the shortcut
    _ask(governor, run, _action("seen", "search", "q", False))  # a key seen: plain
    restored = LoopState.model_validate_json(run.model_dump_json())
    _ask(governor, restored, _action("restored", "search", "r", False))
    _ask(governor, _Own(), _action("own", "search", "r", False))
    first = LoopState().record(_action("a", "search", "q", False))
    first.record(_action("b", "search", "q", False))
    branch = first.record(_action("c", "search", "s", False))  # a branch: a parent line
    _ask(governor, branch, _action("branch", "search", "r", False))
    assert called == ["seen", "restored", "own", "branch"]


def test_action_makes_the_records_record() -> None:
    """The record as ``ActionRecord(...)`` makes it from the call's name, the SHA-256 of
    its raw text and its canonical key; a read and a write."""
    from test_governor import unit_call

    governor = LoopGovernor()
    cases: tuple[tuple[str, str, Literal["read", "write"]], ...] = (
        ("weather", '{"city":"Oslo"}', "read"),
        ("search", '{"query":"x"}', "read"),
        ("refund", '{"reason":"damaged","amount":25.0,"order":"A-1001"}', "write"),
    )
    for tool, raw, effect in cases:
        call = unit_call(tool, raw)
        made = governor.action(call, raw, "id-1")
        assert type(made) is ActionRecord
        expected = ActionRecord(
            call_id="id-1",
            tool=tool,
            effect=effect,
            exact=hashlib.sha256(f"{tool}\x00{raw}".encode()).hexdigest(),
            key=call.key,
            text=f"{tool}({call._canonical})",
        )
        assert made == expected
        assert (made.outcome, made.result, made.gain) == ("pending", "", None)
