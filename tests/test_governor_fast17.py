"""The state updates of one call without their frames (round 17 of issue 23), each
against the plain path.

- ``LoopState.record`` makes its state as its making class (inline), every slot stored;
  against ``LoopState._recorded``.
- ``after_action`` (the lexical convergence check) reads ``evidence`` and
  ``low_gain_streak`` from the state's slots and settles through ``_observed_in`` (the
  body of ``LoopState._observed``); against the plain path: the same checks with
  ``LoopState._settled`` and ``_evolve``.

Two pools of states are grown by the same steps, one the fast way and one the plain way,
from states made by hand too (a slot not set, no index or no masks, a count that is a
bool, a log that is a tuple; since round 18 a slotted class, whose round-17 variants of
pydantic's dicts no longer exist): every state of the one is the other's (class exactly,
slots in order, the index and masks kept or made alike), and answers every index
question the same.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import CHUNK, ActionLog, ActionRecord
from statemachine._governor import (
    _RESULT_CHARS,
    Decision,
    LoopGovernor,
    LoopState,
    Verdict,
    lexical_similarity,
)

_IDS = ("a", "b", "call-3", "call-4", "c")
_KEYS = ("e", "k", "e2", "k2", "e3")
_TEXTS = (
    "refund order 12 parcel late",
    "refund order 12 parcel late",
    "the parcel is in the locker 7",
    "",
    "x" * (_RESULT_CHARS + 5),
    "invoice 4 paid by card",
)


_MISSING = object()
_STORED = (*LoopState.model_fields, "_index", "_grams")


def _stored(loop: LoopState) -> list[tuple[str, Any]]:
    """What its slots hold, in their order (``_MISSING`` for one not set)."""
    return [(name, getattr(loop, name, _MISSING)) for name in _STORED]


# How a state is made by hand before a step (none, or one of these).
_HANDS = (
    "index-none",
    "grams-none",
    "count-bool",
    "log-tuple",
    "fields-missing",
    "masks",
)
_pick = st.one_of(st.just(-1), st.just(-1), st.just(-1), st.integers(0, 10**6))
_step = st.one_of(
    st.tuples(st.just("record"), _pick, st.sampled_from(_IDS), st.integers(0, 7)),
    st.tuples(st.just("many"), _pick, st.sampled_from(_IDS), st.integers(0, 7)),
    st.tuples(st.just("after"), _pick, st.sampled_from(_IDS), st.integers(0, 11)),
    st.tuples(st.just("after-last"), _pick, st.just(""), st.integers(0, 11)),
    st.tuples(st.just("settle"), _pick, st.sampled_from(_IDS), st.integers(0, 7)),
    st.tuples(st.just("copy"), _pick, st.just(""), st.integers(0, 7)),
    st.tuples(st.just("restore"), _pick, st.just(""), st.integers(0, 7)),
    st.tuples(st.just("hand"), _pick, st.sampled_from(_HANDS), st.integers(0, 7)),
)
_steps = st.lists(_step, max_size=30)
_governors = st.sampled_from(
    [
        LoopGovernor(),
        LoopGovernor(plateau_steps=2, plateau_gain=0.9),
        LoopGovernor(evidence_window=2, completion=lambda loop, ctx: None),
        LoopGovernor(
            evidence_window=3,
            completion=lambda loop, ctx: "done" if loop.low_gain_streak > 1 else None,
        ),
        LoopGovernor(evidence_similarity=lambda a, b: 0.5),
    ]
)


def _action(call_id: str, flag: int) -> ActionRecord:
    return ActionRecord(
        call_id=call_id,
        tool="t" if flag % 3 else "u",
        effect="read",
        exact=_KEYS[flag % 3],
        key=_KEYS[(flag + 1) % 5],
        text=f"t({flag})",
    )


def _by_hand(loop: LoopState, how: str) -> LoopState:
    """A state equal to ``loop`` made or changed by hand (``how``)."""
    if how == "masks":
        loop._masks()  # the masks made: a reading that misses them tells
    stored = dict(_stored(loop))
    fields = {name: stored[name] for name in LoopState.model_fields if stored[name] is not _MISSING}
    made = LoopState.model_construct(**fields)
    index, grams = stored["_index"], stored["_grams"]
    if how == "index-none":
        index = None
    elif how == "grams-none":
        grams = None
    elif how == "count-bool":
        object.__setattr__(made, "tool_iterations", True)
    elif how == "log-tuple":
        object.__setattr__(made, "actions", tuple(stored["actions"]))
        index = None
    elif how == "fields-missing":
        object.__delattr__(made, "evidence")
    object.__setattr__(made, "_index", None if index is _MISSING else index)
    object.__setattr__(made, "_grams", None if grams is _MISSING else grams)
    return made


def _plain_after(governor: LoopGovernor, loop: LoopState, call_id: str, result: str) -> LoopState:
    """after_action's plain path: its checks, then ``_settled`` and ``_evolve``."""
    if governor.evidence_similarity is lexical_similarity:
        masks = loop._grams
        if masks is None:
            masks = loop._masks()
        best, evidence = masks.advance(
            loop.evidence, result, result[:_RESULT_CHARS], governor.evidence_window
        )
        gain = 1.0 - best
    else:
        gain = governor.gain(loop, result)
        evidence = (*loop.evidence, result[:_RESULT_CHARS])[-governor.evidence_window :]
    streak = loop.low_gain_streak + 1 if gain < governor.plateau_gain else 0
    settled = loop._settled(call_id, "ok", result, gain) or {}
    loop = loop._evolve(**settled, evidence=evidence, low_gain_streak=streak)
    if streak >= governor.plateau_steps:
        decision = Decision(
            Verdict.FINALIZE,
            f"plateau: {streak} results in a row added less than {governor.plateau_gain:g}",
            check="plateau",
        )
        return loop.noted(0, "after_action", decision, finalize=decision.reason)
    return governor._finished(loop, None, 0)


def _outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "made", call(*args, **kwargs)
    except Exception as error:  # the same error either way
        return "raised", (type(error), str(error))


def _restored(loop: LoopState) -> LoopState:
    return LoopState.model_validate_json(loop.model_dump_json())


def _pool(
    governor: LoopGovernor, steps: list[tuple[str, int, str, int]], *, plain: bool
) -> list[Any]:
    """Every state (or error) ``steps`` make, from ``LoopState()``, the fast or plain way."""

    def record(loop: LoopState, action: ActionRecord, iteration: bool) -> LoopState:
        if plain:
            return loop._recorded(action, iteration)
        return loop.record(action, iteration=iteration)

    pool: list[Any] = [LoopState()]
    states: list[LoopState] = [pool[0]]
    for kind, at, name, flag in steps:
        loop = states[at % len(states)]
        before = _stored(loop)  # the stored values themselves
        made: Any
        if kind == "record":
            made = _outcome(record, loop, _action(name, flag), bool(flag % 2))
        elif kind == "many":  # past a chunk of the log

            def many(loop: LoopState, name: str, flag: int) -> LoopState:
                for n in range(CHUNK + 3):
                    loop = record(loop, _action(f"{name}-{n}", flag + n), True)
                return loop

            made = _outcome(many, loop, name, flag)
        elif kind in ("after", "after-last"):
            actions = getattr(loop, "actions", ())
            call_id = name if kind == "after" or not actions else actions[-1].call_id
            text = _TEXTS[flag % len(_TEXTS)]
            if plain:
                made = _outcome(_plain_after, governor, loop, call_id, text)
            else:
                made = _outcome(
                    governor.after_action,
                    loop,
                    call_id=call_id,
                    effect="read",
                    result=text,
                    ctx=None,
                    step=0,
                )
        elif kind == "settle":
            made = _outcome(loop.settle, name, "failed" if flag % 2 else "ok", "r")
        elif kind == "copy":
            made = _outcome(loop.model_copy, update={"actions": loop.actions})
        elif kind == "restore":
            made = _outcome(_restored, loop)
        else:
            made = ("made", _by_hand(loop, name))
        # the state made from: its fields unchanged (its caches may be made)
        assert all(a[1] is b[1] for a, b in zip(_stored(loop)[:-2], before[:-2], strict=True))
        pool.append(made)
        if made[0] == "made":
            states.append(made[1])
    return pool


def _answers(loop: LoopState) -> list[Any]:
    """What the state's index tells: each id free or not, each key's latest settled action."""
    try:
        said: list[Any] = [loop._call_free(call_id) for call_id in _IDS]
        said += [loop._call_free(f"{call_id}-{n}") for call_id in _IDS for n in (0, CHUNK + 2)]
        said += [loop.earlier(key) for key in _KEYS]
    except Exception as error:
        return [type(error)]
    return said


def _same(mine: Any, theirs: Any) -> None:
    assert mine[0] == theirs[0]
    if mine[0] == "raised":
        assert mine[1] == theirs[1]
        return
    fast, plain = mine[1], theirs[1]
    assert type(fast) is type(plain)
    mine_stored, their_stored = _stored(fast), _stored(plain)
    assert [name for name, _ in mine_stored] == [name for name, _ in their_stored]
    for (name, mine_value), (_, their_value) in zip(mine_stored, their_stored, strict=True):
        assert (mine_value is _MISSING) == (their_value is _MISSING)
        if name == "_grams":
            # The masks: made anew, or the very object the state recorded from kept, alike.
            assert (mine_value is None) == (their_value is None)
        elif name == "_index":
            assert (mine_value is None) == (their_value is None)
        else:
            assert type(mine_value) is type(their_value)
            assert mine_value == their_value
    if any(value is _MISSING for _, value in mine_stored):
        return
    actions = fast.actions
    if type(actions) is ActionLog:
        theirs_log = plain.actions
        assert type(theirs_log) is ActionLog
        assert actions._chunks == theirs_log._chunks
        assert actions._tail == theirs_log._tail
        assert actions._grown == theirs_log._grown
        assert (actions._grown is None) or actions._grown[1] is actions._tail
        for mine_record, their_record in zip(actions, theirs_log, strict=True):
            assert type(mine_record) is ActionRecord
            assert mine_record == their_record
    assert fast == plain
    assert fast.model_dump_json() == plain.model_dump_json()
    assert _answers(fast) == _answers(plain)


@settings(max_examples=150, deadline=None)
@given(_governors, _steps)
def test_record_and_after_action_make_the_plain_paths_states(
    governor: LoopGovernor, steps: list[tuple[str, int, str, int]]
) -> None:
    """Two pools grown by the same steps, one the fast way and one the plain way: the
    same states (class, fields in order, fields set, extra, private attributes in order,
    log, records) answering the same (ids, keys), or the same error."""
    fast, plain = _pool(governor, steps, plain=False), _pool(governor, steps, plain=True)
    for mine, theirs in zip(fast[1:], plain[1:], strict=True):
        _same(mine, theirs)


def test_each_state_has_its_own_slots_and_shares_its_caches() -> None:
    """Each state made is its own object, every slot set; the index and the masks
    shared along the line."""
    governor = LoopGovernor()
    loop = LoopState()
    loop = loop.record(_action("a", 1))
    loop._masks()
    recorded = loop.record(_action("b", 2))
    observed = governor.after_action(
        recorded, call_id="b", effect="read", result="the parcel 7", ctx=None, step=1
    )
    states = (loop, recorded, observed)
    for one in states:
        for other in states:
            if one is not other:
                assert one != other
        assert type(one) is LoopState
        assert [name for name, value in _stored(one) if value is _MISSING] == []
    assert recorded._line() is loop._line() is observed._line()
    assert recorded._masks() is loop._masks() is observed._masks()
    assert observed.actions[-1].outcome == "ok"
    assert observed.evidence == ("the parcel 7",)
    assert recorded.actions[-1].outcome == "pending"


_GOVERNORS = (
    LoopGovernor(),
    LoopGovernor(plateau_steps=1, plateau_gain=0.99),
    LoopGovernor(evidence_similarity=lambda a, b: 0.5),
)


def _grown(size: int) -> LoopState:
    """A run's state: ``size`` calls recorded, all but the last settled (one failed)."""
    governor = LoopGovernor()
    loop = LoopState()
    for n in range(size):
        loop = loop.record(_action(f"g{n}", n))
        if n == 1:
            loop = loop.settle(f"g{n}", "failed", "down")
        elif n < size - 1:
            loop = governor.after_action(
                loop, call_id=f"g{n}", effect="read", result=f"r {n}", ctx=None, step=n
            )
    return loop


def test_every_state_made_by_hand_takes_the_plain_paths_result() -> None:
    """Each state made by hand, at several lengths (empty, within a chunk, past one),
    recorded into (an iteration or not) and settled by after_action (the last call or
    another, by each governor): the plain path's state, or its error."""
    for size in (0, 3, CHUNK + 1):
        for how in (*_HANDS, "none"):
            for governor in _GOVERNORS:
                source = _grown(size)
                cases: list[tuple[str, Any]] = [
                    ("record", (_action("new", 4), True)),
                    ("record", (_action("new", 5), False)),
                    ("after", f"g{size - 1}"),
                    ("after", "g0"),
                    ("after", "missing"),
                ]
                for kind, argument in cases:
                    mine = source if how == "none" else _by_hand(source, how)
                    theirs = source if how == "none" else _by_hand(source, how)
                    if kind == "record":
                        action, iteration = argument
                        fast = _outcome(mine.record, action, iteration=iteration)
                        plain = _outcome(theirs._recorded, action, iteration)
                    else:
                        text = "the parcel 7 is late"
                        fast = _outcome(
                            governor.after_action,
                            mine,
                            call_id=argument,
                            effect="read",
                            result=text,
                            ctx=None,
                            step=0,
                        )
                        plain = _outcome(_plain_after, governor, theirs, argument, text)
                    _same(fast, plain)
