"""The convergence check works a window of several sizes out by a plain loop (round 24 of
issue 23): the formula for each pair that shares a trigram, the highest kept, instead of
ranking the pairs by one multiply, sorting the ranks and working the formula out near the
highest (``_nearest``): ``advance``'s general way, ``_highest`` (``best``) and
``compared``. The same float: checked against ``_highest`` on the window's own masks and
sizes, against the set formula and against :func:`lexical_similarity`, with windows of
several sizes whose pairs tie or nearly tie (texts of a small alphabet, the bench's
results as their keys grow a digit, a result alike but for its key, a result shorter than
the evidence keeps of it), and ``compared`` and ``best`` on the same windows."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._grams import GramMasks, _highest
from statemachine._similarity import lexical_similarity, trigrams


def _result(key: int, value: int = 42) -> str:
    """A tool's JSON result, as the in-memory bench's: alike but for its key."""
    return json.dumps({"key": f"k{key}", "value": value, "unit": "widgets"}, separators=(",", ":"))


def _set_best(window: tuple[str, ...], result: str) -> float:
    """The highest cosine of ``result``'s trigram set with each text's of ``window``."""
    mine = trigrams(result)
    return max(
        (
            len(mine & trigrams(seen)) / math.sqrt(len(mine) * len(trigrams(seen)))
            for seen in window
        ),
        default=0.0,
    )


def _run(results: list[str], size: int, cut: int = 0) -> int:
    """Advance a fresh GramMasks over ``results`` (kept texts ``cut`` characters shorter):
    each best is ``_highest``'s on the window's masks, the set formula's and
    lexical_similarity's. How many windows were of several sizes."""
    masks, window = GramMasks(), tuple[str, ...]()
    mixed = 0
    for result in results:
        kept = result[: len(result) - cut] if cut and len(result) > cut else result
        plain = window[-size:]
        before = masks._window
        best, after = masks.advance(window, result, kept, size)
        assert best == _set_best(plain, result)
        if plain:
            assert best == max(lexical_similarity(result, seen) for seen in plain)
            assert before is not None
            assert before[0] == plain
            mine, count = masks.mask(result)
            assert best == _highest(mine, count, before[1], before[2])
            mixed += len(set(before[2])) > 1
        assert after == (*plain, kept)[-size:]
        if after:
            other = GramMasks()
            assert other.compared(result, after, size) == _set_best(after, result)
            assert other.best(kept, after) == _set_best(after, kept)
            assert masks.best(result, after) == _set_best(after, result)
        window = after
    return mixed


# Texts of a small alphabet (many pairs of other sizes sharing as much: ties and near
# ties), the bench's results of keys of one to four digits, results with another value,
# words.
_TEXT = st.one_of(
    st.text(alphabet="abc", min_size=1, max_size=9),
    st.text(alphabet="abcd", min_size=3, max_size=14),
    st.builds(_result, st.integers(0, 2000)),
    st.builds(_result, st.integers(5, 15), st.integers(0, 120)),
    st.lists(st.text(alphabet="ab1", min_size=1, max_size=3), min_size=2, max_size=4).map(" ".join),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=60), st.integers(1, 12), st.integers(0, 2))
def test_each_best_of_a_window_of_several_sizes(results: list[str], size: int, cut: int) -> None:
    """Any results, any window: each best is _highest's, the set formula's and
    lexical_similarity's float."""
    _run(results, size, cut)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="ab", min_size=2, max_size=8), min_size=2, max_size=40),
    st.integers(2, 8),
)
def test_texts_of_two_letters(results: list[str], size: int) -> None:
    """Texts of two letters: few trigrams, pairs of several sizes with the same shared
    count and the same value nearly always."""
    _run(results, size)


def test_the_bench_run_as_its_keys_grow() -> None:
    """The bench's results from key 0 to 1,100 (window 32): the windows of two sizes after
    keys 10, 100 and 1,000, each best the same float."""
    assert _run([_result(key) for key in range(1100)], 32) >= 90


def test_ties_of_several_sizes() -> None:
    """Windows whose texts of two sizes share as much with the result, and whose value is
    the same or nearly (the highest the first, the last, or between)."""
    texts = ["abcabc", "abcabcd", "xabcabc", "abcab", "abcabcabcd", "bcabca", "cab", "abcd"]
    for size in (2, 3, 5, 8):
        for start in range(len(texts)):
            order = texts[start:] + texts[:start]
            _run(order + order[::-1], size)
