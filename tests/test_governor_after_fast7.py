"""GramMasks._scaled splits its texts' masks and counts with one zip in C (round 12 of
issue 23): the masks, sizes and scales it keeps for a window are those of each text's
own ``mask``, one by one, in order, for windows of cached texts, texts not seen before,
repeats and the empty window."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._similarity import GramMasks

_WORDS = st.sampled_from(["stock", "password", "gift", "a", "export", "x1", "result", "7:"])
_TEXTS = st.lists(_WORDS, min_size=1, max_size=6).map(" ".join)


def _plain(
    window: tuple[str, ...], cached: list[bool]
) -> tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]:
    """Each text's mask, size and scale by ``mask`` alone, on caches of their own given
    the same texts first (so the same bits)."""
    masks = GramMasks()
    for text, first in zip(window, cached, strict=False):
        if first:
            masks.mask(text)
    theirs = [masks.mask(text) for text in window]
    sizes = tuple(float(count) for _, count in theirs)
    return (
        tuple(mask for mask, _ in theirs),
        sizes,
        tuple(1.0 / math.sqrt(size) for size in sizes),
    )


@settings(max_examples=150, deadline=None)
@given(
    window=st.lists(_TEXTS, max_size=12).map(tuple),
    cached=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_scaled_is_each_texts_mask(window: tuple[str, ...], cached: list[bool]) -> None:
    masks = GramMasks()
    # Some texts' masks made (and cached) first, in the window's order so that the bits
    # are given as _plain gives them; the rest made by _scaled itself.
    for text, first in zip(window, cached, strict=False):
        if first:
            masks.mask(text)
    scaled = masks._scaled(window)
    expected = _plain(window, cached)
    assert scaled == expected
    assert [type(size) for size in scaled[1]] == [float] * len(window)
    assert [type(part) for part in scaled] == [tuple] * 3
    # Kept for the window, and read back as kept.
    assert masks._window is not None
    assert masks._window[0] is window
    assert masks._scaled(window) == expected
    assert masks._signed(window) == expected[:2]


def test_empty_window() -> None:
    masks = GramMasks()
    assert masks._scaled(()) == ((), (), ())


def test_repeats_and_bits() -> None:
    masks = GramMasks()
    window = ("a b", "stock gift", "a b", "result 7:", "stock gift")
    found, sizes, scales = masks._scaled(window)
    assert found[0] == found[2]
    assert found[1] == found[4]
    assert sizes == tuple(float(mask.bit_count()) for mask in found)
    assert scales == tuple(1.0 / math.sqrt(size) for size in sizes)


@settings(max_examples=60, deadline=None)
@given(window=st.lists(_TEXTS, min_size=1, max_size=12).map(tuple))
def test_scaled_of_cached_texts(window: tuple[str, ...]) -> None:
    # Every text's mask cached (found as it is), and a window of the same texts made
    # again (a new tuple): the masks the cache holds, in the window's order.
    masks = GramMasks()
    theirs = [masks.mask(text) for text in window]
    again = tuple(list(window))
    found, sizes, scales = masks._scaled(again)
    assert list(zip(found, map(int, sizes), strict=True)) == theirs
    assert scales == tuple(1.0 / math.sqrt(size) for size in sizes)
    assert masks._scaled(again[::-1])[0] == found[::-1]
