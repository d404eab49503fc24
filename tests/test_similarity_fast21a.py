"""``GramMasks.advance`` against the plain computation (the cosine of the trigram sets, the
float :func:`lexical_similarity` gives) at every step (round 21 of issue 23; its shared
counts' index, ``_Shared``, was deleted in round 24, these tests of the results kept): the
bench's results, JSON with changed numbers, texts that repeat (a kept mask), windows of
mixed sizes, several window sizes on one vocabulary, results longer than the evidence
keeps, a text without what all the others hold, texts of many trigrams of their own, and
a vocabulary started again. And the window a full window of one size moves on to when the
text it keeps is of that size: the same sizes (the same values), only the
masks moved on."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

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


def _window(masks: GramMasks, window: tuple[str, ...]) -> None:
    """The window ``masks`` keeps is ``window`` with each text's own mask, size (its
    float), in order; a window of one size holds one
    float object when its size is below _SIZED."""
    kept = masks._window
    assert kept is not None
    assert kept[0] is window
    own = [masks.mask(text) for text in window]
    assert kept[1] == tuple(mask for mask, _ in own)
    assert kept[2] == tuple(float(count) for _, count in own)
    if len(set(kept[2])) == 1 and kept[2][0] < similarity._SIZED:
        assert len(set(map(id, kept[2]))) == 1


def _run(results: list[str], size: int, cut: int = 0, start: bool = False) -> GramMasks:
    """Advance a fresh GramMasks over ``results`` (kept texts ``cut`` characters shorter),
    checking each best against the set formula and the window kept."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result in results:
        if start:
            masks.start(size)
        kept = result[: len(result) - cut] if cut and len(result) > cut else result
        best, after = masks.advance(window, result, kept, size)
        plain = window[-size:]
        assert best == _set_best(plain, result)
        if plain:
            assert best == max(lexical_similarity(result, seen) for seen in plain)
        assert after == (*plain, kept)[-size:]
        _window(masks, after)
        window = after
    return masks


# The bench's results (alike but for their key: a window of one size), JSON with a changed
# value, keys of another length (a window of mixed sizes), texts that share little, words.
_KEYED = st.builds(_result, st.integers(0, 3000))
_TEXT = st.one_of(
    _KEYED,
    _KEYED,
    st.builds(_result, st.integers(0, 40), st.integers(0, 9)),
    st.builds(_result, st.integers(1000, 1030), st.integers(40, 45)),
    st.text(alphabet="abcdef", min_size=1, max_size=12),
    st.lists(st.text(alphabet="ab1x", min_size=1, max_size=4), min_size=2, max_size=4).map(
        " ".join
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=60), st.integers(1, 9), st.integers(0, 2))
def test_each_best_is_the_set_formula(results: list[str], size: int, cut: int) -> None:
    """Any results (repeats among them), any window, kept texts shorter than their
    results: each best is the set formula's float, the window kept its texts' own."""
    _run(results, size, cut)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2500), min_size=1, max_size=90), st.integers(1, 40))
def test_the_bench_run(keys: list[int], size: int) -> None:
    """The bench's results (any keys, repeated or not, of one to four digits: windows of
    one size and of several): the set formula's floats."""
    _run([_result(key) for key in keys], size)


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=25), st.integers(1, 6))
def test_a_vocabulary_started_again_at_every_comparison(results: list[str], size: int) -> None:
    """The vocabulary started again before every comparison."""
    with mock.patch.object(similarity, "_FLOOR", 0), mock.patch.object(similarity, "_GROWTH", 0):
        _run(results, size, start=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.integers(1, 7)), min_size=1, max_size=40))
def test_window_sizes_that_change(steps: list[tuple[str, int]]) -> None:
    """One vocabulary, the window's size changed between comparisons (an index of another
    size compared): the set formula's floats."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result, size in steps:
        best, after = masks.advance(window, result, result, size)
        assert best == _set_best(window[-size:], result)
        _window(masks, after)
        window = after


def test_what_all_held_lost_and_texts_of_their_own() -> None:
    """A text without a trigram all the others hold, then texts with many trigrams of
    their own."""
    texts = [_result(key) for key in range(100, 140)]
    texts[20] = texts[20].replace("widgets", "gadgets")
    texts[30:33] = ["qwertyuiopasdfgh", "zxcvbnmlkjhg", "poiuytrewq0987"]
    for size in (1, 4, 32):
        _run(texts + texts[:10], size)
    _run(texts, 8)


def test_texts_of_many_trigrams_of_their_own() -> None:
    """Texts of one size: a text without what all the others hold, and a window whose
    texts share nothing."""
    texts = ["abcdefgh", "abcdefgh", "stuvwxyz", "abcdefgh", "abcdefgz", "mnopqrst", "abcdefgh"]
    for size in (1, 2, 4):
        _run(texts, size)
