"""The convergence gain in one frame (``GramMasks.compared``, round 11 of issue 23):
``start`` asked only when one of its tests may hold, the window's masks and the result's
read in place. Checked against ``start`` then ``best`` (the same float and the same caches
after, at the bounds of the masks kept and of the vocabulary) and against the set formula,
to the bit. And ``_joined``'s mask of a middle segment new to the cache (a number, an id)
made in its own frame, checked against ``_made``'s through the general loop."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import LoopGovernor, LoopState
from statemachine._grams import _FLOOR, _GROWTH, _MASKS_KEPT, GramMasks, _grams_of
from statemachine._similarity import trigrams

# Letters that repeat, digits, a colon, case and a letter that folds: the segments' edges.
_TEXT = st.text(alphabet="aAb0: 1\u00e9", min_size=1, max_size=14)


def _gain_by_sets(window: tuple[str, ...], result: str) -> float:
    """The gain as first written: 1 - the highest cosine of the trigram sets."""
    mine = trigrams(result)
    best = max(
        len(mine & trigrams(seen)) / (len(mine) * len(trigrams(seen))) ** 0.5 for seen in window
    )
    return 1.0 - best


def _filled(texts: int, wide: bool, seed: int) -> GramMasks:
    """Masks that hold ``texts`` texts' masks; past ``_FLOOR`` trigrams when ``wide``."""
    masks = GramMasks()
    rng = random.Random(seed)
    masks.advance(("zero",), "first", "first", 1)  # a window signed: the vocabulary's base
    if wide:  # then past both bounds of the vocabulary: the next start starts it again
        letters = "abcdefghijklmnopqrstuvwxyz0123456789"
        while len(masks._bits) <= _FLOOR:
            masks.mask(" ".join("".join(rng.choices(letters, k=8)) for _ in range(40)), keep=False)
        assert masks._base
        assert len(masks._bits) > _GROWTH * masks._base
    for n in range(texts):
        masks.mask(f"text {n}")
    return masks


def _cache(masks: GramMasks) -> tuple[object, ...]:
    return (masks._bits, masks._words, masks._seen, masks.masks, masks._window, masks._base)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(_MASKS_KEPT - 3, _MASKS_KEPT + 3),
    st.sampled_from([1, 4, 32, 63, 64, 65, 70]),
    st.booleans(),
    st.lists(st.lists(_TEXT, min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(0, 3),
)
def test_compared_is_start_then_best(
    texts: int, size: int, wide: bool, windows: list[list[str]], seed: int
) -> None:
    """``compared`` gives the float ``start`` then ``best`` give and leaves the same caches,
    at the bounds of the masks kept and of the vocabulary, for windows asked once, again
    (their masks kept) and for results asked before (their masks kept)."""
    fast, plain = _filled(texts, wide, seed), _filled(texts, wide, seed)
    for texts_ in windows:
        window = tuple(texts_)
        for result in ("alpha beta", texts_[-1], "alpha beta"):
            plain.start(size)
            expected = plain.best(result, window)
            assert repr(fast.compared(result, window, size)) == repr(expected)
            assert _cache(fast) == _cache(plain)
            assert repr(1.0 - expected) == repr(_gain_by_sets(window, result))


@settings(max_examples=100, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=40), st.lists(_TEXT, min_size=1, max_size=6))
def test_gain_is_the_set_formula_s(evidence: list[str], results: list[str]) -> None:
    """``LoopGovernor.gain`` on a state (its masks made by it, or already there): the set
    formula's gain over the evidence window, to the bit; 1.0 with no evidence."""
    governor = LoopGovernor()
    loop = LoopState(evidence=tuple(evidence))
    window = tuple(evidence[-governor.evidence_window :])
    for result in results:
        assert repr(governor.gain(loop, result)) == repr(_gain_by_sets(window, result))
    assert governor.gain(LoopState(), results[0]) == 1.0


def test_gain_with_numbered_results_is_the_set_formula_s() -> None:
    """Results like the governor bench's (a new number in each, then words of a small
    vocabulary), more of them than the masks kept: every gain is the set formula's, and
    the state's masks are the ones it made the first time."""
    rng = random.Random(23)
    words = ("refund", "order", "parcel", "invoice", "delivery", "address", "a", "b", "7")
    governor = LoopGovernor()

    def text(n: int) -> str:
        return f"result {n * 7919}: " + " ".join(rng.choice(words) for _ in range(12))

    loop = LoopState(evidence=tuple(text(n) for n in range(40)))
    window = loop.evidence[-governor.evidence_window :]
    masks: GramMasks | None = None
    for n in range(40, 40 + _MASKS_KEPT + 40):
        result = text(n)
        assert repr(governor.gain(loop, result)) == repr(_gain_by_sets(window, result))
        masks = masks or loop._masks()
        assert loop._masks() is masks


# Words whose trigrams repeat within a segment ("0000", "aaaa") and edges of one letter.
_WORD = st.text(alphabet="a0:b", min_size=1, max_size=7)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_WORD, min_size=3, max_size=7), min_size=1, max_size=8))
def test_a_new_middle_segment_is_made_as_made_makes_it(texts: list[list[str]]) -> None:
    """``_joined`` makes a middle segment new to the cache in its own frame: two
    vocabularies fed the same texts (one through ``_joined``, one through the general
    loop, whose segments ``_made`` makes) give the same masks, the same cached segment
    masks and the same bits, a trigram repeated within a segment counted once."""
    fast, general = GramMasks(), GramMasks()
    for words in texts:
        if len(words[0]) < 2:  # _joined hands these to the general loop itself
            words = ["ab", *words]
        assert fast._joined(words) == general._joined_wide(words)
        assert fast._words == general._words
        assert fast._bits == general._bits
        for segment, mask in fast._words.items():
            assert mask == sum(1 << fast._bits[gram] for gram in set(_grams_of(segment)))
