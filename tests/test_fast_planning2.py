"""The Planning side's shortcuts of issue 23's eighth round, each against the plain path.

- ``LoopState._call_free``: whether a call id is free in a state, in one frame, against
  ``_Line.of(actions, failures).call(call_id, len(actions)) is None`` (the index made
  from the state's own actions), for states of branched lines (records on older states,
  settles, copies, states restored from JSON).
  A branch's own index holds only what it recorded; the rest is read from its line.
- ``_batch._with_ids`` asking a ``LoopState`` that question, against the plain loop over
  the calls (``_each_with_id``) on the same states; a ``LoopState`` subclass is not asked
  (its own ``_call_free`` is never called), and gets the plain path's ids.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import ActionRecord
from statemachine._batch import _each_with_id, _with_ids
from statemachine._governor import LoopState, _Line
from statemachine._model import ToolRequest

_IDS = ("", "a", "call-3", "call-3.2", "call-3.3", "call-4", "call-4.2")

# Mostly the latest state (a run), often an older one (a branch of its line).
_pick = st.one_of(st.just(-1), st.just(-1), st.integers(0, 10**6))
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), _pick, st.sampled_from(_IDS[1:])),
        st.tuples(st.just("settle"), _pick, st.sampled_from(_IDS[1:])),
        st.tuples(st.just("copy"), _pick, st.just("")),
        st.tuples(st.just("restore"), _pick, st.just("")),
    ),
    max_size=40,
)


def _pool(steps: list[tuple[str, int, str]]) -> list[LoopState]:
    """Every state ``steps`` make, from ``LoopState()``."""
    pool = [LoopState()]
    for kind, at, call_id in steps:
        loop = pool[at % len(pool)]
        if kind == "record":
            made = ActionRecord(
                call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()"
            )
            loop = loop.record(made)
        elif kind == "settle":
            loop = loop.settle(call_id, "failed", f"result of {call_id}")
        elif kind == "copy":
            loop = loop.model_copy(update={"actions": loop.actions})
        else:
            loop = LoopState.model_validate_json(loop.model_dump_json())
        pool.append(loop)
    return pool


def _free(loop: LoopState, call_id: str) -> bool:
    """The plain answer: the index made from the state's own actions."""
    return _Line.of(loop.actions, loop.failures).call(call_id, len(loop.actions)) is None


def _fields(requests: tuple[ToolRequest, ...]) -> list[tuple[Any, ...]]:
    return [(type(r), r.name, r.arguments, r.id, r.model_fields_set) for r in requests]


@settings(max_examples=150, deadline=None)
@given(_steps)
def test_a_free_call_id_is_the_plain_indexs_answer(steps: list[tuple[str, int, str]]) -> None:
    """Every state of a pool of branched lines answers ``_call_free`` for every id as the
    index made from its own actions does (a branch reads its line's ids below its base)."""
    for loop in _pool(steps):
        for call_id in _IDS:
            assert loop._call_free(call_id) is _free(loop, call_id), (call_id, loop.actions)


def test_a_branch_reads_the_ids_below_its_base() -> None:
    """A state recorded from an older state of its line (a branch, an overlay) finds the
    ids the line held below its branch point, and not those recorded after it there."""
    steps = [("record", -1, "a"), ("record", -1, "call-3"), ("record", 1, "call-4")]
    branch = _pool(steps)[-1]
    assert branch._line().parent is not None
    assert [branch._call_free(call_id) for call_id in ("a", "call-3", "call-4", "b")] == [
        False,
        True,
        False,
        True,
    ]
    request = ToolRequest(name="t", arguments="{}", id="a")
    assert [r.id for r in _with_ids(branch, 3, (request,))] == ["call-3"]


@settings(max_examples=150, deadline=None)
@given(_steps, st.sampled_from(_IDS), st.sampled_from([3, 4]))
def test_a_replys_id_is_the_plain_loops_on_branched_lines(
    steps: list[tuple[str, int, str]], given_id: str, step: int
) -> None:
    """``_with_ids`` gives a reply's one call the id (and request) the plain loop gives it,
    on every state of a pool of branched lines: a new id is new to that state."""
    for loop in _pool(steps):
        request = ToolRequest(name="t", arguments="{}", id=given_id)
        fast = _with_ids(loop, step, (request,))
        plain = _each_with_id(loop, step, (request,))
        assert _fields(fast) == _fields(plain)
        assert (fast[0] is request) is (plain[0] is request)
        assert _free(loop, fast[0].id)


class _Lying(LoopState, frozen=True):
    """A subclass whose own answer says every id is free."""

    def _call_free(self, call_id: str) -> bool:
        raise AssertionError("a subclass's _call_free is not asked")


def test_a_subclass_is_not_asked_and_gets_the_plain_ids() -> None:
    """A ``LoopState`` subclass takes the plain path (its index read), whatever its own
    ``_call_free`` would answer: an id the run used is replaced."""
    loop = LoopState()
    for call_id in ("call-3", "mine"):
        made = ActionRecord(
            call_id=call_id, tool="t", effect="read", exact="e", key="k", text="t()"
        )
        loop = loop.record(made)
    lying = _Lying.model_validate(loop.model_dump())
    for given_id, expected in (("mine", "call-3.2"), ("", "call-3.2"), ("new", "new")):
        request = ToolRequest(name="t", arguments="{}", id=given_id)
        (made_id,) = _with_ids(lying, 3, (request,))
        assert made_id.id == expected
        (exact,) = _with_ids(loop, 3, (request,))
        assert exact.id == expected
