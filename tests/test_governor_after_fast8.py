"""The mask of a text of two words or more (``GramMasks._joined``, round 13 of issue 23): a
segment not found in the cache is made trigram by trigram from its slices of three taken in
place, where it was made from ``"".join`` of zip's tuples. The same masks, bit for bit, the
same vocabulary (new trigrams given bits in the same order) and the same segments kept as
the join's way, which is kept here as the reference; each mask is exactly the text's set
of trigrams (decoded through the vocabulary), and the similarity of two masks is
``lexical_similarity``'s float; the gains of whole runs are the reference's to the bit."""

from __future__ import annotations

import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import PURE_GRAMS as similarity

from statemachine import LoopGovernor, LoopState, read_tool
from statemachine._similarity import lexical_similarity, trigrams

GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _joined_by_join(self: GramMasks, words: list[str]) -> int:
    """``GramMasks._joined`` as it was before (01a7618): each new segment's trigrams made
    by ``"".join`` of zip's tuples."""
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
            for gram in map("".join, zip(segment, segment[1:], segment[2:])):  # noqa: B905
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
    assert len(names) == len(masks._bits)  # one bit per trigram
    return {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1}


# Short words of few letters (segments repeat, so most are found and some made), digits,
# a letter that folds to two characters (U+0130) and one that folds to one, words of one
# letter (the first of them sends _joined to _joined_wide), white space of several kinds.
_WORD = st.text(alphabet="ab01:\u0130\u00c9", min_size=1, max_size=7)
_SPACE = st.sampled_from((" ", "  ", "\t", "\n", "\u00a0", "\u2003"))


@st.composite
def _texts(draw: st.DrawFn) -> str:
    """A text of two words or more with white space of any kind between and around them."""
    words = draw(st.lists(_WORD, min_size=2, max_size=9))
    gaps = draw(st.lists(_SPACE, min_size=len(words) + 1, max_size=len(words) + 1))
    edges = draw(st.booleans())
    inner = "".join(word + gap for word, gap in zip(words, gaps[1:], strict=False))
    return (gaps[0] + inner) if edges else inner.rstrip()


@settings(max_examples=300, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=14), st.sets(st.integers(0, 13)))
def test_masks_are_the_joins_and_the_texts_trigrams(texts: list[str], starts: set[int]) -> None:
    """Each text's mask (one cache for all: segments made, then found) is the reference's
    int, with the same vocabulary and segments kept after each text; it sets exactly the
    bits of the text's trigrams and counts them; the caches started again (vocabulary and
    all) before the texts marked. Every segment kept holds its own trigrams' bits."""
    masks, plain = GramMasks(), GramMasks()
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        for at, text in enumerate(texts):
            if at in starts:
                masks.start(1)  # past a bound of 0: the vocabulary starts again
                plain.start(1)
                assert not masks._bits
                assert not masks._words
            mask, count = masks.mask(text, keep=False)
            with mock.patch.object(GramMasks, "_joined", _joined_by_join):
                assert plain.mask(text, keep=False) == (mask, count)
            assert masks._bits == plain._bits
            assert masks._words == plain._words
            assert _decoded(masks, mask) == set(trigrams(text))
            assert count == len(trigrams(text))
    for segment, kept in masks._words.items():
        assert _decoded(masks, kept) == set(_grams_of(segment))


@settings(max_examples=200, deadline=None)
@given(_texts(), _texts())
def test_similarity_of_the_masks_is_lexical_similarity(first: str, second: str) -> None:
    """``|A & B| / sqrt(|A| |B|)`` of the two masks is ``lexical_similarity``'s float."""
    masks = GramMasks()
    (a, count_a), (b, count_b) = masks.mask(first), masks.mask(second)
    value = (a & b).bit_count() / math.sqrt(count_a * count_b)
    if first == second:
        assert value == 1.0
    else:
        assert value == lexical_similarity(first, second)


def test_the_governor_benchs_results() -> None:
    """The governor bench's result ("result N: " and twelve words): each has one new
    segment (its number), made here; masks, vocabulary and segments as the reference's."""
    words = ["refund", "order", "parcel", "invoice", "delivery", "address", "account", "password"]
    masks, plain = GramMasks(), GramMasks()
    for n in range(60):
        text = f"result {5_000_000 + n}: " + " ".join(words[(n + k) % 8] for k in range(12))
        before = set(masks._words)
        found = masks.mask(text)
        with mock.patch.object(GramMasks, "_joined", _joined_by_join):
            assert plain.mask(text) == found
        assert masks._bits == plain._bits
        assert masks._words == plain._words
        assert _decoded(masks, found[0]) == set(trigrams(text))
        if n >= 8:  # every other segment seen by now
            assert set(masks._words) - before == {f"t {5_000_000 + n}: "}


class _Args(BaseModel):
    query: str


@read_tool
async def _search(args: _Args) -> str:
    return args.query


def _gains(results: list[str], repeats: int) -> list[float | None]:
    """The gains of a run whose calls read ``results`` in turn, ``repeats`` times over."""
    governor = LoopGovernor()
    loop = LoopState()
    gains: list[float | None] = []
    for n, result in enumerate(results * repeats):
        call_id = f"call-{n}"
        loop = loop.record(governor.action(_search.call({"query": f"q{n}"}), "{}", call_id))
        loop = governor.after_action(
            loop, call_id=call_id, effect="read", result=result, ctx=None, step=n
        )
        gains.append(loop.actions[-1].gain)
    return gains


@settings(max_examples=60, deadline=None)
@given(st.lists(_texts(), min_size=1, max_size=12), st.integers(1, 3))
def test_gains_of_whole_runs_are_the_references(results: list[str], repeats: int) -> None:
    """A run's gains with the masks made here are those of the reference, to the bit."""
    fast = _gains(results, repeats)
    with mock.patch.object(GramMasks, "_joined", _joined_by_join):
        plain = _gains(results, repeats)
    assert list(map(repr, fast)) == list(map(repr, plain))
