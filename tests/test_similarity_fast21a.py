"""``GramMasks.advance`` finds a window of one size's highest shared count by its index
(round 21 of issue 23: ``_Shared``): what every text of the window holds, and for each
other trigram the texts that hold it as bytes of one sum, so a result's counts are one
AND for the common part and a sum over its few other trigrams, instead of an AND a text.
Checked against the plain computation (the cosine of the trigram sets, the float
:func:`lexical_similarity` gives) and the index's invariant at every step (each text's
own trigrams and nothing else in its byte of every sum): the bench's results, JSON with
changed numbers, texts that repeat (a kept mask), windows of mixed sizes (the index left
and built again), several window sizes on one vocabulary, results longer than the evidence
keeps, what all held lost (a text without it), texts of many trigrams of their own (no
index), the sums shifted down, and a vocabulary started again. And the window a full
window of one size moves on to when the text it keeps is of that size: the same sizes
and scales (the same values), only the masks moved on."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_similarity_fast19g import _result, _set_best

import statemachine._similarity as similarity
from statemachine._similarity import GramMasks, lexical_similarity


@pytest.fixture(autouse=True, scope="module")
def _indexed_windows() -> Iterator[None]:
    """The index on (``_SLOTS`` is 0 since round 24: advance counts by its loop), so that
    these tests check the index's code, kept for windows a patched ``_SLOTS`` takes."""
    with mock.patch.object(similarity, "_SLOTS", 64):
        yield


def _invariant(masks: GramMasks, window: tuple[str, ...]) -> None:
    """When ``masks`` keeps an index for ``window``: every text holds ``common``, and each
    sum's byte of each text of the window is 1 for the text's own trigrams (beyond
    ``common``), 0 for the others; no trigram of ``common`` has a sum."""
    index = masks._index
    if index is None or index.window is not window:
        return
    own = [masks.mask(text)[0] for text in window]
    common = index.common
    assert all(mask & common == common for mask in own)
    assert not any(common >> (bit - 1) & 1 for bit in index.spread)
    first = index.next - len(window) - index.base
    assert first >= 0
    bits = set(index.spread) | {
        bit for mask in own for bit in range(1, mask.bit_length() + 1) if mask >> (bit - 1) & 1
    }
    for place, mask in enumerate(own):
        shift = (first + place) << 3
        for bit in bits:
            held = index.spread.get(bit, 0) >> shift & 255
            mine = bool(mask >> (bit - 1) & 1) and not common >> (bit - 1) & 1
            assert held == mine, (place, bit)
    # No byte past the window's last text.
    assert all(found >> ((first + len(window)) << 3) == 0 for found in index.spread.values())


def _window(masks: GramMasks, window: tuple[str, ...]) -> None:
    """The window ``masks`` keeps is ``window`` with each text's own mask, size (its
    float) and scale (1.0 / its size's root), in order; a window of one size holds one
    float object when its size is below _SIZED."""
    kept = masks._window
    assert kept is not None
    assert kept[0] is window
    own = [masks.mask(text) for text in window]
    assert kept[1] == tuple(mask for mask, _ in own)
    assert kept[2] == tuple(float(count) for _, count in own)
    assert kept[3] == tuple(1.0 / math.sqrt(count) for _, count in own)
    if len(set(kept[2])) == 1 and kept[2][0] < similarity._SIZED:
        assert len(set(map(id, kept[2]))) == 1


def _run(results: list[str], size: int, cut: int = 0, start: bool = False) -> GramMasks:
    """Advance a fresh GramMasks over ``results`` (kept texts ``cut`` characters shorter),
    checking each best against the set formula and the index against its invariant."""
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
        _invariant(masks, after)
        _window(masks, after)
        window = after
    return masks


# The bench's results (alike but for their key: the index's case), JSON with a changed
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
@given(
    st.lists(_TEXT, min_size=1, max_size=60),
    st.integers(1, 9),
    st.integers(0, 2),
    st.integers(0, 3),
    st.integers(1, 4),
    st.integers(1, 13),
)
def test_each_best_is_the_set_formula(
    results: list[str], size: int, cut: int, retry: int, shifted: int, sparse: int
) -> None:
    """Any results (repeats among them), any window, kept texts shorter than their
    results, the index built again soon or late, its sums shifted down often, texts of
    few or many trigrams of their own: each best is the set formula's float, and the
    index holds its invariant at every step."""
    with (
        mock.patch.object(similarity, "_RETRY", retry),
        mock.patch.object(similarity, "_SHIFTED", shifted),
        mock.patch.object(similarity, "_SPARSE", sparse),
    ):
        _run(results, size, cut)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2500), min_size=1, max_size=90), st.integers(1, 40))
def test_the_bench_run(keys: list[int], size: int) -> None:
    """The bench's results (any keys, repeated or not, of one to four digits: windows of
    one size and of several): the set formula's floats, the index kept through them."""
    _run([_result(key) for key in keys], size)


@settings(max_examples=60, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=25), st.integers(1, 6))
def test_a_vocabulary_started_again_at_every_comparison(results: list[str], size: int) -> None:
    """The vocabulary (and the index with it) started again before every comparison."""
    with mock.patch.object(similarity, "_FLOOR", 0), mock.patch.object(similarity, "_GROWTH", 0):
        _run(results, size, start=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_TEXT, st.integers(1, 7)), min_size=1, max_size=40))
def test_window_sizes_that_change(steps: list[tuple[str, int]]) -> None:
    """One vocabulary, the window's size changed between comparisons (an index of another
    size is not used): the set formula's floats."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result, size in steps:
        best, after = masks.advance(window, result, result, size)
        assert best == _set_best(window[-size:], result)
        _invariant(masks, after)
        _window(masks, after)
        window = after


def test_the_index_takes_the_bench_run() -> None:
    """The bench's run (600 results) compares by the index: one is kept at the end, for
    the window last made, and its sums were shifted down (numbered past 64)."""
    masks = _run([_result(key) for key in range(600)], 32)
    index = masks._index
    assert index is not None
    assert index.base > 0
    assert len(index.spread) < 32 * 13


def test_what_all_held_lost_and_texts_of_their_own() -> None:
    """A text without a trigram all the others hold (it becomes each one's own), then
    texts with many trigrams of their own (the index left, and built again later)."""
    texts = [_result(key) for key in range(100, 140)]
    texts[20] = texts[20].replace("widgets", "gadgets")
    texts[30:33] = ["qwertyuiopasdfgh", "zxcvbnmlkjhg", "poiuytrewq0987"]
    for size in (1, 4, 32):
        _run(texts + texts[:10], size)
    with mock.patch.object(similarity, "_RETRY", 0):
        _run(texts, 8)


def test_no_index_for_texts_of_many_trigrams_of_their_own() -> None:
    """Texts of one size: a text without what all the others hold (more of it than an
    index takes: the index left), and a window whose texts share nothing (none built)."""
    texts = ["abcdefgh", "abcdefgh", "stuvwxyz", "abcdefgh", "abcdefgz", "mnopqrst", "abcdefgh"]
    built: list[object] = []
    moved: list[object] = []
    indexed, moved_on = similarity._indexed, similarity._moved

    def _built(*args: Any) -> Any:
        built.append(found := indexed(*args))
        return found

    def _moved(*args: Any) -> Any:
        moved.append(found := moved_on(*args))
        return found

    with (
        mock.patch.object(similarity, "_SPARSE", 2),
        mock.patch.object(similarity, "_RETRY", 0),
        mock.patch.object(similarity, "_indexed", _built),
        mock.patch.object(similarity, "_moved", _moved),
    ):
        _run(texts, 4)
    assert None in built
    assert None in moved
    assert any(found is not None for found in built)
