"""The convergence check's mask of a new piece after the latest start (round 25 of issue 23,
judged by the clock).

``GramMasks._pieced``, for a text that starts and ends as the latest did (``_shape``) with
a new piece between, made the piece trigram by trigram. A piece of seven characters or
more is now its start (all but its last four characters), the one trigram after it and its
end (its last five characters), the start and end looked up whole in ``_sides`` (a key's
number changes at its end: its piece's start recurs for ten keys, its end every hundredth key)
or made trigram by trigram and kept there. Checked against ``_pieced`` as it was (copied
below), round 22's loop and the plain trigram loop: the same masks, the same vocabulary in
the same order (new trigrams' bits in the text's order), the same pieces, ends and shapes
kept, at every text; every start and end kept is its own trigrams' mask; texts made to
start and end alike with middles of any length (pieces of three to sixteen characters,
repeated digits, starts and ends shared between keys), the sides bounded low (started
again alone), the vocabulary started again anywhere or grown wide, texts of several words
among them."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity
from test_similarity_fast19g import _result
from test_similarity_fast21a import _run
from test_similarity_fast22e import _pieced_loop, _plain

from statemachine._similarity import trigrams

GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _pieced_before(self: GramMasks, words: list[str]) -> int:
    """``GramMasks._pieced`` before this step (a new piece after the shape's start made
    trigram by trigram), the reference."""
    folded = words[0] if words else ""
    bits = self._bits
    shape = self._shape
    if shape is not None and len(bits) <= similarity._NARROW_BITS:
        head, lead, ending, rear = shape
        if folded.startswith(head) and folded.endswith(ending):
            at = len(head) - 2
            end = len(folded) - len(ending)
            chunk = folded[at + 1 : end]
            if end > at and "," not in chunk and ":" not in chunk:
                piece = folded[at : end + 2]
                found = self._words.get(piece)
                if found is not None:
                    return lead | found | rear
                if self._tails.get(ending) is not None:
                    found = 0
                    for at in range(len(piece) - 2):
                        gram = piece[at : at + 3]
                        bit = bits.get(gram)
                        if bit is None:
                            bit = bits[gram] = len(bits)
                        found |= 1 << bit
                    self._words[piece] = found
                    return lead | rear | found
    parts = folded[1:].replace(",", ":").split(":")
    if len(parts) < 2 or len(bits) > similarity._NARROW_BITS:
        return self._made(folded)
    cache = self._words
    get = cache.get
    tails = self._tails
    mask = 0
    fresh = 0
    start = 0
    after = False
    tail = -1
    since = 0
    lone = -1
    lead = 0
    for part in parts:
        end = start + len(part) + 1
        if after:
            after = False
            known = tails.get(folded[start:])
            if known is not None:
                if lone >= 0:
                    self._shape = (folded[: lone + 2], lead, folded[start:], known)
                return mask | known | fresh
            tail = start
            since = 0
        piece = folded[start : end + 2]
        begin = start
        start = end
        found = get(piece)
        if found is None:
            if len(piece) < 3:
                continue
            found = 0
            for at in range(len(piece) - 2):
                gram = piece[at : at + 3]
                bit = bits.get(gram)
                if bit is None:
                    bit = bits[gram] = len(bits)
                found |= 1 << bit
            cache[piece] = found
            if fresh:
                lone = -1
            else:
                lone = begin
                lead = mask
            fresh |= found
            after = True
            tail = -1
        else:
            mask |= found
            if tail >= 0:
                since |= found
    if tail >= 0 and since:
        if len(tails) > similarity._TRIGRAMS_KEPT:
            tails = self._tails = {}
        tails[folded[tail:]] = since
    return mask | fresh or self._made(folded)


def _decoded(masks: GramMasks, mask: int) -> set[str]:
    """The trigrams whose bits ``mask`` sets, through the vocabulary of ``masks``."""
    names = {bit: gram for gram, bit in masks._bits.items()}
    assert len(names) == len(masks._bits)
    assert mask.bit_length() <= len(names)
    return {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1}


def _sides_hold(masks: GramMasks, bound: int) -> None:
    """Every start and end kept is its own trigrams' mask (three characters or more, no
    white space), and the sides hold at most their bound and the two kept past it."""
    assert len(masks._sides) <= bound + 2
    for side, found in masks._sides.items():
        assert len(side) >= 3
        assert not any(letter.isspace() for letter in side)
        assert _decoded(masks, found) == set(_grams_of(side))


def _compare(texts: list[str], bound: int, narrow: int, starts: set[int]) -> GramMasks:
    """Each text's mask by ``_pieced``, the reference, round 22's loop and the plain loop,
    with the vocabulary (its order), pieces, ends and shape compared after each
    (``starts``: where ``start`` runs)."""
    masks, before, loop, plain = GramMasks(), GramMasks(), GramMasks(), GramMasks()
    with (
        mock.patch.object(similarity, "_TRIGRAMS_KEPT", bound),
        mock.patch.object(similarity, "_NARROW_BITS", narrow),
    ):
        for at, text in enumerate(texts):
            if at in starts:
                for each in (masks, before, loop, plain):
                    each.start(1)
                if not masks._bits:  # the vocabulary started again: the sides with it
                    assert not masks._sides
            mask = masks.mask(text, keep=False)
            with mock.patch.object(GramMasks, "_pieced", _pieced_before):
                assert before.mask(text, keep=False) == mask
            with mock.patch.object(GramMasks, "_pieced", _pieced_loop):
                assert loop.mask(text, keep=False) == mask
            with mock.patch.object(GramMasks, "_pieced", _plain):
                assert plain.mask(text, keep=False) == mask
            assert mask[1] == len(trigrams(text))
            assert _decoded(masks, mask[0]) == set(trigrams(text))
            assert list(masks._bits.items()) == list(before._bits.items())
            assert list(masks._bits.items()) == list(loop._bits.items())
            assert list(masks._bits.items()) == list(plain._bits.items())
            assert list(masks._words.items()) == list(before._words.items())
            assert list(masks._tails.items()) == list(before._tails.items())
            assert masks._shape == before._shape
            _sides_hold(masks, bound)
    return masks


# Texts that start and end alike around a middle of any length (pieces of three to sixteen
# characters): keys with repeated digits, middles of a small alphabet (starts and ends
# shared between them, trigrams repeated within a piece), cut characters in the middle
# now and then; the bench's results; texts of several words; other short texts.
_STARTS = ['{"key":"', '{"k":', "a:", ":", ",", "", "x", '{"a":1,"b":"', "a,b"]
_ENDS = [',"value":42,"unit":"widgets"}', ',"v":1}', ":zz", ",", "", "b", '","u":"w"}', ",b"]


def _key(number: int) -> str:
    return f"k{number}"


def _small(middle: str) -> str:
    return f'{{"key":"{middle}","v":1}}'


def _family(start: str, middles: list[str], end: str) -> list[str]:
    return [start + middle + end for middle in middles]


def _flat(runs: list[list[str]]) -> list[str]:
    return [text for run in runs for text in run]


def _alone(text: str) -> list[str]:
    return [text]


_MIDDLE = st.one_of(
    st.builds(_key, st.integers(0, 12_000)),
    st.builds(_key, st.sampled_from([0, 1, 11, 111, 1111, 11111, 1000, 10001, 999, 9999])),
    st.text(alphabet='ab1"', min_size=0, max_size=14),
    st.text(alphabet='ab1:,"', max_size=9),
)
_FAMILY = st.builds(
    _family,
    st.sampled_from(_STARTS),
    st.lists(_MIDDLE, min_size=1, max_size=14),
    st.sampled_from(_ENDS),
)
_ONE = st.one_of(
    st.builds(_result, st.integers(0, 3000)),
    st.builds(_result, st.integers(0, 40), st.integers(0, 9)),
    st.text(alphabet=',:"{}ab01\u0130', max_size=14),
    st.text(alphabet=',:"ab1 ', max_size=12),
    st.just(""),
)
_TEXTS = st.lists(st.one_of(_FAMILY, _FAMILY, _ONE.map(_alone)), min_size=1, max_size=8).map(_flat)


@settings(max_examples=400, deadline=None)
@given(
    _TEXTS,
    st.sampled_from([1 << 14, 1 << 14, 3, 1, 0]),
    st.sampled_from([4096, 4096, 4096, 30, 60]),
    st.sets(st.integers(0, 60), max_size=3),
)
def test_masks_are_the_references(
    texts: list[str], bound: int, narrow: int, starts: set[int]
) -> None:
    """Any texts (most in runs that start and end alike), sides and ends kept few or many,
    vocabularies narrow or wide, started again anywhere: each mask is the reference's, the
    loop's and the plain one, the vocabulary (its order), pieces, ends and shape are the
    reference's, and every start and end kept is its own trigrams' mask."""
    _compare(texts, bound, narrow, starts)


def test_hand_cases() -> None:
    """Pieces of three to sixteen characters after a kept start and end, around keys of
    repeated digits (a trigram twice in one piece), a start or end kept by another key,
    the bench's results to key 1,200 (from three digits to four) with the sides bounded
    or not and the vocabulary started again."""
    middles = [f"k{key}" for key in (1, 2, 3, 4, 44, 444, 4444, 44444, 12, 123, 1234, 12345)]
    middles += ["", "k", "kk", "abcabcabc", "aaaa", "aaaaaaa", "k1", "k4443", "k5444"]
    for start in _STARTS:
        for end in _ENDS:
            texts = [start + middle + end for middle in middles]
            for bound in (1 << 14, 0, 2):
                _compare(texts, bound, 4096, set())
                _compare(texts, bound, 4096, {5})
    keyed = [_result(key) for key in range(1200)]
    _compare(keyed, 1 << 14, 4096, set())
    _compare(keyed, 5, 4096, {300, 1001})


def test_the_bench_results_take_the_sides() -> None:
    """The bench's results: a new key's piece is its start (kept from the key before) and
    its end (kept from a key of two digits) and the one trigram between (a bit marked in the
    kept start's and end's masks shows in the result's); a start or end not kept is made
    and kept; the sides start again with the vocabulary."""
    masks = GramMasks()
    for key in range(598):
        masks.mask(_result(key))
    assert masks._shape is not None
    sides = masks._sides
    assert sides[':"k59'] == masks._made(':"k59')
    assert sides['89","'] == masks._made('89","')
    assert '99","' in sides
    marked = 1 << (len(masks._bits) + 500)
    sides[':"k59'] |= marked
    assert masks.mask(_result(598))[0] & marked
    sides['99","'] |= marked << 1
    assert masks.mask(_result(599))[0] & marked << 1
    masks.mask(_result(600))
    assert ':"k60' in masks._sides
    masks.start(1)
    assert masks._sides
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        masks.start(1)
    assert not masks._sides


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(_result, st.integers(0, 1300)),
            st.builds(_small, _MIDDLE),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(1, 9),
    st.integers(0, 2),
)
def test_each_best_is_the_set_formula(results: list[str], size: int, cut: int) -> None:
    """advance over results that start and end alike: each best is the set formula's
    float."""
    _run(results, size, cut)


def test_the_bench_run_best_is_the_set_formula() -> None:
    """advance over the bench's results in order to key 1,100 (keys of one to four
    digits): each best is the set formula's float."""
    _run([_result(key) for key in range(1100)], 32, 0)
