"""The convergence check's shortcuts against the formula as written (issue 23).

``_best`` compares by the formula only the text whose key (``|A & B| / sqrt(|B|)``) is
highest when no other key is near it; ``GramMasks`` keeps the masks of the last window it
looked up text by text, for a state branched from, copied or restored with that window.
Each must give the very float the set formula gives, and ``after_action`` the same
states as the governor's general path (a similarity that is not the lexical function
itself, which compares text by text).
"""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import LoopGovernor, LoopState, lexical_similarity, read_tool
from statemachine._similarity import GramMasks, _best, _cosines, trigrams

# Small sets of few trigrams: ties, equal keys from other counts ((2, 4) and (3, 9)) and
# texts that share nothing come up often.
_SETS = st.frozensets(st.integers(0, 11), min_size=1, max_size=12)


def _by_sets(mine: frozenset[int], theirs: list[frozenset[int]]) -> float:
    """The highest cosine as lexical_similarity's formula states it."""
    return max(len(mine & seen) / math.sqrt(len(mine) * len(seen)) for seen in theirs)


def _mask(bits: frozenset[int]) -> int:
    return sum(1 << bit for bit in bits)


@settings(max_examples=500, deadline=None)
@given(_SETS, st.lists(_SETS, min_size=1, max_size=40))
def test_the_best_by_keys_is_the_formula_s_float(
    mine: frozenset[int], theirs: list[frozenset[int]]
) -> None:
    """``_best`` (one text by the formula, when its key stands alone) is the float of the
    formula over every text, and of ``_cosines`` (the formula in C)."""
    masks = tuple(map(_mask, theirs))
    sizes = tuple(float(len(seen)) for seen in theirs)
    roots = tuple(map(math.sqrt, sizes))
    shared = [len(mine & seen) for seen in theirs]
    expected = _by_sets(mine, theirs)
    assert _best(_mask(mine), len(mine), masks, sizes, roots) == expected
    assert _cosines(shared, len(mine), sizes) == expected


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3_000), st.lists(st.tuples(st.integers(0, 3_000), st.integers(1, 3_000))))
def test_large_counts_with_near_keys_give_the_formula_s_float(
    count: int, pairs: list[tuple[int, int]]
) -> None:
    """Counts as large as a wide vocabulary's, with keys as near as counts make them (the
    comparison by keys against the formula, by counts alone)."""
    pairs = [(min(shared, size, count), size) for shared, size in pairs] or [(0, 1)]
    # Texts of one size sharing as much: the same keys from other texts.
    pairs += [(shared, size) for shared, size in pairs[:3]]
    mine = (1 << count) - 1
    masks = tuple(
        (1 << shared) - 1 | (((1 << (size - shared)) - 1) << count) for shared, size in pairs
    )
    sizes = tuple(float(size) for _, size in pairs)
    roots = tuple(map(math.sqrt, sizes))
    expected = max(shared / math.sqrt(count * size) for shared, size in pairs)
    assert _best(mine, count, masks, sizes, roots) == expected


_TEXTS = st.text(alphabet="ab cA:1\n", min_size=1, max_size=24)


@settings(max_examples=200, deadline=None)
@given(st.lists(_TEXTS, min_size=1, max_size=12), st.lists(_TEXTS, min_size=1, max_size=12))
def test_a_window_compared_again_after_another_keeps_its_masks(
    first: list[str], second: list[str]
) -> None:
    """A window, another, then the first again (a branch's or a copy's): each comparison
    is lexical_similarity's highest, and the masks kept are the texts' own."""
    masks = GramMasks()
    windows = (tuple(first), tuple(second))
    for window in (*windows, windows[0], windows[1], windows[0]):
        for text in ("ab 1", window[-1] + " c"):
            assert masks.best(text, window) == max(
                lexical_similarity(text, seen) for seen in window
            )
        kept, made, sizes, roots = masks._kept(window)
        assert kept is window
        assert made == tuple(masks.mask(text)[0] for text in window)
        assert sizes == tuple(float(len(trigrams(text))) for text in window)
        assert roots == tuple(map(math.sqrt, sizes))


class _Args(BaseModel):
    query: str


@read_tool
async def _search(args: _Args) -> str:
    return args.query


class _Subclass(LoopState, frozen=True):
    """A state of a class of the user's (the governor's general path)."""


def _general(first: str, second: str) -> float:
    """lexical_similarity, not by identity: the governor compares text by text."""
    return lexical_similarity(first, second)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from([LoopState, _Subclass]))
def test_after_action_with_branches_and_copies_is_the_general_path(
    seed: int, kind: type[LoopState]
) -> None:
    """Runs of after_action that branch from earlier states, copy them and go back to them
    (the bench's reset), with the lexical masks and with the general path: the same gains,
    floats to the bit, and the same states."""
    rng = random.Random(seed)
    words = ("refund", "order", "parcel", "late", "a", "b", "I", "x1", "#42", "ok")
    fast, plain = (
        LoopGovernor(evidence_window=4),
        LoopGovernor(evidence_window=4, evidence_similarity=_general),
    )
    states: list[tuple[LoopState, LoopState]] = [(kind(), kind())]
    for n in range(40):
        ours, theirs = states[rng.randrange(len(states))] if rng.random() < 0.3 else states[-1]
        if rng.random() < 0.2:
            ours = ours.model_copy(update={"evidence": ours.evidence})
        action = fast.action(_search.call({"query": f"q{n}"}), f'{{"query": "q{n}"}}', f"c{n}")
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 9)))
        ours = fast.after_action(
            ours.record(action), call_id=f"c{n}", effect="read", result=text, ctx=None, step=n
        )
        theirs = plain.after_action(
            theirs.record(action), call_id=f"c{n}", effect="read", result=text, ctx=None, step=n
        )
        assert ours.actions[-1].gain == theirs.actions[-1].gain
        assert ours == theirs
        states.append((ours, theirs))


def test_equal_keys_whose_formulas_differ_in_the_last_bit_give_the_higher() -> None:
    """3 trigrams against a text of 9 sharing all 3, and one of 1 sharing it: both keys
    are 1.0, the formula gives 0.57735026918962573 and 0.57735026918962584 (the roots
    round apart). The text with the first highest key is not the answer: the higher
    float is, as the formula over every text gives it."""
    mine = frozenset({0, 1, 2})
    theirs = [frozenset(range(9)), frozenset({0})]
    masks = tuple(map(_mask, theirs))
    sizes = (9.0, 1.0)
    roots = (3.0, 1.0)
    expected = _by_sets(mine, theirs)
    assert expected == 1 / math.sqrt(3.0) != 3 / math.sqrt(27.0)
    assert _best(_mask(mine), 3, masks, sizes, roots) == expected
