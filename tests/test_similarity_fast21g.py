"""``GramMasks.advance`` keeps no masks for a full window of one size while the window's
index (``_Shared``) moves on with it (round 21 of issue 23): the next comparison counts by
the index, so the masks tuple (the window's but its oldest, and the kept text's) is not
made; ``_latest`` holds None for them, and whatever reads them (``_window``, ``_scaled``,
``compared``, ``best``, a comparison without that index: another size, the index left,
a result that lacks what all hold) makes them again. Checked against the plain
computation (the set formula's float, :func:`lexical_similarity`'s) with comparisons of
every kind between the advances, the masks cache emptied, and the masks made again equal
to each text's own."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import math
from collections.abc import Iterator
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_similarity_fast19g import _result, _set_best
from test_similarity_fast21a import _TEXT, _invariant, _window

import statemachine._similarity as similarity
from statemachine._similarity import GramMasks, lexical_similarity


@pytest.fixture(autouse=True, scope="module")
def _indexed_windows() -> Iterator[None]:
    """The index on (``_SLOTS`` is 0 since round 24: advance counts by its loop), so that
    these tests check the index's code, kept for windows a patched ``_SLOTS`` takes."""
    with mock.patch.object(similarity, "_SLOTS", 64):
        yield


def _lazy(masks: GramMasks, window: tuple[str, ...]) -> bool:
    """Whether ``masks`` keeps ``window`` without its masks; then its index moved on with
    it and its sizes are one float, its scales that float's."""
    latest = masks._latest
    assert latest is not None
    assert latest[0] is window
    if latest[1] is not None:
        return False
    index = masks._index
    assert index is not None
    assert index.window is window
    assert len(window) == index.size
    sizes, scales = latest[2], latest[3]
    assert len(sizes) == len(scales) == len(window)
    assert len(set(sizes)) == 1
    assert all(scale == 1.0 / math.sqrt(sizes[0]) for scale in scales)
    assert sizes[0] == masks.mask(window[-1])[1]
    return True


# Between two advances: nothing, a comparison by compared or best (the masks made again),
# the window's masks and sizes read (_signed), the masks cache emptied (the masks made again
# from the vocabulary), or the next advance of another window size.
_BETWEEN = st.sampled_from(
    ("none", "none", "none", "compared", "best", "signed", "emptied", "size")
)


# Mostly the bench's results of one size (keys of three digits: windows of one size, kept
# without their masks), and any other text.
_ALIKE = st.builds(_result, st.integers(100, 999))
_MOSTLY = st.one_of(_ALIKE, _ALIKE, _ALIKE, _ALIKE, _TEXT)


@settings(max_examples=250, deadline=None)
@given(
    st.lists(st.tuples(_MOSTLY, _BETWEEN, _MOSTLY), min_size=1, max_size=70),
    st.integers(1, 9),
    st.integers(0, 3),
    st.integers(1, 4),
)
def test_masks_not_kept_are_made_again(
    steps: list[tuple[str, str, str]], size: int, retry: int, shifted: int
) -> None:
    """Any results, any window; between the advances any of what reads a window's masks:
    each best is the set formula's float, each window the masks read are its texts' own."""
    masks, window = GramMasks(), tuple[str, ...]()
    with (
        mock.patch.object(similarity, "_RETRY", retry),
        mock.patch.object(similarity, "_SHIFTED", shifted),
    ):
        for result, between, other in steps:
            now = size + 1 if between == "size" else size
            best, after = masks.advance(window, result, result, now)
            plain = window[-now:]
            assert best == _set_best(plain, result)
            assert after == (*plain, result)[-now:]
            _lazy(masks, after)
            _invariant(masks, after)
            if between == "compared":
                assert masks.compared(other, after, now) == _set_best(after, other)
            elif between == "best":
                assert masks.best(other, after) == max(
                    lexical_similarity(other, seen) for seen in after
                )
            elif between == "signed":
                found, sizes = masks._signed(after)
                assert found == tuple(masks.mask(text)[0] for text in after)
                assert sizes == tuple(float(masks.mask(text)[1]) for text in after)
            elif between == "emptied":
                masks.masks = {}
            _window(masks, after)
            window = after


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2500), min_size=1, max_size=90), st.integers(1, 40))
def test_the_bench_run_with_masks_emptied(keys: list[int], size: int) -> None:
    """The bench's results with the masks cache emptied before each comparison (every mask
    not kept made again from the vocabulary): the set formula's floats."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in keys:
        result = _result(key)
        masks.masks = {}
        best, after = masks.advance(window, result, result, size)
        assert best == _set_best(window[-size:], result)
        _lazy(masks, after)
        window = after
    _window(masks, window)


def test_the_bench_run_keeps_no_masks() -> None:
    """The bench's run: once its window is full and indexed, no masks are kept (each
    comparison by the index), and the window read makes them again, each text's own."""
    masks, window = GramMasks(), tuple[str, ...]()
    lazy = 0
    for key in range(300):
        result = _result(key)
        best, window = masks.advance(window, result, result, 32)
        assert best == _set_best(window[:-1][-32:], result) or key == 0
        lazy += _lazy(masks, window)
    assert lazy > 200
    assert masks._latest is not None
    assert masks._latest[1] is None
    _window(masks, window)
    assert masks._latest[1] is not None  # made again, and kept


def test_a_result_without_what_all_hold_after_masks_not_kept() -> None:
    """A window kept without its masks, then results the index does not take (one lacks
    what all hold, one of another size, one that shares little): each counted by the
    masks made again."""
    texts = [_result(key) for key in range(100, 150)]
    masks, window = GramMasks(), tuple[str, ...]()
    for result in texts:
        best, window = masks.advance(window, result, result, 16)
    assert _lazy(masks, window)
    for result in (
        texts[0].replace("widgets", "gadgets"),
        _result(7),
        "qwertyuiop",
        _result(151),
        _result(152),
    ):
        best, after = masks.advance(window, result, result, 16)
        assert best == _set_best(window[-16:], result)
        _window(masks, after)
        window = after


# Mostly the bench's results of one size (three digits), now and then one of another size
# (one digit, five digits): windows kept without their masks, then a text of another size.
_SIZES_MIXED = st.one_of(
    _ALIKE, _ALIKE, _ALIKE, _ALIKE, _ALIKE, _ALIKE, st.builds(_result, st.integers(0, 9))
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(_SIZES_MIXED, st.builds(_result, st.integers(10000, 99999))),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 9),
    st.integers(0, 3),
)
def test_a_window_kept_without_masks_skips_its_count(
    results: list[str], size: int, retry: int
) -> None:
    """A window kept without its masks takes the one-size way without counting its sizes
    (it is kept so only when of one size): never a window of several sizes, no count made
    for it, and every best the general way's (the ranks, never the one-size way) and the
    set formula's float, with texts of other sizes entering the window."""
    fast, general = GramMasks(), GramMasks()
    window = tuple[str, ...]()
    counted = 0
    real = similarity._COUNT

    def counting(sizes: tuple[float, ...], first: float) -> int:
        nonlocal counted
        counted += 1
        return real(sizes, first)

    def never(sizes: tuple[float, ...], first: float) -> int:
        return -1

    with mock.patch.object(similarity, "_RETRY", retry):
        for result in results:
            latest = fast._latest
            lazy = latest is not None and latest[1] is None
            if lazy:
                assert _lazy(fast, window)
            counted = 0
            with mock.patch.object(similarity, "_COUNT", counting):
                best, after = fast.advance(window, result, result, size)
            if lazy:
                assert counted == 0
            with mock.patch.object(similarity, "_COUNT", never):
                theirs, again = general.advance(window, result, result, size)
            assert best == theirs == _set_best(window[-size:], result)
            assert after == again
            window = after
    _window(fast, window)


def test_a_text_of_another_size_after_a_window_without_masks() -> None:
    """A window kept without its masks, then a text of another size kept: the window after
    is of two sizes and kept with its masks, and the comparisons after it count its sizes
    (the ranks) until the text of another size leaves it."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in range(100, 150):
        best, window = masks.advance(window, _result(key), _result(key), 8)
    assert _lazy(masks, window)
    for result in (_result(7), _result(151), _result(152), _result(12345), _result(153)):
        best, after = masks.advance(window, result, result, 8)
        assert best == _set_best(window[-8:], result)
        latest = masks._latest
        assert latest is not None
        assert latest[1] is not None
        assert len(set(latest[2])) > 1
        window = after
    for key in range(154, 170):
        best, after = masks.advance(window, _result(key), _result(key), 8)
        assert best == _set_best(window[-8:], _result(key))
        window = after
    assert _lazy(masks, window)
