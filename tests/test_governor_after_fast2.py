"""The convergence check's mask of a text of several words (``GramMasks._joined``, round 9
of issue 23): one f-string a word, and the masks of segments made in the call joined
last. Checked against the general loop (``_joined_wide``, which gives the same bits in the
same vocabulary) and against the trigram sets, in a vocabulary fed the same texts in the
same order (so that new trigrams get the same bits in both)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import LoopGovernor, LoopState, read_tool
from statemachine._grams import GramMasks
from statemachine._similarity import _fold, trigrams
from statemachine._tools import ReadCall, WriteCall

# Words of one letter, digits, a colon and case: the segments' edges (a first or last
# word of one letter, a word that repeats, a number seen once).
_WORDS = st.text(alphabet="abAZ01:\u00e9", min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_WORDS, min_size=2, max_size=7), min_size=1, max_size=8))
def test_joined_gives_the_general_loop_s_bits(texts: list[list[str]]) -> None:
    """Two vocabularies fed the same texts: the fast loop's masks are the general loop's,
    int for int (the same segments made in the same order), and each sets exactly the
    bits of the text's trigrams; each text asked twice (its segments kept the second
    time)."""
    fast, general = GramMasks(), GramMasks()
    for _ in range(2):
        for words in texts:
            folded = [word.lower() for word in words]
            if len(folded[0]) < 2:  # _joined hands these to the general loop itself
                continue
            mine = fast._joined(folded)
            theirs = general._joined_wide(folded)
            assert mine == theirs
            assert fast._bits == general._bits
            text = " ".join(folded)
            assert mine == sum(1 << fast._bits[gram] for gram in trigrams(_fold(text)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_WORDS, min_size=1, max_size=7), min_size=2, max_size=6))
def test_masks_count_the_shared_trigrams(texts: list[list[str]]) -> None:
    """Any two texts' masks share as many bits as their trigram sets share trigrams."""
    masks = GramMasks()
    joined = [" ".join(words) for words in texts]
    made = [masks.mask(text) for text in joined]
    for first, (mask, size) in zip(joined, made, strict=True):
        assert size == len(trigrams(first))
        for second, (other, _) in zip(joined, made, strict=True):
            assert (mask & other).bit_count() == len(trigrams(first) & trigrams(second))


def _gain_by_sets(window: tuple[str, ...], result: str) -> float:
    """The gain as first written: 1 - the highest cosine of the trigram sets."""
    mine = trigrams(result)
    best = max(
        len(mine & trigrams(seen)) / (len(mine) * len(trigrams(seen))) ** 0.5 for seen in window
    )
    return 1.0 - best


def test_after_action_gains_with_numbered_results_are_the_set_formula_s() -> None:
    """Results like the governor bench's (a new number in each, then words drawn from a
    small vocabulary): every gain after_action records is the set formula's, to the bit."""
    rng = random.Random(23)
    words = [
        "refund",
        "order",
        "parcel",
        "invoice",
        "delivery",
        "a",
        "b",
        "address",
        "7",
        "account",
    ]
    governor = LoopGovernor()
    loop = LoopState()
    seen: list[str] = []
    for n in range(120):
        result = f"result {n * 7919}: " + " ".join(rng.choice(words) for _ in range(12))
        window = tuple(seen[-governor.evidence_window :])
        action = governor.action(_call(n), "{}", f"call-{n}")
        loop = governor.after_action(
            loop.record(action), call_id=f"call-{n}", effect="read", result=result, ctx=None, step=n
        )
        expected = _gain_by_sets(window, result) if window else 1.0
        assert loop.actions[-1].gain == expected
        seen.append(result)


class _Args(BaseModel):
    query: str


@read_tool
async def _search(args: _Args) -> str:
    return args.query


def _call(n: int) -> ReadCall | WriteCall:
    return _search.call({"query": f"q{n}"})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="ab A:1", max_size=12), max_size=7),
    st.lists(st.text(alphabet="ab A:1", min_size=1, max_size=12), min_size=1, max_size=9),
    st.integers(1, 6),
)
def test_the_window_moves_on_as_the_plain_slices_move_it(
    evidence: list[str], results: list[str], size: int
) -> None:
    """``advance`` moves the window (texts, masks and sizes) on as ``(*window, kept)[-size:]``
    does, whether the window is full or not yet: the masks and sizes kept are each text's
    own; the best is the set formula's."""
    masks, window = GramMasks(), tuple(evidence)
    for result in results:
        kept = result[:5]
        plain = window[-size:]
        best, after = masks.advance(window, result, kept, size)
        assert after == (*plain, kept)[-size:]
        if plain:
            assert 1.0 - best == _gain_by_sets(plain, result)
        kept_window = masks._window
        assert kept_window is not None
        assert kept_window[0] is after
        assert kept_window[1] == tuple(masks.mask(text)[0] for text in after)
        assert kept_window[2] == tuple(float(masks.mask(text)[1]) for text in after)
        window = after


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["ok", "failed", "pending"]), min_size=1, max_size=40),
    st.sampled_from(["kept", "copied", "restored", "stale"]),
)
def test_observed_reads_the_index_as_settle_does(outcomes: list[str], kind: str) -> None:
    """``_observed`` (after_action's one step, which reads the state's index without
    ``_line``'s frames while it covers the actions) makes the state ``_settled`` and
    ``_evolve`` make, and an index that finds what a state's own index finds, for a state
    that holds its index, a copy with its actions anew (no index), a restored one and one
    whose index does not cover its last action; the masks are the state's."""
    governor = LoopGovernor()
    loop = LoopState()
    for n, outcome in enumerate(outcomes):
        loop = loop.record(governor.action(_call(n), "{}", f"call-{n}"))
        if outcome != "pending":
            loop = loop.settle(f"call-{n}", "ok" if outcome == "ok" else "failed", f"r{n}")
    last = governor.action(_call(999), "{}", "call-last")
    if kind == "stale":  # an index that covers all but the last action
        loop._line()
        loop = loop._evolve(actions=loop.actions.appended(last))
    else:
        loop = loop.record(last)
    loop._masks()
    if kind == "copied":
        loop = loop.model_copy(update={"actions": list(loop.actions)})
    elif kind == "restored":
        loop = LoopState.model_validate(loop.model_dump())
    twin = LoopState.model_validate(loop.model_dump())
    evidence = ("e1", "e2")
    fast = loop._observed("call-last", "the result", 0.5, evidence, 2)
    assert fast is not None
    changes = twin._settled("call-last", "ok", "the result", 0.5)
    assert changes is not None
    plain = twin._evolve(**changes, evidence=evidence, low_gain_streak=2)
    assert fast == plain
    assert fast._line().size == len(fast.actions)
    for action in plain.actions:
        assert fast.earlier(action.exact) == plain.earlier(action.exact)
        assert fast.earlier(action.key) == plain.earlier(action.key)
    assert fast._grams is loop._grams
