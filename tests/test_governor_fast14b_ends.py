"""The first and last segments of a text of two words or more (``GramMasks._joined``,
round 14 of issue 23): the first ("word ") is found by its word (``_firsts``), the last
("letter word") by its word and the letter before it (``_lasts``), without its text made,
each kept there with the mask ``_words`` holds for it when found or made there. The same
masks, bit for bit, the same vocabulary (new trigrams given bits in the same order) and
the same segments kept as ``_joined`` at 3974b94 (its first and last segments' texts made
and looked up), kept here as the reference; every mask kept by word (and letter) is the
segment's in ``_words``; the caches started again with ``_words`` change nothing."""

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
    """``GramMasks._joined`` as it was at 3974b94: the first and last segments' texts made
    and looked up in ``_words``."""
    if len(self._bits) > similarity._NARROW_BITS or len(words[0]) < 2:
        return self._joined_wide(words)
    cache, made = self._words, self._made
    get = cache.get
    before = words[0]
    segment = f"{before} "
    mask = get(segment)
    if mask is None:
        mask = cache[segment] = made(segment)
    fresh = 0
    pairs = self._pairs
    paired = pairs.get
    for word in words[1:-1]:
        letter = before[-1]
        before = word
        after = paired(word)
        if after is not None:
            found = after.get(letter)
            if found is not None:
                mask |= found
                continue
        segment = f"{letter} {word} "
        found = get(segment)
        if found is None:
            found = cache[segment] = self._parted(segment)
            fresh |= found
        else:
            mask |= found
            if after is None:
                pairs[word] = {letter: found}
            else:
                after[letter] = found
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
    """Every mask kept by word (and letter) is the segment's kept in _words, and its
    own trigrams'."""
    for word, found in masks._firsts.items():
        assert masks._words[f"{word} "] == found
        assert _decoded(masks, found) == set(_grams_of(f"{word} "))
    for word, after in masks._lasts.items():
        for letter, found in after.items():
            assert len(letter) == 1
            assert masks._words[f"{letter} {word}"] == found
            assert _decoded(masks, found) == set(_grams_of(f"{letter} {word}"))


# Short words of few letters and digits (words repeat, first and last among them), ':',
# a letter that folds to two characters (U+0130) and one that folds to one, words of one
# letter; white space of several kinds.
_WORD = st.text(alphabet="ab01:\u0130\u00c9", min_size=1, max_size=6)
_SPACE = st.sampled_from((" ", "  ", "\t", "\n", "\u00a0"))


@st.composite
def _texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(_WORD, min_size=2, max_size=7))
    gaps = draw(st.lists(_SPACE, min_size=len(words) + 1, max_size=len(words) + 1))
    inner = "".join(word + gap for word, gap in zip(words, gaps[1:], strict=False))
    return (gaps[0] + inner) if draw(st.booleans()) else inner.rstrip()


def _same(texts: list[str], starts: set[int], *, keep: bool) -> None:
    masks, plain = GramMasks(), GramMasks()
    for at, text in enumerate(texts):
        if at in starts:
            masks.start(1)
            plain.start(1)
            assert not masks._words
            assert not masks._firsts
            assert not masks._lasts
        found = masks.mask(text, keep=keep)
        with mock.patch.object(GramMasks, "_joined", _joined_before):
            assert plain.mask(text, keep=keep) == found
        assert type(found[0]) is int
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        assert masks._pairs == plain._pairs
        assert masks._parts == plain._parts
        assert _decoded(masks, found[0]) == set(trigrams(text))
        assert found[1] == len(trigrams(text))
        _consistent(masks)


@settings(max_examples=300, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=16), st.sets(st.integers(0, 15)))
def test_masks_are_the_references_across_starts(texts: list[str], starts: set[int]) -> None:
    """Each text's mask (one cache for all) is the reference's int, with the same
    vocabulary and caches after each text; every cache started again (bound 0) before the
    texts marked."""
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        _same(texts, starts, keep=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=16))
def test_masks_are_the_references_with_the_texts_repeated(texts: list[str]) -> None:
    """The texts twice over (the second time the ends are found by word and letter),
    kept or not."""
    _same(texts + texts[::-1] + texts, set(), keep=False)
    _same(texts + texts, set(), keep=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=12), st.data())
def test_ends_in_words_before_they_are_kept_by_word(texts: list[str], data: st.DataObject) -> None:
    """Segments already in _words (made by the wide way, or a middle segment "a b " whose
    text is a first one's) are found there and kept by word with that very mask."""
    masks, plain = GramMasks(), GramMasks()
    with mock.patch.object(similarity, "_NARROW_BITS", data.draw(st.integers(0, 40))):
        for text in texts:
            masks.mask(text, keep=False)
            with mock.patch.object(GramMasks, "_joined", _joined_before):
                plain.mask(text, keep=False)
    for text in texts:
        found = masks.mask(text, keep=False)
        with mock.patch.object(GramMasks, "_joined", _joined_before):
            assert plain.mask(text, keep=False) == found
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        _consistent(masks)


def test_the_governor_benchs_results() -> None:
    """The governor bench's results ("result N: " and twelve words): "result " found by
    its word, the last word by its word and letter; masks, vocabulary and segments as the
    reference's."""
    words = ["refund", "order", "parcel", "invoice", "delivery", "address", "account", "password"]
    masks, plain = GramMasks(), GramMasks()
    for n in range(200):
        text = f"result {3_000_600 + 7 * n}: " + " ".join(words[(n + k) % 8] for k in range(12))
        found = masks.mask(text)
        with mock.patch.object(GramMasks, "_joined", _joined_before):
            assert plain.mask(text) == found
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        assert _decoded(masks, found[0]) == set(trigrams(text))
    _consistent(masks)
    assert set(masks._firsts) == {"result"}
    assert set(masks._lasts) == set(words)
