"""The records and decisions the library makes by plain slot stores, against the plain path.

``_record`` (the record made from values known valid), ``LoopState._observed`` (the latest
action settled "ok") and ``_suppress`` (a SUPPRESS decision) make their object as an
instance of a private subclass whose slots are stored as ``object`` stores them, then
give it the class's own (``__class__`` assignment): the same object as ``ActionRecord(...)``,
``settle`` and ``Decision(...)`` make, of the class itself, frozen as it, copied and
pickled as it.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import _RECORD_FIELDS, ActionRecord, _record
from statemachine._governor import Decision, LoopState, Verdict, _suppress

_TEXT = st.text(max_size=12)
_GAIN = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))
_DECISION_FIELDS = ("verdict", "reason", "message", "check")


def _same(made: Any, plain: Any, fields: tuple[str, ...], values: tuple[Any, ...]) -> None:
    """``made`` is ``plain``'s equal of its very class, each slot the very value given,
    frozen to setting and deleting, and copied and pickled as ``plain`` is."""
    assert type(made) is type(plain)
    assert made.__class__ is type(plain)
    assert made == plain
    assert hash(made) == hash(plain)
    for name, value in zip(fields, values, strict=True):
        assert getattr(made, name) is value
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(made, name, value)
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            delattr(made, name)
        assert getattr(made, name) is value
    for twin in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert type(twin) is type(plain)
        assert twin == plain
    assert repr(made) == repr(plain)
    assert attrs.asdict(made) == attrs.asdict(plain)


@settings(max_examples=80, deadline=None)
@given(
    _TEXT,
    _TEXT,
    st.sampled_from(("read", "write")),
    _TEXT,
    _TEXT,
    _TEXT,
    st.sampled_from(("pending", "ok", "failed", "refused", "suppressed")),
    _TEXT,
    _GAIN,
)
def test_record_is_the_plain_record(
    call_id: str,
    tool: str,
    effect: str,
    exact: str,
    key: str,
    text: str,
    outcome: str,
    result: str,
    gain: float | None,
) -> None:
    values = (call_id, tool, effect, exact, key, text, outcome, result, gain)
    made = _record(*values)
    fields: dict[str, Any] = dict(zip(_RECORD_FIELDS, values, strict=True))
    plain = ActionRecord(**fields)
    _same(made, plain, _RECORD_FIELDS, values)
    assert made.model_dump() == plain.model_dump()
    assert made.model_dump_json() == plain.model_dump_json()


def test_record_defaults() -> None:
    made = _record("c", "t", "read", "e", "k", "x")
    plain = ActionRecord(call_id="c", tool="t", effect="read", exact="e", key="k", text="x")
    _same(made, plain, _RECORD_FIELDS, ("c", "t", "read", "e", "k", "x", "pending", "", None))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=40),
    _TEXT,
    st.text(max_size=30) | st.just("r" * 2_100),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(_TEXT, max_size=3).map(tuple),
    st.integers(min_value=0, max_value=5),
)
def test_observed_settles_as_settle(
    earlier: int,
    call_id: str,
    result: str,
    gain: float,
    evidence: tuple[str, ...],
    streak: int,
) -> None:
    """The latest action settled by ``_observed`` is ``settle``'s, the state the same."""
    loop = LoopState()
    for n in range(earlier):
        loop = loop.record(
            ActionRecord(
                call_id=f"old-{n}", tool="t", effect="read", exact=f"e{n}", key=f"k{n}", text="x"
            )
        ).settle(f"old-{n}", "ok", f"r{n}", 0.5)
    pending = ActionRecord(
        call_id=call_id, tool="tool", effect="write", exact="e", key="tool:k", text="tool()"
    )
    loop = loop.record(pending)
    observed = loop._observed(call_id, result, gain, evidence, streak)
    plain = loop.settle(call_id, "ok", result, gain)._evolve(
        evidence=evidence, low_gain_streak=streak
    )
    assert observed is not None
    assert type(observed) is LoopState
    settled = observed.actions[-1]
    expected = plain.actions[-1]
    values = tuple(getattr(expected, name) for name in _RECORD_FIELDS)
    # (a result cut to its first 2,000 characters is a new str each time it is cut)
    kept = result if len(result) <= 2_000 else settled.result
    _same(settled, expected, _RECORD_FIELDS, (*values[:6], "ok", kept, gain))
    for name in _RECORD_FIELDS[:6]:
        assert getattr(settled, name) is getattr(pending, name)
    assert settled.result == result[:2_000]
    assert list(observed.actions) == list(plain.actions)
    assert all(type(record) is ActionRecord for record in observed.actions)
    assert observed.model_dump() == plain.model_dump()
    assert observed.evidence == evidence
    assert observed.low_gain_streak == streak


@settings(max_examples=60, deadline=None)
@given(_TEXT, _TEXT, _TEXT)
def test_suppress_is_the_plain_decision(reason: str, message: str, check: str) -> None:
    made = _suppress(reason, message, check)
    plain = Decision(Verdict.SUPPRESS, reason, message, check)
    _same(made, plain, _DECISION_FIELDS, (Verdict.SUPPRESS, reason, message, check))
