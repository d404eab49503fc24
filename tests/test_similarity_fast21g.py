"""``GramMasks.advance`` with comparisons of every kind between the advances (round 21 of
issue 23; the window kept without its masks while its index moved on was deleted with the
index, ``_Shared``, in round 24, these tests of the results kept): ``compared``, ``best``,
``_signed``, the masks cache emptied, another window size. Checked against the plain
computation (the set formula's float, :func:`lexical_similarity`'s), the window kept
always with its texts' own masks, and the one-size way against the general way."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity
from test_similarity_fast19g import _result, _set_best
from test_similarity_fast21a import _TEXT, _window

from statemachine._similarity import lexical_similarity

GramMasks = similarity.GramMasks

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")

# Between two advances: nothing, a comparison by compared or best, the window's masks and
# sizes read (_signed), the masks cache emptied (the masks made again from the
# vocabulary), or the next advance of another window size.
_BETWEEN = st.sampled_from(
    ("none", "none", "none", "compared", "best", "signed", "emptied", "size")
)


# Mostly the bench's results of one size (keys of three digits: windows of one size), and
# any other text.
_ALIKE = st.builds(_result, st.integers(100, 999))
_MOSTLY = st.one_of(_ALIKE, _ALIKE, _ALIKE, _ALIKE, _TEXT)


@settings(max_examples=250, deadline=None)
@given(st.lists(st.tuples(_MOSTLY, _BETWEEN, _MOSTLY), min_size=1, max_size=70), st.integers(1, 9))
def test_comparisons_between_the_advances(steps: list[tuple[str, str, str]], size: int) -> None:
    """Any results, any window; between the advances any of what reads a window's masks:
    each best is the set formula's float, each window the masks read are its texts' own."""
    masks, window = GramMasks(), tuple[str, ...]()
    for result, between, other in steps:
        now = size + 1 if between == "size" else size
        best, after = masks.advance(window, result, result, now)
        plain = window[-now:]
        assert best == _set_best(plain, result)
        assert after == (*plain, result)[-now:]
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
        window = after
    _window(masks, window)


def test_a_result_without_what_all_hold() -> None:
    """A window of one size, then results that lack what all hold, of another size, that
    share little: each the set formula's float."""
    texts = [_result(key) for key in range(100, 150)]
    masks, window = GramMasks(), tuple[str, ...]()
    for result in texts:
        best, window = masks.advance(window, result, result, 16)
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
# (one digit, five digits): windows of one size, then a text of another size.
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
)
def test_the_one_size_way_is_the_general_way(results: list[str], size: int) -> None:
    """Every best of the one-size way the general way's (the ranks, never the one-size
    way) and the set formula's float, with texts of other sizes entering the window."""
    fast, general = GramMasks(), GramMasks()
    window = tuple[str, ...]()

    def never(sizes: tuple[float, ...], first: float) -> int:
        return -1

    other = window
    for result in results:
        best, after = fast.advance(window, result, result, size)
        with mock.patch.object(similarity, "_COUNT", never):
            theirs, again = general.advance(other, result, result, size)
        assert best == theirs == _set_best(window[-size:], result)
        assert after == again
        window, other = after, again
    _window(fast, window)
    _window(general, other)


def test_a_text_of_another_size_in_a_window_of_one_size() -> None:
    """A window of one size, then a text of another size kept: the window after is of two
    sizes, and the comparisons after it count its sizes (the ranks) until the text of
    another size leaves it."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in range(100, 150):
        best, window = masks.advance(window, _result(key), _result(key), 8)
    for result in (_result(7), _result(151), _result(152), _result(12345), _result(153)):
        best, after = masks.advance(window, result, result, 8)
        assert best == _set_best(window[-8:], result)
        latest = masks._latest
        assert latest is not None
        assert len(set(latest[2])) > 1
        _window(masks, after)
        window = after
    for key in range(154, 170):
        best, after = masks.advance(window, _result(key), _result(key), 8)
        assert best == _set_best(window[-8:], _result(key))
        window = after
    latest = masks._latest
    assert latest is not None
    assert len(set(latest[2])) == 1
    _window(masks, window)
