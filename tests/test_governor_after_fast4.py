"""after_action's settled state made without the frames of ``_record``, ``ActionLog._of``
and ``_trusted`` (round 10 of issue 23): ``_observed`` sets the settled record's slots, the
log's and the state's attributes in place. Each against the plain step it stands for."""

# pyright: reportPrivateUsage=false
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import LoopGovernor, LoopState
from statemachine._actions import _RECORD_FIELDS, ActionLog, ActionRecord, _record
from statemachine._governor import _RESULT_CHARS

_TEXTS = st.text(alphabet="ab :\u00e91", max_size=8)


def _fields(record: ActionRecord) -> tuple[object, ...]:
    """The record's fields, a float gain by its bits (``-0.0`` is not ``0.0``, a NaN is
    itself)."""
    values = [getattr(record, name) for name in _RECORD_FIELDS]
    return tuple(
        (type(value), math.copysign(1.0, value), value.hex()) if type(value) is float else value
        for value in values
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_TEXTS, _TEXTS, _TEXTS), min_size=1, max_size=70),
    st.text(max_size=3) | st.just("x" * (_RESULT_CHARS + 5)),
    st.floats(allow_nan=True) | st.just(-0.0),
    st.tuples(_TEXTS),
    st.integers(0, 5),
    st.booleans(),
)
def test_observed_state_is_the_settled_state(
    rows: list[tuple[str, str, str]],
    result: str,
    gain: float,
    evidence: tuple[str],
    streak: int,
    grams: bool,
) -> None:
    """``_observed``'s state against ``_settled`` then ``_evolve``'s: the settled record
    field by field (outcome ``ok``, the result cut at ``_RESULT_CHARS``, the gain to the
    bit), the log an ``ActionLog`` sharing the full chunks, the state a ``LoopState`` with
    its own copy of the fields set, no extra fields, and the index and trigram masks kept
    (the very objects)."""
    records = [
        _record(f"call-{n}", "search", "read", exact, key, text)
        for n, (exact, key, text) in enumerate(rows)
    ]
    loop = LoopState()
    for record in records:
        loop = loop.record(record)
    if grams:
        loop._masks()
    twin = LoopState.model_validate(loop.model_dump())
    if grams:
        twin._masks()
    last = records[-1].call_id
    fast = loop._observed(last, result, gain, evidence, streak)
    assert fast is not None
    changes = twin._settled(last, "ok", result, gain)
    assert changes is not None
    plain = twin._evolve(**changes, evidence=evidence, low_gain_streak=streak)
    assert type(fast) is LoopState
    assert type(fast.actions) is ActionLog
    assert fast.actions._chunks is loop.actions._chunks
    assert [_fields(one) for one in fast.actions] == [_fields(one) for one in plain.actions]
    assert type(fast.actions[-1]) is ActionRecord
    assert fast.actions[-1].outcome == "ok"
    assert list(fast._fields()) == list(plain._fields())
    assert fast.evidence is evidence
    assert fast.low_gain_streak == streak
    assert fast._grams is loop._grams
    assert fast._index is loop._index
    assert fast._line().keys == plain._line().keys
    # The state is a whole model: it dumps, copies and validates as the plain one.
    assert fast.model_dump() == plain.model_dump() or math.isnan(gain)
    # (A record's gain is finite when validated: after_action refuses a similarity's NaN or
    # infinity before settling, see below; _observed is given such gains here directly.)
    if math.isfinite(gain):
        assert LoopState.model_validate(fast.model_dump()).model_dump() == fast.model_dump()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (math.nan, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
        ("0.5", TypeError),
        (None, TypeError),
        (True, TypeError),
    ],
)
def test_a_similarity_that_answers_no_finite_number_is_refused(
    answer: object, error: type[Exception]
) -> None:
    """A user's evidence similarity that answers a NaN, an infinity or no number is refused
    with an error naming it, before the action is settled with a gain no checkpoint holds
    (a record's gain is finite) and no plateau test finds below its threshold."""

    def odd(first: str, second: str) -> float:
        return answer  # type: ignore[return-value]

    governor = LoopGovernor(evidence_similarity=odd)
    loop = LoopState()
    for n in range(2):
        loop = loop.record(_record(f"c{n}", "search", "read", f"e{n}", f"k{n}", f"t{n}"))
        if n == 0:  # the first result has no evidence before it: gain 1.0, nothing asked
            loop = governor.after_action(
                loop, call_id="c0", effect="read", result="first", ctx=None, step=0
            )
    with pytest.raises(error, match=r"the evidence similarity .* returned"):
        governor.after_action(loop, call_id="c1", effect="read", result="second", ctx=None, step=1)
    assert [record.gain for record in loop.actions] == [1.0, None]


@pytest.mark.parametrize("answer", [0.25, 1, -0.5])
def test_a_similarity_that_answers_a_finite_number_settles(answer: float) -> None:
    """Any finite number, an int among them, is a gain's similarity as before."""
    governor = LoopGovernor(evidence_similarity=lambda first, second: answer)
    loop = LoopState()
    for n in range(2):
        loop = loop.record(_record(f"c{n}", "search", "read", f"e{n}", f"k{n}", f"t{n}"))
        loop = governor.after_action(
            loop, call_id=f"c{n}", effect="read", result=f"r{n}", ctx=None, step=n
        )
    assert [record.gain for record in loop.actions] == [1.0, 1.0 - answer]
    assert LoopState.model_validate(loop.model_dump()).model_dump() == loop.model_dump()
