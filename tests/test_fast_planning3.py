"""The Planning side's shortcuts of issue 23's tenth round, each against the plain path.

- ``LoopState.record`` for a ``LoopState`` itself whose index covers exactly its
  actions, in one frame, against ``LoopState._recorded`` (the plain path: the log's
  append, ``_evolve`` and the index's ``add``). Two pools of states are grown by the same
  steps (records on the latest state and on older ones, settles, failures, copies,
  states restored from JSON, runs past a chunk of the log), one recording by ``record``
  and one by ``_recorded``: every state of the one equals the other's, holds the same
  log and answers every index question (call ids, keys) the same.
- Anything else takes the plain path: a subclass (its own ``_recorded`` is called), a
  state whose log is not an ``ActionLog`` or whose index does not cover its actions.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import CHUNK, ActionLog, ActionRecord
from statemachine._governor import LoopState

_IDS = ("a", "b", "call-3", "call-4", "c")
_KEYS = ("e", "k", "e2", "k2")

# Mostly the latest state (a run), often an older one (a branch of its line).
_pick = st.one_of(st.just(-1), st.just(-1), st.integers(0, 10**6))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _pick, st.sampled_from(_IDS), st.booleans()),
        st.tuples(st.just("many"), _pick, st.sampled_from(_IDS), st.booleans()),
        st.tuples(st.just("settle"), _pick, st.sampled_from(_IDS), st.booleans()),
        st.tuples(st.just("copy"), _pick, st.just(""), st.booleans()),
        st.tuples(st.just("restore"), _pick, st.just(""), st.booleans()),
    ),
    max_size=30,
)


def _action(call_id: str, flag: bool) -> ActionRecord:
    return ActionRecord(
        call_id=call_id,
        tool="t",
        effect="read",
        exact="e2" if flag else "e",
        key="k2" if flag else "k",
        text="t()",
    )


def _pool(steps: list[tuple[str, int, str, bool]], *, plain: bool) -> list[LoopState]:
    """Every state ``steps`` make, from ``LoopState()``; recorded by ``record`` or (plain)
    by ``_recorded``."""

    def record(loop: LoopState, action: ActionRecord, iteration: bool) -> LoopState:
        if plain:
            return loop._recorded(action, iteration)
        return loop.record(action, iteration=iteration)

    pool = [LoopState()]
    for kind, at, call_id, flag in steps:
        loop = pool[at % len(pool)]
        if kind == "record":
            loop = record(loop, _action(call_id, flag), flag)
        elif kind == "many":  # past a chunk of the log (CHUNK records)
            for n in range(CHUNK + 3):
                loop = record(loop, _action(f"{call_id}-{n}", flag), True)
        elif kind == "settle":
            loop = loop.settle(call_id, "failed" if flag else "ok", f"result of {call_id}")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


def _answers(loop: LoopState) -> list[Any]:
    """What the state's index tells: each id free or not, each key's latest settled action."""
    said: list[Any] = [loop._call_free(call_id) for call_id in _IDS]
    said += [loop._call_free(f"{call_id}-{n}") for call_id in _IDS for n in (0, CHUNK + 2)]
    said += [loop.earlier(key) for key in _KEYS]
    return said


@settings(max_examples=120, deadline=None)
@given(_steps)
def test_record_makes_the_plain_paths_states(steps: list[tuple[str, int, str, bool]]) -> None:
    """Two pools grown by the same steps, one by ``record`` and one by ``_recorded``: the
    same states (fields, log, chunks, counts) answering the same (ids, keys)."""
    fast, plain = _pool(steps, plain=False), _pool(steps, plain=True)
    for mine, theirs in zip(fast, plain, strict=True):
        assert type(mine) is LoopState
        assert mine == theirs
        assert list(mine._fields()) == list(theirs._fields())
        assert type(mine.actions) is ActionLog
        assert mine.actions._chunks == theirs.actions._chunks
        assert mine.actions._tail == theirs.actions._tail
        assert mine.tool_iterations == theirs.tool_iterations
        assert _answers(mine) == _answers(theirs)


def test_record_keeps_the_masks_and_the_index() -> None:
    """The recorded state shares the index (moved on by one) and the trigram masks."""
    loop = LoopState().record(_action("a", False))
    masks = loop._masks()
    line = loop._line()
    after = loop.record(_action("b", False), iteration=False)
    assert after._line() is line
    assert line.size == 2
    assert after._masks() is masks
    assert after.tool_iterations == 1
    assert not after._call_free("b")
    assert loop._call_free("b")
    assert not loop._call_free("a")


def test_a_run_past_a_chunk_appends_as_the_log_does() -> None:
    loop = LoopState()
    for n in range(2 * CHUNK + 1):
        loop = loop.record(_action(f"a{n}", False))
    plain = ActionLog(())
    for n in range(2 * CHUNK + 1):
        plain = plain.appended(_action(f"a{n}", False))
    assert loop.actions._chunks == plain._chunks
    assert loop.actions._tail == plain._tail
    assert len(loop.actions) == 2 * CHUNK + 1


class _Own(LoopState):
    """A subclass: its own ``_recorded`` is what record calls."""

    def _recorded(self, action: ActionRecord, iteration: bool) -> LoopState:
        raise LookupError("the subclass's own")


def test_anything_else_takes_the_plain_path() -> None:
    """A subclass, a count that is not an ``int``, and a state whose index does not
    cover its actions (restored, or one a later state recorded from) go through
    ``_recorded``."""
    with pytest.raises(LookupError, match="the subclass's own"):
        _Own().record(_action("a", False))

    called: list[str] = []

    original = LoopState._recorded

    def noted(self: LoopState, action: ActionRecord, iteration: bool) -> LoopState:
        called.append(action.call_id)
        return original(self, action, iteration)

    LoopState._recorded = noted  # type: ignore[method-assign]
    try:
        counted = LoopState.model_construct(tool_iterations=True)  # a bool, not an int
        assert counted.record(_action("t", False)).tool_iterations == 2
        saved = LoopState().record(_action("a", False)).model_dump_json()
        restored = LoopState.model_validate_json(saved)
        restored.record(_action("r", False))
        first = LoopState().record(_action("a", False))
        first.record(_action("b", False))
        first.record(_action("c", False))  # its index covers more than it: a branch
        first.record(_action("d", False))  # (so does this one)
    finally:
        LoopState._recorded = original  # type: ignore[method-assign]
    # A new state has no index yet: its first record ("a") is plain too; "b" is not.
    assert called == ["t", "a", "r", "a", "c", "d"]
