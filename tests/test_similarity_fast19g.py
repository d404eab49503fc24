"""``GramMasks.advance`` finds a window's highest shared count, and its ranks, by a loop
over the window's masks instead of ``map`` over ``and_`` and ``int.bit_count`` (round 19
of issue 23). Checked against the plain computation (the cosine of the trigram sets, the
float :func:`lexical_similarity` gives) and a twin kept to the general way: windows of
one size and of several, of one text, texts that share nothing with the result, the best
text anywhere in the window (first, last, several of them: ties), results longer than the
evidence keeps, and a vocabulary started again at every comparison."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import json
import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity

from statemachine._similarity import lexical_similarity, trigrams

GramMasks = similarity.GramMasks

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _result(key: int, value: int = 42) -> str:
    """A tool's JSON result, as the in-memory bench's: alike but for its key."""
    return json.dumps({"key": f"k{key}", "value": value, "unit": "widgets"}, separators=(",", ":"))


def _set_best(window: tuple[str, ...], result: str) -> float:
    """The highest cosine of ``result``'s trigram set with each text's of ``window``."""
    if not window:
        return 0.0
    mine = trigrams(result)
    return max(
        len(mine & trigrams(seen)) / math.sqrt(len(mine) * len(trigrams(seen))) for seen in window
    )


def _never_one_size(sizes: tuple[float, ...], first: float) -> int:
    """A count no window has: advance takes the general way (its ranks)."""
    return -1


def _long(key: int, numbers: int) -> str:
    """A result and then the numbers below ``numbers``: a long text of many words (up to
    ~2,700 characters, more than the evidence keeps of a result)."""
    return _result(key) + " ".join(map(str, range(numbers)))


# Texts of four characters from two alphabets that share nothing (each text four
# trigrams... or fewer, with repeats), results of the bench's shape, long texts.
_FOUR = st.text(alphabet="abcd", min_size=4, max_size=4)
_OTHER = st.text(alphabet="wxyz", min_size=4, max_size=4)
_LONG = st.builds(_long, st.integers(0, 99), st.integers(0, 700))
_TEXT = st.one_of(
    _FOUR,
    _OTHER,
    st.builds(_result, st.integers(1000, 1040)),
    st.builds(_result, st.integers(0, 10**5), st.integers(0, 3)),
    st.text(alphabet='0123456789,:"{}kK\u0130\u00c9 ', max_size=14),
    _LONG,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_TEXT, max_size=8),
    st.lists(_TEXT, min_size=1, max_size=30),
    st.integers(1, 9),
    st.integers(0, 3),
)
def test_each_best_is_the_set_formula(
    evidence: list[str], results: list[str], size: int, cut: int
) -> None:
    """Any texts, any window (one text included), kept texts shorter than their results:
    each best is the set formula's float, as the general way's twin gives it."""
    fast, general = GramMasks(), GramMasks()
    window = tuple(evidence)
    for result in results:
        kept = result[: len(result) - cut] if cut and len(result) > cut else result
        plain = window[-size:]
        best, after = fast.advance(window, result, kept, size)
        with mock.patch.object(similarity, "_COUNT", _never_one_size):
            theirs, again = general.advance(window, result, kept, size)
        assert best == theirs == _set_best(plain, result)
        assert after == again == (*plain, kept)[-size:]
        window = after


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_FOUR, _OTHER), min_size=1, max_size=12),
    st.one_of(_FOUR, _OTHER),
    st.integers(1, 12),
    st.booleans(),
)
def test_one_size_windows_find_the_best_anywhere(
    evidence: list[str], result: str, size: int, general_way: bool
) -> None:
    """Windows of texts of one alphabet or the other (a result of the other shares
    nothing: 0.0), the best text first, last, in between or several times: the set
    formula's float, whether the window is of one size (the loop over its counts) or not
    (the ranks)."""
    masks = GramMasks()
    window = masks.advance((), evidence[0], evidence[0], size)[1]
    for text in evidence[1:]:
        window = masks.advance(window, text, text, size)[1]
    plain = window[-size:]
    if general_way:
        with mock.patch.object(similarity, "_COUNT", _never_one_size):
            best, _ = masks.advance(window, result, result, size)
    else:
        best, _ = masks.advance(window, result, result, size)
    assert best == _set_best(plain, result)
    if not any(set(result) & set(seen) for seen in plain):
        assert best == 0.0
    if result in plain:
        assert best == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1000, 1040), min_size=2, max_size=50), st.integers(1, 32))
def test_the_bench_run_with_its_best_anywhere(keys: list[int], size: int) -> None:
    """The bench's results, keys repeated now and then (the best text anywhere in the
    window, equal texts among them): the set formula's float and lexical_similarity's."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in keys:
        result = _result(key)
        best, after = masks.advance(window, result, result, size)
        assert best == _set_best(window[-size:], result)
        if window:
            assert best == max(lexical_similarity(result, seen) for seen in window[-size:])
        window = after


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=20), st.integers(1, 6))
def test_a_vocabulary_started_again_at_every_comparison(results: list[str], size: int) -> None:
    """With the vocabulary started again at every comparison (the window's masks made
    again from its texts), each best is still the set formula's."""
    masks, window = GramMasks(), tuple[str, ...]()
    with mock.patch.object(similarity, "_FLOOR", 0), mock.patch.object(similarity, "_GROWTH", 0):
        for result in results:
            best, after = masks.advance(window, result, result, size)
            assert best == _set_best(window[-size:], result)
            window = after


def test_a_window_of_texts_sharing_nothing() -> None:
    """A window of one size whose texts share no trigram with the result: 0.0 (the
    loop's highest count starts at none), then a text that shares: its cosine."""
    masks, window = GramMasks(), tuple[str, ...]()
    for text in ("abcd", "bcda", "cdab"):
        window = masks.advance(window, text, text, 3)[1]
    best, window = masks.advance(window, "wxyz", "wxyz", 3)
    assert best == 0.0
    best, _ = masks.advance(window, "dabw", "dabw", 3)
    assert best == _set_best(("bcda", "cdab", "wxyz"), "dabw") == 0.5
