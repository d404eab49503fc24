"""``LoopState`` as a slotted frozen attrs class (issue 23, round 18) against the pydantic
model it was, kept here as a reference (``OldLoopState``: the same fields, config and
``__eq__``).

- The constructor, ``model_validate`` and ``attrs.evolve`` accept and refuse what the
  model accepted and refused (over mixed inputs: lax conversions, wrong types, extra
  fields), with the same errors, and hold the same values (of the same classes).
- A state dumps as the model dumped (``model_dump``, ``model_dump_json``) and the
  checkpoint writes the very bytes the model's state was written as (``_dump_loop``,
  for the states of a whole run too, and for one nested in another value); the loader
  reads back an equal state, checking it as the model checked it.
- Frozen; equal and hashed by its fields (not its caches); copies, deep copies and
  pickles are equal states of the same class; ``model_copy`` checks its update (which
  the model took unchecked): nothing lowers a count by it.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from test_delta_pairs2 import PHASES

from statemachine._actions import CHUNK, EMPTY_LOG, ActionLog, ActionRecord
from statemachine._governor import LoopState, Verdict, VerdictRecord
from statemachine.persist._chunks import _load_loop
from statemachine.persist._codec import _dump_log, _dump_loop, _encode


class OldLoopState(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """The reference: ``LoopState`` as it was (its fields, config and ``__eq__``)."""

    actions: ActionLog = EMPTY_LOG
    evidence: tuple[str, ...] = ()
    tool_iterations: int = 0
    low_gain_streak: int = 0
    finalize: str = ""
    paused: str = ""
    verdicts: tuple[VerdictRecord, ...] = ()
    flags: tuple[str, ...] = ()
    failures: tuple[int, ...] = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OldLoopState):
            return NotImplemented
        return self.__dict__ == other.__dict__


OldLoopState.model_rebuild()
NAMES = tuple(OldLoopState.model_fields)


def _old_dump(old: OldLoopState) -> Any:
    """What the checkpoint wrote for the model's state (``_dump_loop`` as it was)."""
    encoded = _encode(old)
    if type(old.actions) is ActionLog:
        encoded["actions"] = _dump_log(old.actions)
    return encoded


def _bytes(value: Any) -> bytes:
    return orjson.dumps(value, default=str)


def _record(n: int, outcome: str = "pending") -> ActionRecord:
    return ActionRecord(
        call_id=f"c{n}",
        tool="t",
        effect="read",
        exact=f"e{n}",
        key=f"k{n}",
        text="t()",
        outcome=outcome,  # type: ignore[arg-type]
    )


VERDICT = VerdictRecord(step=1, hook="begin_step", verdict=Verdict.ABORT, check="c", reason="r")
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([2.0, 2.5, float("nan"), -0.0]),
    st.sampled_from(["", "a", "3", "x y", "-1", "1.0"]),
    st.binary(max_size=2),
    st.sampled_from([VERDICT, Verdict.PAUSE, _record(1)]),
    st.builds(dict),
)
SEQUENCES = st.one_of(
    st.lists(ANY, max_size=3),
    st.lists(ANY, max_size=3).map(tuple),
    st.frozensets(st.sampled_from(["a", "b", 1, 2]), max_size=2),
    st.lists(st.sampled_from(["a", "b"]), max_size=3).map(tuple),
    st.lists(st.integers(0, 5), max_size=3).map(tuple),
    st.lists(
        st.sampled_from(
            [
                VERDICT,
                VERDICT.model_dump(),
                {
                    "step": "2",
                    "hook": "after_action",
                    "verdict": "pause",
                    "check": "",
                    "reason": "",
                },
                {"step": 1},
            ]
        ),
        max_size=2,
    ),
    st.lists(
        st.sampled_from([_record(1), _record(2, "ok"), _record(3).model_dump(), {"tool": 1}]),
        max_size=3,
    ),
    st.sampled_from([ActionLog([_record(n) for n in range(CHUNK + 2)]), EMPTY_LOG]),
)
VALUES = st.dictionaries(
    st.sampled_from([*NAMES, "extra", "_index", "model_config"]),
    st.one_of(ANY, SEQUENCES),
    max_size=4,
)


def _outcome(make: Any, values: Any) -> tuple[str, Any]:
    try:
        return "made", make(values)
    except ValidationError as error:
        return "refused", (error.title, error.errors(include_url=False, include_context=False))
    except TypeError as error:
        return "type", str(error)


def _same_state(new: LoopState, old: OldLoopState) -> None:
    assert type(new) is LoopState
    for name in NAMES:
        mine, theirs = getattr(new, name), getattr(old, name)
        assert type(mine) is type(theirs), name
        assert mine == theirs, name
        if isinstance(mine, tuple):
            assert [type(item) for item in mine] == [type(item) for item in theirs]
    assert new.model_dump() == old.model_dump()
    assert new.model_dump(mode="json") == old.model_dump(mode="json")
    assert new.model_dump_json() == old.model_dump_json()
    assert _bytes(_dump_loop(new)) == _bytes(_old_dump(old))
    assert _bytes(_encode([new])) == _bytes(_encode([old]))


def _errors_equal(new: Any, old: Any) -> None:
    assert new[0] == old[0]
    if new[0] == "refused":
        assert new[1][0] == "LoopState"
        assert repr(new[1][1]) == repr(old[1][1])


@settings(max_examples=400, deadline=None)
@given(values=VALUES)
def test_the_constructor_accepts_and_refuses_what_the_model_did(values: dict[str, Any]) -> None:
    new = _outcome(lambda v: LoopState(**v), values)
    old = _outcome(lambda v: OldLoopState(**v), values)
    _errors_equal(new, old)
    validated = _outcome(LoopState.model_validate, values)
    _errors_equal(validated, _outcome(OldLoopState.model_validate, values))
    if new[0] != "made":
        return
    _same_state(new[1], old[1])
    _same_state(validated[1], old[1])
    # evolve checks as the constructor does
    base = LoopState()
    evolved = _outcome(lambda v: attrs.evolve(base, **v), values)
    _errors_equal(evolved, new)


@settings(max_examples=200, deadline=None)
@given(values=VALUES, update=VALUES)
def test_model_copy_checks_its_update(values: dict[str, Any], update: dict[str, Any]) -> None:
    made = _outcome(lambda v: LoopState(**v), values)
    if made[0] != "made":
        return
    state: LoopState = made[1]
    merged = {**state._fields(), **update}
    expected = _outcome(lambda v: LoopState(**v), merged)
    got = _outcome(lambda u: state.model_copy(update=u), update)
    _errors_equal(got, expected)
    if got[0] == "made":
        assert got[1] == expected[1]
        assert type(got[1]) is LoopState
        for name in NAMES:
            if name not in update:
                assert getattr(got[1], name) is getattr(state, name)


def _states() -> list[LoopState]:
    states = [phase.loop for phase in PHASES]
    assert any(len(state.actions) > CHUNK for state in states)
    return states


def test_a_run_s_states_are_written_as_the_model_s_were_and_read_back() -> None:
    for chunked in (True,):
        for state in _states():
            old = OldLoopState.model_construct(**state._fields())
            dumped = _dump_loop(state)
            assert _bytes(dumped) == _bytes(_old_dump(old))
            assert _bytes(_encode({"held": state})) == _bytes(_encode({"held": old}))
            loaded = _load_loop(orjson.loads(_bytes(dumped)), chunked)
            assert type(loaded) is LoopState
            assert loaded == state
            assert loaded.model_dump() == state.model_dump()


def test_the_loader_refuses_what_the_model_refused() -> None:
    good = _dump_loop(LoopState())
    bad: Any
    for bad in (
        {**good, "tool_iterations": "many"},
        {**good, "extra": 1},
        {**good, "flags": [1]},
        {**good, "verdicts": [{"step": 1}]},
        {**good, "actions": [{"tool": 1}]},
        [],
    ):
        with pytest.raises((ValidationError, ValueError, TypeError)) as mine:
            _load_loop(bad, True)
        with pytest.raises((ValidationError, ValueError, TypeError)) as theirs:
            OldLoopState.model_validate(bad)
        assert type(mine.value) is type(theirs.value)


def test_frozen_equal_hashed_copied_and_pickled_by_its_fields() -> None:
    state = _states()[-1]
    with pytest.raises(AttributeError):
        state.tool_iterations = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        state._index = None  # type: ignore[misc]
    fresh = LoopState.model_validate(state.model_dump())
    assert fresh._index is None
    assert state._index is not None
    assert fresh == state
    assert hash(fresh) == hash(state)
    old = OldLoopState.model_validate(state.model_dump())
    assert hash(state) == hash(old)
    assert state != LoopState()
    assert old != OldLoopState()
    assert state.__eq__(old) is NotImplemented
    for made in (copy.copy(state), copy.deepcopy(state), pickle.loads(pickle.dumps(state))):
        assert type(made) is LoopState
        assert made == state
        assert made.model_dump() == state.model_dump()
        assert _bytes(_dump_loop(made)) == _bytes(_dump_loop(state))
        assert made._index is None  # the caches are made anew
    with pytest.raises(ValidationError):
        state.model_copy(update={"tool_iterations": "lower"})
    with pytest.raises(ValidationError):
        attrs.evolve(state, verdicts=("not a verdict",))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        LoopState(ActionLog())  # type: ignore[call-arg]


def test_a_state_is_not_its_model_and_a_subclass_is_dumped_the_long_way() -> None:
    class Own(LoopState):
        pass

    state = _states()[-1]
    own = Own.model_construct(**state._fields())
    assert type(own) is Own
    assert own == state
    old = OldLoopState.model_construct(**state._fields())
    assert _bytes(_dump_loop(own)) == _bytes(_encode(old))
    assert not isinstance(state, BaseModel)
    assert LoopState.model_validate(state) is state


def test_a_model_holding_a_state_validates_and_dumps_it_as_before() -> None:
    class Holder(BaseModel):
        loop: LoopState

    class OldHolder(BaseModel):
        loop: OldLoopState

    state = _states()[-1]
    for dumped in (state.model_dump(), state.model_dump(mode="json")):
        new, old = Holder(loop=dumped), OldHolder(loop=dumped)
        assert type(new.loop) is LoopState
        assert new.loop == state
        assert new.model_dump_json() == old.model_dump_json()
        assert new.model_dump(mode="json") == old.model_dump(mode="json")
    assert Holder(loop=state).loop is state
    with pytest.raises(ValidationError):
        Holder(loop={"tool_iterations": "many"})
