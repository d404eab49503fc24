"""``GramMasks.advance`` compares the window's masks with the result's mask without the
bits of the trigrams the result brought to the vocabulary (round 20 of issue 23): no mask
made before the result's holds them, so each shared count is the whole mask's. Checked
against the plain computation (the cosine of the trigram sets, the float
:func:`lexical_similarity` gives): the result's newest older trigram the one shared, new
trigrams alone, a result seen before (its kept mask), texts of several words, a
vocabulary started again at the comparison (the window's masks made again first), a wide
vocabulary, results longer than the evidence keeps; and the invariant it rests on (every
mask as narrow as the vocabulary)."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity
from test_similarity_fast19g import _result, _set_best

from statemachine._similarity import lexical_similarity

GramMasks = similarity.GramMasks

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _narrow(masks: GramMasks) -> None:
    """Every mask the window keeps, and every text's kept mask, holds bits of the
    vocabulary alone (below its size): what the result's comparison relies on."""
    size = len(masks._bits)
    window = masks._window
    assert window is not None
    assert all(mask.bit_length() <= size for mask in window[1])
    assert all(mask.bit_length() <= size for mask, _ in masks.masks.values())


def _numbers(count: int) -> str:
    """The numbers below ``count``, one word each: a long text of many words."""
    return " ".join(map(str, range(count)))


# Short texts of a few letters (trigrams recur, and new ones come now and then), the
# bench's results, JSON with a changed number, words, and long texts.
_FEW = st.text(alphabet="abcde", min_size=1, max_size=9)
_WORDS = st.lists(st.text(alphabet="abcx1", min_size=1, max_size=5), min_size=2, max_size=5).map(
    " ".join
)
_TEXT = st.one_of(
    _FEW,
    _WORDS,
    st.builds(_result, st.integers(0, 3000)),
    st.builds(_result, st.integers(0, 20), st.integers(0, 5)),
    st.text(alphabet='0123456789,:"{}k ', max_size=16),
    st.builds(_numbers, st.integers(0, 800)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=30), st.integers(1, 9), st.integers(0, 3))
def test_each_best_is_the_set_formula(results: list[str], size: int, cut: int) -> None:
    """Any results (repeats among them: their kept masks), any window, kept texts shorter
    than their results: each best is the set formula's float, lexical_similarity's, and
    every kept mask stays within the vocabulary."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result in results:
        kept = result[: len(result) - cut] if cut and len(result) > cut else result
        best, after = masks.advance(window, result, kept, size)
        plain = window[-size:]
        assert best == _set_best(plain, result)
        if plain:
            assert best == max(lexical_similarity(result, seen) for seen in plain)
        assert after == (*plain, kept)[-size:]
        _narrow(masks)
        window = after


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=20), st.integers(1, 6))
def test_a_vocabulary_started_again_at_every_comparison(results: list[str], size: int) -> None:
    """The vocabulary started again at every comparison: the window's masks are made
    again before the result's, so the result's new trigrams are still in none of them."""
    masks, window = GramMasks(), tuple[str, ...]()
    with mock.patch.object(similarity, "_FLOOR", 0), mock.patch.object(similarity, "_GROWTH", 0):
        for result in results:
            best, after = masks.advance(window, result, result, size)
            assert best == _set_best(window[-size:], result)
            window = after


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=20), st.integers(1, 6))
def test_a_wide_vocabulary(results: list[str], size: int) -> None:
    """Past the narrow vocabulary (every mask made by the wide makers): the same floats."""
    masks, window = GramMasks(), tuple[str, ...]()
    with mock.patch.object(similarity, "_NARROW_BITS", 2):
        for result in results:
            best, after = masks.advance(window, result, result, size)
            assert best == _set_best(window[-size:], result)
            _narrow(masks)
            window = after


def test_the_newest_older_trigram_is_the_one_shared() -> None:
    """The result's one older trigram is the vocabulary's newest (the highest bit below
    the result's own): it is compared, so the result is not taken for new."""
    masks = GramMasks()
    _, window = masks.advance((), "xyz", "xyz", 4)
    best, window = masks.advance(window, "xyzw", "xyzw", 4)
    assert best == _set_best(("xyz",), "xyzw") == 1 / math.sqrt(2)
    # Again with an older vocabulary: the window's last text brought the newest trigram.
    best, window = masks.advance(window, "qrsa", "qrsa", 4)
    assert best == 0.0
    best, _ = masks.advance(window, "rsat", "rsat", 4)
    assert best == _set_best(("xyz", "xyzw", "qrsa"), "rsat") == 0.5


def test_new_trigrams_alone_and_a_result_seen_before() -> None:
    """A result of new trigrams alone shares nothing (0.0); the same result again is
    compared by its kept mask (1.0), and so is a window's text."""
    masks = GramMasks()
    _, window = masks.advance((), "abcd", "abcd", 3)
    best, window = masks.advance(window, "wxyz", "wxyz", 3)
    assert best == 0.0
    best, window = masks.advance(window, "wxyz", "wxyz", 3)
    assert best == 1.0
    best, _ = masks.advance(window, "abcd", "abcd", 3)
    assert best == 1.0


def test_the_bench_run() -> None:
    """The bench's run: each result's new number compared with the window's, 600 calls."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in range(600):
        result = _result(key)
        best, after = masks.advance(window, result, result, 32)
        assert best == _set_best(window, result)
        window = after
    _narrow(masks)
