"""The Planning side's shortcut of issue 23's twelfth round, against the plain path.

- ``_batch._with_ids`` for a reply of one call on a ``LoopState`` itself whose index is a
  line of its own covering its ``ActionLog``: an id the line holds no call of is free,
  read in place (``LoopState._call_free``'s first answer, without its frame), for the
  model's id, or ``call-<step>`` when none is given. Every state of a pool grown by
  records, runs past a chunk of the log, settles, copies, restored states and branches
  gives the reply's call the id (and the request) the plain loop over the calls
  (``_each_with_id``) gives it.
- Anything else asks ``_call_free`` as before: an id the line holds (free or not below
  the state's length), a branched line, an index not covering the actions, a private
  store that is not a dict, a subclass.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import CHUNK, ActionRecord
from statemachine._batch import _each_with_id, _with_ids
from statemachine._governor import LoopState
from statemachine._model import ToolRequest

_IDS = ("a", "b", "call-3", "call-4", "call-3.2", "")

# Mostly the latest state (a run), often an older one (a branch of its line).
_pick = st.one_of(st.just(-1), st.just(-1), st.integers(0, 10**6))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _pick, st.sampled_from(_IDS[:-1])),
        st.tuples(st.just("many"), _pick, st.sampled_from(_IDS[:-1])),
        st.tuples(st.just("settle"), _pick, st.sampled_from(_IDS[:-1])),
        st.tuples(st.just("copy"), _pick, st.just("")),
        st.tuples(st.just("restore"), _pick, st.just("")),
    ),
    max_size=24,
)


def _action(call_id: str) -> ActionRecord:
    return ActionRecord(call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()")


def _pool(steps: list[tuple[str, int, str]]) -> list[LoopState]:
    """Every state ``steps`` make, from ``LoopState()``."""
    pool = [LoopState()]
    for kind, at, call_id in steps:
        loop = pool[at % len(pool)]
        if kind == "record":
            loop = loop.record(_action(call_id))
        elif kind == "many":  # past a chunk of the log (CHUNK records)
            for n in range(CHUNK + 3):
                loop = loop.record(_action(call_id if n == CHUNK else f"{call_id}-{n}"))
        elif kind == "settle":
            loop = loop.settle(call_id, "ok", f"result of {call_id}")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


def _fields(requests: tuple[ToolRequest, ...]) -> list[Any]:
    return [
        (type(r), r.__dict__, r.model_fields_set, r.__pydantic_extra__, r.__pydantic_private__)
        for r in requests
    ]


def _free(loop: LoopState, call_id: str) -> bool:
    """Whether no action of ``loop`` has ``call_id``, by reading the actions."""
    return all(action.call_id != call_id for action in loop.actions)


@settings(max_examples=150, deadline=None)
@given(_steps, st.sampled_from(_IDS), st.sampled_from([3, 4]))
def test_a_replys_id_is_the_plain_loops(
    steps: list[tuple[str, int, str]], given_id: str, step: int
) -> None:
    """On every state of the pool, ``_with_ids`` gives the reply's one call the id and
    request the plain loop gives it (the very request when its id is kept), and that id
    is new to the state."""
    for loop in _pool(steps):
        request = ToolRequest(name="t", arguments="{}", id=given_id)
        requests = (request,)
        fast = _with_ids(loop, step, requests)
        plain = _each_with_id(loop, step, requests)
        assert _fields(fast) == _fields(plain)
        assert (fast[0] is request) is (plain[0] is request)
        assert (fast is requests) is (plain[0] is request)
        assert _free(loop, fast[0].id)


def test_a_new_id_is_read_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """A state whose line is its own and covers its log is not asked (``_call_free``) for
    an id the line holds no call of: the model's, or ``call-<step>`` for an empty one."""
    loop = LoopState().record(_action("a")).record(_action("call-2"))

    def asked(self: LoopState, call_id: str) -> bool:
        raise AssertionError(f"asked for {call_id!r}")

    monkeypatch.setattr(LoopState, "_call_free", asked)
    kept = (ToolRequest(name="t", arguments="{}", id="b"),)
    assert _with_ids(loop, 3, kept) is kept
    (made,) = _with_ids(loop, 3, (ToolRequest(name="t", arguments="{}", id=""),))
    assert made.id == "call-3"
    monkeypatch.undo()
    (made,) = _with_ids(loop, 2, (ToolRequest(name="t", arguments="{}", id="a"),))
    assert made.id == "call-2.2"  # both ids taken: the index read as for any state


def test_an_older_state_of_its_line_is_asked() -> None:
    """An older state shares the line, which holds the calls recorded after it: an id the
    line holds is asked of the state (free below its length), not taken as used."""
    older = LoopState().record(_action("a"))
    newer = older.record(_action("b")).record(_action("call-3"))
    assert older._line() is newer._line()
    assert [
        r.id for r in _with_ids(older, 3, (ToolRequest(name="t", arguments="{}", id="b"),))
    ] == ["b"]
    assert [r.id for r in _with_ids(older, 3, (ToolRequest(name="t", arguments="{}", id=""),))] == [
        "call-3"
    ]
    assert [
        r.id for r in _with_ids(newer, 3, (ToolRequest(name="t", arguments="{}", id="b"),))
    ] == ["call-3.2"]


def test_an_index_not_covering_the_log_is_asked() -> None:
    """A state whose index covers fewer actions than its log holds (an index kept by
    ``_evolve`` with other actions) is asked: its index is made again from the log."""
    loop = LoopState().record(_action("a"))
    grown = loop._evolve(actions=loop.actions.appended(_action("b")))
    assert grown._index.size < len(grown.actions)
    for given_id, expected in (("b", "call-3"), ("", "call-3"), ("c", "c")):
        (made,) = _with_ids(grown, 3, (ToolRequest(name="t", arguments="{}", id=given_id),))
        assert made.id == expected
    older = LoopState().record(_action("call-3"))
    grown = older._evolve(actions=older.actions.appended(_action("call-4")))
    (made,) = _with_ids(grown, 4, (ToolRequest(name="t", arguments="{}", id=""),))
    assert made.id == "call-4.2"
