"""statemachine._actions.ActionLog: the loop state's actions, as a tuple would hold them.

ActionLog shares its full chunks between the states of a run so that recording and
settling a call cost the same at any length; every operation is checked here against
the plain tuple it stands for, and its delta (the checkpoint's ops) against the tuple's.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import ActionRecord, LoopState
from statemachine._actions import CHUNK, EMPTY_LOG, ActionLog
from statemachine.persist._codec import _dump_log
from statemachine.persist._delta import _apply, _log_change


def record(n: int, outcome: str = "pending") -> ActionRecord:
    return ActionRecord(
        call_id=f"c{n}",
        tool="search",
        effect="read",
        exact=f"e{n}",
        key=f"k{n}",
        text=f'search({{"query":"q{n}"}})',
        outcome=outcome,  # type: ignore[arg-type]
    )


# Each step: append a new record, or replace the record at a position (taken modulo the
# length), from the latest log or from an older one (a branch).
steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "replace"]),
        st.integers(0, 10**6),
        st.sampled_from([-1, -1, -1, -2, -5]),
    ),
    max_size=3 * CHUNK + 5,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_every_log_reads_as_the_tuple_it_stands_for(plan: list[tuple[str, int, int]]) -> None:
    """Length, items, slices, iteration, equality and hashing, after any appends and
    replaces, from the latest log or an older one: those of the plain tuple."""
    logs: list[tuple[ActionLog, tuple[ActionRecord, ...]]] = [(EMPTY_LOG, ())]
    for n, (kind, at, back) in enumerate(plan):
        log, plain = logs[max(back, -len(logs))]
        if kind == "append" or not plain:
            made = record(n)
            logs.append((log.appended(made), (*plain, made)))
        else:
            position = at % len(plain)
            made = record(n, "ok")
            changed = (*plain[:position], made, *plain[position + 1 :])
            logs.append((log.replaced(position, made), changed))
    for log, plain in logs:
        assert len(log) == len(plain)
        assert tuple(log) == plain
        assert list(reversed(log)) == list(reversed(plain))
        assert log == plain
        assert log == ActionLog(plain)
        assert hash(log) == hash(ActionLog(plain))
        for index in (0, len(plain) // 2, -1, -len(plain)):
            if plain:
                assert log[index] is plain[index]
        for window in (slice(-11, None), slice(3, 40), slice(CHUNK - 1, CHUNK + 2), slice(5, 2)):
            assert log[window] == plain[window]
        assert all(len(chunk) == CHUNK for chunk in log.chunks)
        assert 0 < len(log.tail) <= CHUNK or not plain


def test_out_of_range_and_steps() -> None:
    """An index past the end raises IndexError; a stepped slice is the tuple's."""
    log = ActionLog(record(n) for n in range(70))
    with pytest.raises(IndexError, match="action log index 70 out of range"):
        log[70]
    assert log[::7] == tuple(log)[::7]


def test_it_survives_copy_pickle_and_pydantic() -> None:
    """A loop state with a log round-trips through JSON and pickle, and a copied state
    holds a log even when given a tuple."""
    log = ActionLog(record(n) for n in range(40))
    loop = LoopState(actions=log)
    assert isinstance(loop.actions, ActionLog)
    again = LoopState.model_validate_json(loop.model_dump_json())
    assert again == loop
    assert isinstance(again.actions, ActionLog)
    assert pickle.loads(pickle.dumps(log)) == log
    assert copy.deepcopy(log) == log
    copied = loop.model_copy(update={"actions": tuple(log)[:3]})
    assert isinstance(copied.actions, ActionLog)
    assert copied.actions == tuple(log)[:3]


def encode(records: Any) -> list[Any]:
    return [item.model_dump(mode="json") for item in records]


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK])
def test_the_delta_of_a_log_is_what_dumping_it_afresh_gives(size: int) -> None:
    """Appending, settling the last record and settling one a chunk back give the
    document dumping the new log afresh gives (each full chunk as its text, then the
    records), and ops that turn the old document into it (only the records past the
    shared chunks are read)."""
    old = ActionLog(record(n) for n in range(size))
    grown = old.appended(record(size))
    cases = [grown, grown.replaced(size, record(size, "ok")), old]
    if size:
        cases.append(old.replaced(size - 1, record(size - 1, "failed")))
        cases.append(old.replaced(0, record(0, "refused")))
    for new in cases:
        document, ops = _log_change(old, _dump_log(old), new, ["actions"])
        assert document == _dump_log(new)
        rebuilt = {"actions": copy.deepcopy(_dump_log(old))}
        _apply(rebuilt, copy.deepcopy(ops))
        assert rebuilt["actions"] == document
        assert (ops == []) == (tuple(new) == tuple(old))
        if ops and ops[0][0] == "append":
            assert ops[0][2] == encode(new)[size:]
