# pyright: reportPrivateUsage=false
"""The governor's record-keeping shortcuts of issue 23's nineteenth round (helper A2),
against the plain path.

- ``LoopGovernor.action`` finds ``_case_insensitive``'s answer for a call's arguments
  class in ``_governor._FOLDS`` (by the class's id, the class held beside it) without the
  ``lru_cache`` call: the same record as the plain path's whatever the table holds (empty,
  an entry of another class at the id, full), for calls of the library's classes and
  hand-made ones, with and without a case-insensitive field.
- ``after_action`` slices the result to what the record keeps once and hands that to
  ``_observed_in``: the settled state is the plain settle's (``_settled`` and
  ``_evolve``) for results of any length, shorter or longer than ``_RESULT_CHARS``.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from test_fast_planning7 import _plain, _routed

from statemachine import LoopGovernor
from statemachine import _governor as governor_module
from statemachine._actions import ActionRecord
from statemachine._governor import _FOLDS, _RESULT_CHARS, LoopState, _case_insensitive
from statemachine._json import canonical
from statemachine._tools import _sha256


class _Plain(BaseModel):
    city: str


class _Folded(BaseModel):
    city: str = Field(json_schema_extra={"case_insensitive": True})


class _Tool:
    """A tool of no library class (a read, as the plain path tells it)."""

    name = "lookup"


class _Call:
    """A hand-made call: its arguments any model."""

    def __init__(self, args: BaseModel) -> None:
        self.args = args
        self.name = "lookup"
        self.tool = _Tool()
        self._canonical = canonical(args.model_dump(mode="python"))
        self.args_hash = _sha256(self._canonical.encode()).hexdigest()


@contextmanager
def _table(state: str, model: type[BaseModel]) -> Generator[None]:
    """``_FOLDS`` as ``state`` says for the duration (restored after)."""
    saved = dict(_FOLDS)
    try:
        if state == "empty":
            _FOLDS.clear()
        elif state == "forged":  # another class at this class's id, the opposite answer
            other = _Plain if model is not _Plain else _Folded
            _FOLDS[id(model)] = (other, () if _case_insensitive(model) else ("city",))
        elif state == "full":  # no room: asked of _case_insensitive each time
            _FOLDS.clear()
            _FOLDS.update(
                {-k: (_Plain, ("city",)) for k in range(1, governor_module._FOLDS_KEPT + 1)}
            )
        yield
    finally:
        _FOLDS.clear()
        _FOLDS.update(saved)


_STATES = st.sampled_from(["as is", "empty", "forged", "full"])


@settings(max_examples=80, deadline=None)
@given(
    state=_STATES,
    model=st.sampled_from([_Plain, _Folded]),
    city=st.text(max_size=12),
    raw=st.text(max_size=30),
    call_id=st.text(min_size=1, max_size=8),
)
def test_action_by_the_table_is_the_plain_record(
    state: str, model: type[BaseModel], city: str, raw: str, call_id: str
) -> None:
    call: Any = _Call(model(city=city))
    with _table(state, model):
        first = LoopGovernor().action(call, raw, call_id)
        again = LoopGovernor().action(call, raw, call_id)
    expected = _plain(call, raw, call_id)
    for made in (first, again):
        assert type(made) is ActionRecord
        assert made == expected


@settings(max_examples=40, deadline=None)
@given(
    state=_STATES,
    name=st.sampled_from(["weather", "forecast", "refund"]),
    call_id=st.text(min_size=1, max_size=8),
)
def test_action_of_library_calls_by_the_table_is_the_plain_record(
    state: str, name: str, call_id: str
) -> None:
    call = _routed(name)
    raw = '{"x": 1}'
    args: BaseModel = call.args
    model = type(args)
    with _table(state, model):
        made = LoopGovernor().action(call, raw, call_id)
    assert type(made) is ActionRecord
    assert made == _plain(call, raw, call_id)


def test_the_table_keeps_the_class_beside_its_answer() -> None:
    call: Any = _Call(_Folded(city="Oslo"))
    with _table("empty", _Folded):
        LoopGovernor().action(call, "{}", "c1")
        assert _FOLDS[id(_Folded)] == (_Folded, ("city",))
    with _table("full", _Folded):
        LoopGovernor().action(call, "{}", "c1")
        assert id(_Folded) not in _FOLDS


# No plateau: after_action only settles.
_GOVERNOR = LoopGovernor(plateau_steps=1000)


def _loop(results: list[str]) -> tuple[LoopState, str]:
    """A state with one settled action per earlier result and a pending last one."""
    governor = _GOVERNOR
    loop = LoopState()
    for k, text in enumerate(results):
        call_id = f"c{k}"
        record = ActionRecord(
            call_id=call_id, tool="t", effect="read", exact=f"e{k}", key=f"t:{k}", text="t()"
        )
        loop = loop.record(record)
        loop = governor.after_action(
            loop, call_id=call_id, effect="read", result=text, ctx=None, step=k
        )
    last = f"c{len(results)}"
    record = ActionRecord(
        call_id=last, tool="t", effect="read", exact="e", key="t:last", text="t()"
    )
    return loop.record(record), last


_RESULTS = st.text(alphabet="ab c", max_size=40).map(lambda s: s * 120)


@settings(max_examples=40, deadline=None)
@given(earlier=st.lists(_RESULTS, max_size=3), result=_RESULTS)
def test_after_action_settles_as_the_plain_settle(earlier: list[str], result: str) -> None:
    loop, call_id = _loop(earlier)
    twin, _ = _loop(earlier)
    observed = _GOVERNOR.after_action(
        loop, call_id=call_id, effect="read", result=result, ctx=None, step=9
    )
    assert type(observed) is LoopState
    settled = observed.actions[len(observed.actions) - 1]
    assert type(settled) is ActionRecord
    assert settled.result == result[:_RESULT_CHARS]
    changes = twin._settled(call_id, "ok", result, settled.gain) or {}
    expected = twin._evolve(
        **changes, evidence=observed.evidence, low_gain_streak=observed.low_gain_streak
    )
    assert observed == expected
    assert list(observed.actions) == list(expected.actions)
    # LoopState._observed (the other evidence similarities' path) slices as well.
    third, _ = _loop(earlier)
    made = third._observed(call_id, result, settled.gain or 0.0, observed.evidence, 0)
    assert made is not None
    assert made.actions[len(made.actions) - 1].result == result[:_RESULT_CHARS]
    assert list(made.actions) == list(observed.actions)
