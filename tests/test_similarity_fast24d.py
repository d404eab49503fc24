"""The convergence check counts by its loop (round 24 of issue 23).

``GramMasks.advance`` counts each text's shared trigrams by its loop (the shared counts'
index, ``_Shared``, was turned off by the clock in round 24 and then deleted). Checked
against the plain computation (the set formula's float, :func:`lexical_similarity`'s);
and through ``LoopGovernor.after_action`` against a governor whose similarity is a plain
function (the general path): the same gain, evidence, streak and settled record.
"""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import LoopGovernor, LoopState, read_tool
from statemachine._grams import GramMasks
from statemachine._similarity import lexical_similarity


def _result(key: int, value: int = 42) -> str:
    """A tool's JSON result, as the in-memory bench's: alike but for its key."""
    return json.dumps({"key": f"k{key}", "value": value, "unit": "widgets"}, separators=(",", ":"))


def _listed(key: int, items: list[str]) -> str:
    """A JSON result of another shape: an id and a list of words."""
    return json.dumps({"id": key, "items": items})


def _plain_best(window: tuple[str, ...], result: str) -> float:
    """The highest similarity of ``result`` to a text of ``window`` (0.0: none)."""
    return max((lexical_similarity(result, seen) for seen in window), default=0.0)


# The bench's results (keys of one, two and three digits: windows of one size and of
# several), results with another value, JSON of other shapes, words, and other text.
_TEXT = st.one_of(
    st.builds(_result, st.integers(0, 999)),
    st.builds(_result, st.integers(95, 130)),
    st.builds(_result, st.integers(0, 40), st.integers(0, 9)),
    st.builds(
        _listed,
        st.integers(0, 50),
        st.lists(st.text(alphabet="abcxyz", min_size=1, max_size=5), max_size=4),
    ),
    st.text(alphabet="abcdef", min_size=1, max_size=12),
    st.lists(st.text(alphabet="ab1x", min_size=1, max_size=4), min_size=2, max_size=4).map(
        " ".join
    ),
    st.text(alphabet='ab ,:"{}12\t', max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=80), st.integers(1, 40), st.integers(0, 30))
def test_each_best_is_the_plain_formula(results: list[str], size: int, cut: int) -> None:
    """Any results, any window: each best is the plain formula's float, each window the
    last ``size`` texts kept."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result in results:
        kept = result[:cut] if cut else result
        best, after = masks.advance(window, result, kept, size)
        assert best == _plain_best(window[-size:], result)
        assert after == (*window, kept)[-size:]
        window = after


def test_the_bench_run_is_counted_by_the_loop() -> None:
    """The bench's run (its results, the default window): every best the plain formula's."""
    results = [_result(key) for key in range(300)]
    masks, window = GramMasks(), tuple[str, ...]()
    for result in results:
        best, after = masks.advance(window, result, result, 32)
        assert best == _plain_best(window, result)
        window = after


class _Query(BaseModel):
    query: str


@read_tool
async def lookup(args: _Query) -> str:
    """Look a query up."""
    return args.query


def _settled(governor: LoopGovernor, results: list[str]) -> list[LoopState]:
    """Each state after_action makes from a call recorded with the next result."""
    loop, states = LoopState(), list[LoopState]()
    for n, result in enumerate(results):
        call = lookup.call({"query": f"q{n}"})
        action = governor.action(call, json.dumps({"query": f"q{n}"}), f"call-{n}")
        loop = governor.after_action(
            loop.record(action),
            call_id=f"call-{n}",
            effect="read",
            result=result,
            ctx=None,
            step=n,
        )
        states.append(loop)
    return states


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=50), st.integers(1, 40))
def test_after_action_is_the_general_path_s(results: list[str], size: int) -> None:
    """after_action by the masks (the loop) against a plain similarity function (the
    general path): the same gains, evidence, streaks and finalize reasons."""

    def plain(first: str, second: str) -> float:
        return lexical_similarity(first, second)

    fast = LoopGovernor(evidence_window=size, plateau_steps=4)
    general = LoopGovernor(evidence_window=size, plateau_steps=4, evidence_similarity=plain)
    for one, other in zip(_settled(fast, results), _settled(general, results), strict=True):
        assert one.evidence == other.evidence
        assert one.low_gain_streak == other.low_gain_streak
        assert one.finalize == other.finalize
        assert [a.gain for a in one.actions] == [a.gain for a in other.actions]
        assert list(one.actions) == list(other.actions)
