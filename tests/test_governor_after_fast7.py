"""GramMasks._signed splits its texts' masks and counts with one zip in C (round 12 of
issue 23, then ``_scaled``; round 24 keeps no scales): the masks and sizes it keeps for a
window are those of each text's own ``mask``, one by one, in order, for windows of cached
texts, texts not seen before, repeats and the empty window."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._grams import GramMasks

_WORDS = st.sampled_from(["stock", "password", "gift", "a", "export", "x1", "result", "7:"])
_TEXTS = st.lists(_WORDS, min_size=1, max_size=6).map(" ".join)


def _plain(
    window: tuple[str, ...], cached: list[bool]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Each text's mask and size by ``mask`` alone, on caches of their own given the same
    texts first (so the same bits)."""
    masks = GramMasks()
    for text, first in zip(window, cached, strict=False):
        if first:
            masks.mask(text)
    theirs = [masks.mask(text) for text in window]
    return tuple(mask for mask, _ in theirs), tuple(float(count) for _, count in theirs)


@settings(max_examples=150, deadline=None)
@given(
    window=st.lists(_TEXTS, max_size=12).map(tuple),
    cached=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_signed_is_each_texts_mask(window: tuple[str, ...], cached: list[bool]) -> None:
    masks = GramMasks()
    # Some texts' masks made (and cached) first, in the window's order so that the bits
    # are given as _plain gives them; the rest made by _signed itself.
    for text, first in zip(window, cached, strict=False):
        if first:
            masks.mask(text)
    signed = masks._signed(window)
    expected = _plain(window, cached)
    assert signed == expected
    assert [type(size) for size in signed[1]] == [float] * len(window)
    assert [type(part) for part in signed] == [tuple] * 2
    # Kept for the window, and read back as kept.
    assert masks._window is not None
    assert masks._window[0] is window
    assert masks._signed(window) == expected


def test_empty_window() -> None:
    masks = GramMasks()
    assert masks._signed(()) == ((), ())


def test_repeats_and_bits() -> None:
    masks = GramMasks()
    window = ("a b", "stock gift", "a b", "result 7:", "stock gift")
    found, sizes = masks._signed(window)
    assert found[0] == found[2]
    assert found[1] == found[4]
    assert sizes == tuple(float(mask.bit_count()) for mask in found)


@settings(max_examples=60, deadline=None)
@given(window=st.lists(_TEXTS, min_size=1, max_size=12).map(tuple))
def test_signed_of_cached_texts(window: tuple[str, ...]) -> None:
    # Every text's mask cached (found as it is), and a window of the same texts made
    # again (a new tuple): the masks the cache holds, in the window's order.
    masks = GramMasks()
    theirs = [masks.mask(text) for text in window]
    again = tuple(list(window))
    found, sizes = masks._signed(again)
    assert list(zip(found, map(int, sizes), strict=True)) == theirs
    assert masks._signed(again[::-1])[0] == found[::-1]
