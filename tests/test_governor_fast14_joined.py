"""The mask of a text of two words or more (``GramMasks._joined``, round 14 of issue 23):
a segment kept is found by its word and the letter before it (``_pairs``), without its
text made; a new segment is made from its parts of five characters starting every third
(``_parted``), each part's mask kept (``_parts``). The same masks, bit for bit, the same
vocabulary (new trigrams given bits in the same order) and the same segments kept as the
way before (99d655e), kept here as the reference; every mask kept by word and letter is
the segment's, every part's is its own trigrams'; the caches started again (vocabulary
and all, or the parts alone past their bound) change nothing."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity

from statemachine._similarity import trigrams

GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _joined_before(self: GramMasks, words: list[str]) -> int:
    """``GramMasks._joined`` as it was at 99d655e: each segment's text made and looked up,
    a new segment made from its slices of three."""
    if len(self._bits) > similarity._NARROW_BITS or len(words[0]) < 2:
        return self._joined_wide(words)
    cache, made, bits = self._words, self._made, self._bits
    get = cache.get
    before = words[0]
    segment = f"{before} "
    mask = get(segment)
    if mask is None:
        mask = cache[segment] = made(segment)
    fresh = 0
    for word in words[1:-1]:
        segment = f"{before[-1]} {word} "
        before = word
        found = get(segment)
        if found is None:
            found = 0
            for at in range(len(segment) - 2):
                gram = segment[at : at + 3]
                bit = bits.get(gram)
                if bit is None:
                    bit = bits[gram] = len(bits)
                found |= 1 << bit
            cache[segment] = found
            fresh |= found
        else:
            mask |= found
    segment = f"{before[-1]} {words[-1]}"
    found = get(segment)
    if found is None:
        found = cache[segment] = made(segment)
    return mask | found | fresh


def _decoded(masks: GramMasks, mask: int) -> set[str]:
    """The trigrams whose bits ``mask`` sets, through the vocabulary of ``masks``."""
    names = {bit: gram for gram, bit in masks._bits.items()}
    assert len(names) == len(masks._bits)
    return {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1}


def _consistent(masks: GramMasks) -> None:
    """Every mask kept by word and letter is the segment's kept in _words; every part's
    mask is its own trigrams'."""
    for word, after in masks._pairs.items():
        for letter, found in after.items():
            assert masks._words[f"{letter} {word} "] == found
    for part, found in masks._parts.items():
        assert 3 <= len(part) <= 5
        assert _decoded(masks, found) == set(_grams_of(part))


# Short words of few letters and digits (segments and parts repeat, so most are found and
# some made), ':' (as after a number), a letter that folds to two characters (U+0130) and
# one that folds to one, words of one letter; white space of several kinds.
_WORD = st.text(alphabet="ab01:\u0130\u00c9", min_size=1, max_size=9)
_SPACE = st.sampled_from((" ", "  ", "\t", "\n", "\u00a0"))


@st.composite
def _texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(_WORD, min_size=2, max_size=9))
    gaps = draw(st.lists(_SPACE, min_size=len(words) + 1, max_size=len(words) + 1))
    inner = "".join(word + gap for word, gap in zip(words, gaps[1:], strict=False))
    return (gaps[0] + inner) if draw(st.booleans()) else inner.rstrip()


def _same(texts: list[str], starts: set[int], *, keep: bool) -> None:
    masks, plain = GramMasks(), GramMasks()
    for at, text in enumerate(texts):
        if at in starts:
            masks.start(1)
            plain.start(1)
            assert not masks._bits
            assert not masks._words
            assert not masks._pairs
            assert not masks._parts
        found = masks.mask(text, keep=keep)
        with mock.patch.object(GramMasks, "_joined", _joined_before):
            assert plain.mask(text, keep=keep) == found
        assert type(found[0]) is int
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        assert _decoded(masks, found[0]) == set(trigrams(text))
        assert found[1] == len(trigrams(text))
        _consistent(masks)


@settings(max_examples=300, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=16), st.sets(st.integers(0, 15)))
def test_masks_are_the_references_across_starts(texts: list[str], starts: set[int]) -> None:
    """Each text's mask (one cache for all) is the reference's int, with the same
    vocabulary and segments after each text; the caches started again (bound 0) before the
    texts marked."""
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        _same(texts, starts, keep=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=16))
def test_masks_are_the_references_with_the_texts_repeated(texts: list[str]) -> None:
    """The texts twice over (the second time each segment is found by word and letter),
    kept or not."""
    _same(texts + texts[::-1] + texts, set(), keep=False)
    _same(texts + texts, set(), keep=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=12), st.integers(0, 3))
def test_parts_started_again_past_their_bound(texts: list[str], bound: int) -> None:
    """Past their bound the parts alone start again (the vocabulary and segments stay):
    the masks as the reference's."""
    masks, plain = GramMasks(), GramMasks()
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", bound):
        for text in texts:
            found = masks.mask(text, keep=False)
            with mock.patch.object(GramMasks, "_joined", _joined_before):
                assert plain.mask(text, keep=False) == found
            assert masks._bits == plain._bits
            assert masks._words == plain._words
            assert len(masks._parts) <= bound + 8
            _consistent(masks)


def test_the_governor_benchs_results() -> None:
    """The governor bench's results ("result N: " and twelve words) at numbers of seven
    digits: the number's segment made from parts, most of them kept from earlier numbers;
    masks, vocabulary and segments as the reference's."""
    words = ["refund", "order", "parcel", "invoice", "delivery", "address", "account", "password"]
    masks, plain = GramMasks(), GramMasks()
    for n in range(300):
        number = 3_000_600 + 7 * n
        text = f"result {number}: " + " ".join(words[(n + k) % 8] for k in range(12))
        before = set(masks._words)
        found = masks.mask(text)
        with mock.patch.object(GramMasks, "_joined", _joined_before):
            assert plain.mask(text) == found
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        assert _decoded(masks, found[0]) == set(trigrams(text))
        if n >= 8:
            assert set(masks._words) - before == {f"t {number}: "}
    _consistent(masks)
    assert "t 300" in masks._parts


def test_a_wide_vocabulary_takes_the_wide_way() -> None:
    """Past _NARROW_BITS the masks are _joined_wide's, as before."""
    masks, plain = GramMasks(), GramMasks()
    with mock.patch.object(similarity, "_NARROW_BITS", 5):
        for n in range(40):
            text = f"result {n}: refund order parcel {n * 13}"
            found = masks.mask(text)
            with mock.patch.object(GramMasks, "_joined", _joined_before):
                assert plain.mask(text) == found
            assert masks._bits == plain._bits
            assert masks._words == plain._words
