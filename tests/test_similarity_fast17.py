"""``GramMasks._pieced`` finds its pieces by cutting the text with ``str.split`` instead of
``_PIECES``, and ``GramMasks.advance`` compares a window whose texts are all of one size by
their shared counts alone, without ranks (round 17 of issue 23). Checked against the
regular expression's pieces, the masks made trigram by trigram, bit for bit, ``_highest``
on the same masks, the general way (ranks) on a twin, and the plain set computation (the
cosine of the trigram sets, the float :func:`lexical_similarity` gives): texts with many
digits (a run's results alike but for a number), unicode that folds, cut characters,
empty and repeated texts."""

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

_PIECES = similarity._PIECES
GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of
_highest = similarity._highest

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")

# Digits most of all, cut characters, JSON's marks, letters that fold (U+0130 folds to
# two characters), white space now and then (the segments' way).
_TEXT = st.text(alphabet='0123456789,:"{}kK\u0130\u00c9 ', max_size=14)
_WORD = st.text(alphabet='0123456789,:"{}kK\u0130\u00c9\u00e9', max_size=18)


def _result(key: int, value: int = 42) -> str:
    """A tool's JSON result, as the in-memory bench's: alike but for its key."""
    return json.dumps({"key": f"k{key}", "value": value, "unit": "widgets"}, separators=(",", ":"))


# Results of one shape and keys of one number of digits: mostly of one size (a key of
# repeated digits has fewer trigrams), and now and then another text.
_KEYED = st.one_of(
    st.builds(_result, st.integers(1000, 1030)),
    st.builds(_result, st.integers(1000, 9999)),
    st.builds(_result, st.integers(0, 99), st.integers(0, 3)),
    _TEXT,
)


def _plain_best(window: tuple[str, ...], result: str) -> float:
    """The highest cosine of ``result``'s trigram set with each text's of ``window``."""
    if not window:
        return 0.0
    return max(lexical_similarity(result, seen) if result != seen else 1.0 for seen in window)


def _set_best(window: tuple[str, ...], result: str) -> float:
    """The same from the sets, without lexical_similarity's shortcut for equal texts."""
    if not window:
        return 0.0
    mine = trigrams(result)
    return max(
        len(mine & trigrams(seen)) / math.sqrt(len(mine) * len(trigrams(seen))) for seen in window
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_KEYED, max_size=6),
    st.lists(_KEYED, min_size=1, max_size=40),
    st.integers(1, 8),
    st.integers(0, 2),
)
def test_advance_is_the_set_computation(
    evidence: list[str], results: list[str], size: int, cut: int
) -> None:
    """Each step's best is the set formula's float, whether the window's texts are of one
    size or not; the window moves on as ``(*window, kept)[-size:]`` with each text's size."""
    masks, window = GramMasks(), tuple(evidence)
    for result in results:
        kept = result[: len(result) - cut] if cut and len(result) > cut else result
        plain = window[-size:]
        best, after = masks.advance(window, result, kept, size)
        assert best == _set_best(plain, result)
        assert after == (*plain, kept)[-size:]
        latest = masks._window
        assert latest is not None
        assert latest[0] is after
        sizes = [float(len(trigrams(text))) for text in after]
        assert latest[2] == tuple(sizes)
        assert latest[1] == tuple(masks.mask(text)[0] for text in after)
        window = after


@settings(max_examples=300, deadline=None)
@given(st.lists(_KEYED, min_size=1, max_size=20), st.lists(_KEYED, min_size=1, max_size=20))
def test_advance_matches_lexical_similarity(evidence: list[str], results: list[str]) -> None:
    """The governor's window (32) over texts of many digits: the best is the highest
    ``lexical_similarity`` (its shortcut for equal texts included)."""
    masks, window = GramMasks(), tuple(evidence)
    for result in results:
        best, after = masks.advance(window, result, result, 32)
        assert best == _plain_best(window[-32:], result)
        window = after


@settings(max_examples=300, deadline=None)
@given(_WORD)
def test_the_cut_pieces_are_the_regular_expression_s(word: str) -> None:
    """_pieced's cut (``str.split`` at ',' and ':' after the first character) gives the
    pieces ``_PIECES`` finds: a new text's kept pieces are exactly those of three
    characters or more, and its mask is the one made trigram by trigram, bit for bit."""
    folded = word.lower()
    fast, plain = GramMasks(), GramMasks()
    fast._bits["\x00\x00\x00"] = 0  # a vocabulary not empty
    plain._bits["\x00\x00\x00"] = 0
    mask = fast._pieced([folded])
    assert mask == plain._made(folded)
    assert fast._bits == plain._bits  # the same bits in the text's order
    pieces = _PIECES.findall(folded)
    if len(pieces) >= 2:
        assert set(fast._words) == {piece for piece in pieces if len(piece) >= 3}
    else:
        assert not fast._words
    # and again, from the pieces kept
    assert fast._pieced([folded]) == mask


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_WORD, st.builds(_result, st.integers(0, 10**6))), max_size=25))
def test_pieced_texts_decode_to_their_trigrams(texts: list[str]) -> None:
    """One vocabulary for all: each text's mask (pieces kept from earlier texts) sets the
    bits of exactly its trigrams, repeated texts included."""
    masks = GramMasks()
    for text in texts + texts:
        mask, count = masks.mask(text, keep=False)
        names = {bit: gram for gram, bit in masks._bits.items()}
        assert {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1} == set(
            trigrams(text)
        )
        assert count == len(trigrams(text))
    for piece, kept in masks._words.items():
        if " " not in piece:
            names = {bit: gram for gram, bit in masks._bits.items()}
            decoded = {names[bit] for bit in range(kept.bit_length()) if kept >> bit & 1}
            assert decoded == set(_grams_of(piece))


def test_the_empty_window_and_empty_texts() -> None:
    """No evidence: 0.0; empty texts and texts of fewer than three characters."""
    masks = GramMasks()
    assert masks.advance((), "", "", 4) == (0.0, ("",))
    best, after = masks.advance(("",), "", "", 4)
    assert best == 1.0
    assert after == ("", "")
    best, after = masks.advance(after, "ab", "ab", 4)
    assert best == 0.0
    best, after = masks.advance(after, "ab", "ab", 4)
    assert best == 1.0


def test_the_bound_of_the_vocabulary_still_holds() -> None:
    """With the vocabulary started again at every comparison, the best is still exact."""
    masks, window = GramMasks(), tuple[str, ...]()
    with mock.patch.object(similarity, "_FLOOR", 0), mock.patch.object(similarity, "_GROWTH", 0):
        for key in range(1000, 1060):
            result = _result(key)
            best, after = masks.advance(window, result, result, 8)
            assert best == _set_best(window[-8:], result)
            window = after


def _never_one_size(sizes: tuple[float, ...], first: float) -> int:
    """A count no window has: advance takes the general way (its ranks)."""
    return -1


# Texts of a few sizes, the first and last of a window often of one size and a text
# between of another: the one-size test's count decides.
_SIZED = st.sampled_from(
    [_result(1000), _result(1001), _result(1111), _result(2024), "abcd", "abce", "xyzw", "ab"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(_KEYED, _SIZED), max_size=6),
    st.lists(st.one_of(_KEYED, _SIZED), min_size=1, max_size=40),
    st.integers(1, 8),
)
def test_the_one_size_way_is_the_general_way(
    evidence: list[str], results: list[str], size: int
) -> None:
    """Two vocabularies fed the same texts, one of them kept to the general way: the very
    same best at every step, and the set formula's; when the window's texts are of one
    size, ``_highest`` on the window's own masks agrees."""
    fast, general = GramMasks(), GramMasks()
    window = tuple(evidence)
    for result in results:
        plain = window[-size:]
        before = fast._window
        best, after = fast.advance(window, result, result, size)
        with mock.patch.object(similarity, "_COUNT", _never_one_size):
            theirs, again = general.advance(window, result, result, size)
        assert best == theirs == _set_best(plain, result)
        assert after == again
        if before is not None and before[0] is plain and len(set(before[2])) == 1:
            mine, count = fast.mask(result)
            assert _highest(mine, count, before[1], before[2]) == best
        window = after


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1000, 1040), min_size=3, max_size=60), st.integers(1, 32))
def test_a_run_alike_but_for_its_keys(keys: list[int], size: int) -> None:
    """The bench's run: results alike but for their keys, mostly of one size; each best
    is the set formula's, and the one-size way is taken when the window is of one size:
    its sizes counted as one. One bit count a text of the window, no more (no ranks)."""
    masks, window = GramMasks(), tuple[str, ...]()
    taken = ranked = compared = 0
    real, bit_count = similarity._COUNT, similarity._BIT_COUNT

    def counting(sizes: tuple[float, ...], first: float) -> int:
        nonlocal taken
        found = real(sizes, first)
        taken += found == len(sizes)
        return found

    def ranking(value: int) -> int:
        nonlocal ranked
        ranked += 1
        return bit_count(value)

    with (
        mock.patch.object(similarity, "_COUNT", counting),
        mock.patch.object(similarity, "_BIT_COUNT", ranking),
    ):
        for key in keys:
            result = _result(key)
            best, after = masks.advance(window, result, result, size)
            assert best == _set_best(window[-size:], result)
            compared += len(window[-size:])
            window = after
    assert ranked == compared
    if len({len(trigrams(_result(key))) for key in keys}) == 1:
        assert taken == len(keys) - 1


def test_sizes_at_the_table_s_edge() -> None:
    """Texts of 2,046 to 2,050 trigrams (the table of sizes ends at 2,048): the window
    keeps each text's size and the best is the set formula's."""
    masks, window = GramMasks(), tuple[str, ...]()
    for size in (2046, 2047, 2048, 2049, 2050, 2048, 2047):
        text = "".join(chr(0x4E00 + at) for at in range(size + 2))
        assert len(trigrams(text)) == size
        best, after = masks.advance(window, text, text, 3)
        assert best == _set_best(window[-3:], text)
        latest = masks._window
        assert latest is not None
        assert latest[2] == tuple(float(len(trigrams(seen))) for seen in after)
        window = after


def test_a_window_of_one_size_holds_one_float() -> None:
    """Once a run's results of one size have filled the window, its sizes are one float
    object (the count that tests the window's one size finds it by identity)."""
    masks, window = GramMasks(), tuple[str, ...]()
    for key in range(1020, 1060):  # no key of repeated digits: 40 trigrams each
        result = _result(key)
        _, window = masks.advance(window, result, result, 8)
    latest = masks._window
    assert latest is not None
    assert len({id(size) for size in latest[2]}) == 1
    assert latest[2][0] == float(len(trigrams(_result(1059))))
