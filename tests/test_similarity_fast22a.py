"""Two steps of the convergence check judged by the clock (round 22 of issue 23).

``GramMasks._pieced`` looks the text's end up after a new piece (``_tails``): a result
alike but for a key ends as an earlier one did, and the end's mask (the OR of its pieces',
each trigram of it given its bit when it was kept) stands for its pieces. Checked against
the plain mask (``_made`` of the folded text) and against ``_pieced`` as it was before
(copied below): the same mask, the same vocabulary in the same order, the same pieces
kept; and each end kept holds exactly its own trigrams.

``GramMasks.advance`` (its index, the round's other step here, was deleted in round 24):
checked against the set formula (the float :func:`lexical_similarity` gives) at every step
(the helpers of tests/test_similarity_fast21a.py), results whose masks were kept (no new
trigram) among them."""

# pyright: reportPrivateUsage=false

from __future__ import annotations

import json
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS as similarity
from test_similarity_fast19g import _result
from test_similarity_fast21a import _run

from statemachine._similarity import trigrams

GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")


def _pieced_before(self: GramMasks, words: list[str]) -> int:
    """``GramMasks._pieced`` before round 22 (no ends looked up), the reference."""
    folded = words[0] if words else ""
    bits = self._bits
    parts = folded[1:].replace(",", ":").split(":")
    if len(parts) < 2 or len(bits) > similarity._NARROW_BITS:
        return self._made(folded)
    cache = self._words
    get = cache.get
    mask = 0
    fresh = 0
    start = 0
    for part in parts:
        end = start + len(part) + 1
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
        else:
            mask |= found
    return mask | fresh or self._made(folded)


def _plain(self: GramMasks, words: list[str]) -> int:
    """The plain mask: the folded text's trigrams one by one."""
    return self._made(words[0] if words else "")


def _decoded(masks: GramMasks, mask: int) -> set[str]:
    names = {bit: gram for gram, bit in masks._bits.items()}
    return {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1}


def _two(key: int, value: int, unit: str) -> str:
    """A result of two or three changing fields."""
    return json.dumps({"key": f"k{key}", "value": value, "unit": unit}, separators=(",", ":"))


# The bench's results, results with two or three fields changed, texts of cut characters
# and JSON's marks (short pieces, empty chunks), now and then two words (the segments').
_ONE = st.one_of(
    st.builds(_result, st.integers(0, 3000)),
    st.builds(_result, st.integers(0, 3000)),
    st.builds(_two, st.integers(0, 300), st.integers(0, 60), st.sampled_from(["w", "kg", "ab"])),
    st.text(alphabet=',:"{}ab01\u0130', max_size=16),
    st.text(alphabet=',:"{}ab01 ', max_size=12),
)


def _masks_of(
    texts: list[str], maker: object, kept: int
) -> tuple[list[tuple[int, int]], GramMasks]:
    masks = GramMasks()
    found: list[tuple[int, int]] = []
    with (
        mock.patch.object(GramMasks, "_pieced", maker),
        mock.patch.object(similarity, "_TRIGRAMS_KEPT", kept),
    ):
        for text in texts:
            found.append(masks.mask(text, keep=False))
    return found, masks


@settings(max_examples=300, deadline=None)
@given(st.lists(_ONE, min_size=1, max_size=40), st.sampled_from([1 << 14, 3, 0]))
def test_masks_are_the_plain_and_the_earlier_pieces(texts: list[str], kept: int) -> None:
    """Each text's mask, the vocabulary (its order too) and the pieces kept are those of
    ``_pieced`` before and, the masks and vocabulary, of the plain trigram loop; each end
    kept holds exactly its own trigrams (the ends started again past ``_TRIGRAMS_KEPT``)."""
    masks = GramMasks()
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", kept):
        found = [masks.mask(text, keep=False) for text in texts]
    before, earlier = _masks_of(texts, _pieced_before, kept)
    plain, simple = _masks_of(texts, _plain, kept)
    assert found == before == plain
    assert list(masks._bits.items()) == list(earlier._bits.items())
    assert list(masks._bits.items()) == list(simple._bits.items())
    assert masks._words == earlier._words
    for text, (mask, count) in zip(texts, found, strict=True):
        assert _decoded(masks, mask) == set(trigrams(text))
        assert count == len(trigrams(text))
    for end, mask in masks._tails.items():
        assert _decoded(masks, mask) == set(_grams_of(end))
        assert len(masks._tails) <= kept + 1


def test_the_bench_results_end_as_the_first_did() -> None:
    """The bench's results: after the first, each new key's text looks its end up once
    and finds it (one end kept, the first one's); the masks are the plain ones."""
    masks, plain = GramMasks(), GramMasks()
    looked: list[str] = []
    for key in range(300):
        text = _result(key)
        mask = masks.mask(text)
        with mock.patch.object(GramMasks, "_pieced", _plain):
            assert plain.mask(text) == mask
        if key == 0:
            masks._tails = _Spy(masks._tails, looked)
    assert list(masks._tails) == [',"value":42,"unit":"widgets"}']
    assert looked == [',"value":42,"unit":"widgets"}'] * 299
    assert masks._bits == plain._bits


class _Spy(dict[str, int]):
    """A dict that notes the keys looked up with get."""

    def __init__(self, kept: dict[str, int], looked: list[str]) -> None:
        super().__init__(kept)
        self.looked = looked

    def get(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self, key: str, default: None = None
    ) -> int | None:
        self.looked.append(key)
        return super().get(key)


def test_ends_start_again_with_the_vocabulary() -> None:
    """A vocabulary started again drops the ends kept with it."""
    masks = GramMasks()
    masks.mask(_two(1, 2, "w"))
    masks.mask(_two(3, 2, "w"))
    assert masks._tails
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        masks.start(1)
    assert not masks._tails
    assert not masks._bits


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(_ONE, st.builds(_result, st.integers(0, 40))), min_size=1, max_size=60),
    st.integers(1, 9),
    st.integers(0, 2),
)
def test_each_best_is_the_set_formula(results: list[str], size: int, cut: int) -> None:
    """Any results (repeats among them: masks kept, no trigram new), any window, kept
    texts shorter than their results: each best is the set formula's float."""
    _run(results, size, cut)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 1200), min_size=1, max_size=120), st.integers(1, 40))
def test_the_bench_run_repeated(keys: list[int], size: int) -> None:
    """The bench's results, each key twice now and then (its mask kept the second time,
    made before the window's latest): the set formula's floats."""
    results = [_result(key) for key in keys for _ in range(1 + key % 2)]
    _run(results, size)
