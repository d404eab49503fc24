"""The convergence check's mask of a result that starts and ends as the latest did (round
22 of issue 23, judged by the clock).

``GramMasks._pieced`` keeps the latest text whose end it found after one new piece, cut
there (``_shape``: its start up to that piece's chunk and two characters more, with the
OR of its pieces' masks before it, and the end with its mask); a text that starts and ends
so, with one chunk between, is that chunk's piece and the two masks, without the text cut
into chunks and the start's pieces and the end looked up one by one. Checked against
``_pieced`` as it was (copied below) and the plain trigram loop: the same masks, the same
vocabulary in the same order, the same pieces and ends kept (in the same order), at every
text; texts made to start and end alike with any characters between (cut characters
among them, the start and end overlapping, the first piece the new one, a piece kept
before), ends and vocabularies started again, a wide vocabulary."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity
from test_similarity_fast19g import _result
from test_similarity_fast21a import _run

from statemachine._similarity import trigrams

GramMasks = similarity.GramMasks

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _pieced_loop(self: GramMasks, words: list[str]) -> int:
    """``GramMasks._pieced`` before this step (every text cut into chunks), the reference."""
    folded = words[0] if words else ""
    bits = self._bits
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
    for part in parts:
        end = start + len(part) + 1
        if after:
            after = False
            known = tails.get(folded[start:])
            if known is not None:
                return mask | known | fresh
            tail = start
            since = 0
        piece = folded[start : end + 2]
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


def _plain(self: GramMasks, words: list[str]) -> int:
    """The plain mask: the folded text's trigrams one by one."""
    return self._made(words[0] if words else "")


# Texts that start and end alike (a few starts and ends, their cut characters at the
# edges or not), with anything between; the bench's results; short texts of cut
# characters; now and then two words, or a character whose lower case is longer.
_STARTS = ['{"key":"', '{"k":', "a:", ":", ",", "ab,c", "", "x", '{"a":1,"b":"', "a,b", ",:"]
_ENDS = [
    ',"value":42,"unit":"widgets"}',
    ',"v":1}',
    ":zz",
    ",",
    ",a:b",
    "",
    "b",
    '","u":"w"}',
    ",b",
    ":b,",
    ",:",
    "b,c",
]


def _key(number: int) -> str:
    return f"k{number}"


def _alike(start: str, middle: str, end: str) -> str:
    return start + middle + end


def _family(start: str, middles: list[str], end: str) -> list[str]:
    return [start + middle + end for middle in middles]


def _flat(runs: list[list[str]]) -> list[str]:
    return [text for run in runs for text in run]


def _alone(text: str) -> list[str]:
    return [text]


_MIDDLE = st.one_of(
    st.text(alphabet='ab1:,"', max_size=7),
    st.builds(_key, st.integers(0, 99)),
    st.builds(_key, st.integers(0, 99)),
)
_ALIKE = st.builds(_alike, st.sampled_from(_STARTS), _MIDDLE, st.sampled_from(_ENDS))
# Runs of texts of one start and one end, so that the latest kept is often theirs.
_FAMILY = st.builds(
    _family,
    st.sampled_from(_STARTS),
    st.lists(_MIDDLE, min_size=1, max_size=9),
    st.sampled_from(_ENDS),
)
_ONE = st.one_of(
    _ALIKE,
    _ALIKE,
    _ALIKE,
    st.builds(_result, st.integers(0, 3000)),
    st.builds(_result, st.integers(0, 40), st.integers(0, 9)),
    st.text(alphabet=',:"{}ab01\u0130', max_size=14),
    st.text(alphabet=',:"ab1 ', max_size=10),
    st.just(""),
)
_TEXTS = st.lists(st.one_of(_ONE.map(_alone), _FAMILY), min_size=1, max_size=8).map(_flat)


def _compare(texts: list[str], kept: int, narrow: int, starts: set[int]) -> GramMasks:
    """Each text's mask by ``_pieced`` and by the reference and the plain loop, with the
    vocabulary, pieces and ends compared after each (``starts``: where ``start`` runs)."""
    masks, loop, plain = GramMasks(), GramMasks(), GramMasks()
    with (
        mock.patch.object(similarity, "_TRIGRAMS_KEPT", kept),
        mock.patch.object(similarity, "_NARROW_BITS", narrow),
    ):
        for at, text in enumerate(texts):
            if at in starts:
                masks.start(1)
                loop.start(1)
                plain.start(1)
            mask = masks.mask(text, keep=False)
            with mock.patch.object(GramMasks, "_pieced", _pieced_loop):
                assert loop.mask(text, keep=False) == mask
            with mock.patch.object(GramMasks, "_pieced", _plain):
                assert plain.mask(text, keep=False) == mask
            assert mask[1] == len(trigrams(text))
            assert list(masks._bits.items()) == list(loop._bits.items())
            assert list(masks._bits.items()) == list(plain._bits.items())
            assert list(masks._words.items()) == list(loop._words.items())
            assert list(masks._tails.items()) == list(loop._tails.items())
    return masks


@settings(max_examples=400, deadline=None)
@given(
    _TEXTS,
    st.sampled_from([1 << 14, 1 << 14, 3, 1, 0]),
    st.sampled_from([4096, 4096, 20, 40, 70]),
    st.sets(st.integers(0, 60), max_size=3),
)
def test_masks_are_the_loop_and_the_plain(
    texts: list[str], kept: int, narrow: int, starts: set[int]
) -> None:
    """Any texts (many starting and ending alike), ends kept few or many, vocabularies
    narrow or wide, started again anywhere: each mask is the loop's and the plain one,
    and the vocabulary (its order), the pieces and the ends kept are the loop's."""
    _compare(texts, kept, narrow, starts)


def test_hand_cases() -> None:
    """Starts and ends alike around one chunk, none, two, a cut character at the start of
    the text, the start and end overlapping, the first piece new, a kept piece between;
    each start and end of the texts above around keys and cut characters; the bench's
    results while the vocabulary grows wide."""
    cases = [
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"k3","v":1}'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"k2","v":1}x'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"k3","z":2,"v":1}'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"k3:4","v":1}'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":",v":1}'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"v":1}'],
        ['{"key":"k1","v":1}', '{"key":"k2","v":1}', '{"key":"k1","v":1}'],
        ["a1,bc", "a2,bc", "a3,bc", "a,bc", "a:,bc", ",bc", "a33,bc"],
        ["x1:yy", "x2:yy", "x:yy", "xx:yy", "x1:yy", "x:y", "x"],
        ['{"a":1}', '{"b":1}', '{"c":1}', '{"c":1}', '{"d":2}'],
        ["ab,c1:d", "ab,c2:d", "ab,c:d", "ab,c:d:d", "ab,c,:d"],
        # the end starting where the start's last chunk starts (nothing between)
        ["a,b1,bb", "a,b2,bb", "a,b3,bb", "a,bb", "a,b4,bb", "a,bbb", "a,b,bb"],
        [":x1:xy", ":x2:xy", ":x3:xy", ":xy", ":x:xy"],
    ]
    warm = ["k1", "k2", "k3"]
    probes = ["k4", "", ",", ":", "k5,z", "k6:z", 'a"b', "k4", ",k", "k,", "k1", ":k", "k7"]
    for start in _STARTS:
        for end in _ENDS:
            cases.append([start + middle + end for middle in [*warm, *probes]])
    for texts in cases:
        for kept in (1 << 14, 0):
            _compare(texts, kept, 4096, set())
            _compare(texts, kept, 4096, {2})
    # the vocabulary grown wide after the latest start and end were kept (made whole)
    keyed = [_result(key) for key in range(150)]
    for narrow in (40, 60, 70, 100):
        _compare(keyed, 1 << 14, narrow, set())


def test_the_bench_results_take_the_shape() -> None:
    """The bench's results: from the fourth on, each is its key's piece and the kept start
    and end (a bit marked in the kept start's mask shows in theirs), the end found."""
    masks = GramMasks()
    for key in range(3):
        assert masks._shape is None
        masks.mask(_result(key))
    shape = masks._shape
    assert shape is not None
    head, lead, tail, rear = shape
    assert (head, tail) == ('{"key":"', ',"value":42,"unit":"widgets"}')
    assert masks._tails[tail] == rear
    marked = 1 << (len(masks._bits) + 500)
    masks._shape = (head, lead | marked, tail, rear)
    assert masks._pieced([_result(3)]) & marked
    assert masks._pieced([_result(1)]) & marked  # a kept piece: no end looked up
    masks.start(1)
    assert masks._shape is not None
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        masks.start(1)
    assert masks._shape is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(_ALIKE, st.builds(_result, st.integers(0, 60))), min_size=1, max_size=60),
    st.integers(1, 9),
    st.integers(0, 2),
)
def test_each_best_is_the_set_formula(results: list[str], size: int, cut: int) -> None:
    """advance over results that start and end alike: each best is the set formula's
    float, the index holds its invariant at every step."""
    _run(results, size, cut)
