"""The mask of a text of one word from cached pieces (``GramMasks._pieced``, round 13 of
issue 23): a tool's JSON result or an id, cut before its ',' and ':', each piece a chunk
with the two characters after it, each piece's mask made once and kept with the segments.
The mask is exactly the text's set of trigrams (decoded through the vocabulary), for texts
with and without cuts, short ones, unicode that folds, after the caches start again; the
gains of whole runs are those of the plain mask (``_made`` of the folded text) to the bit."""

from __future__ import annotations

import json
import random
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import PURE_GRAMS as similarity

from statemachine import LoopGovernor, LoopState, read_tool
from statemachine._similarity import trigrams

_PIECES = similarity._PIECES
GramMasks = similarity.GramMasks
_grams_of = similarity._grams_of

# The algorithm as Python source: see the fixture pure_grams (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("pure_grams")

# Cut characters, what JSON has around them, a letter that folds to two characters
# (U+0130), one that folds to one, digits; white space now and then (two words or more:
# the segments' way, which shares the cache).
_TEXT = st.text(alphabet=',:,:"{}aAb01\u0130\u00c9 ', max_size=16)
_WORD = st.text(alphabet=',:"{}aAb01\u0130\u00c9', max_size=16)


def _decoded(masks: GramMasks, mask: int) -> set[str]:
    """The trigrams whose bits ``mask`` sets, through the vocabulary of ``masks``."""
    names = {bit: gram for gram, bit in masks._bits.items()}
    assert len(names) == len(masks._bits)  # one bit per trigram
    return {names[bit] for bit in range(mask.bit_length()) if mask >> bit & 1}


def _plain(self: GramMasks, words: list[str]) -> int:
    """The mask as it was made before pieces: the folded text's trigrams one by one."""
    return self._made(words[0] if words else "")


@settings(max_examples=300, deadline=None)
@given(st.lists(_TEXT, min_size=1, max_size=12), st.sets(st.integers(0, 11)))
def test_mask_is_the_texts_trigrams(texts: list[str], starts: set[int]) -> None:
    """Each text's mask (one cache for all, so pieces found kept) sets exactly the bits of
    its trigrams, and its count is their number; the caches started again (vocabulary and
    all) before the texts marked."""
    masks = GramMasks()
    with mock.patch.object(similarity, "_TRIGRAMS_KEPT", 0):
        for at, text in enumerate(texts):
            if at in starts:
                masks.start(1)  # past a bound of 0: the vocabulary starts again
                assert not masks._bits
                assert not masks._words
            mask, count = masks.mask(text, keep=False)
            assert _decoded(masks, mask) == set(trigrams(text))
            assert count == len(trigrams(text))
    # Every piece kept is three characters or more and holds its own trigrams' bits.
    for piece, kept in masks._words.items():
        assert len(piece) >= 3
        assert _decoded(masks, kept) == set(_grams_of(piece))


@settings(max_examples=300, deadline=None)
@given(_WORD)
def test_pieces_cover_the_text(word: str) -> None:
    """The pieces are the text's own substrings, and the trigrams of those of three
    characters or more are exactly the text's (so is the text of one chunk)."""
    folded = word.lower()
    pieces = _PIECES.findall(folded)
    assert all(piece in folded for piece in pieces)
    if len(folded) < 3:
        return
    found = {gram for piece in pieces if len(piece) >= 3 for gram in _grams_of(piece)}
    assert found == set(_grams_of(folded))


def test_the_bench_result_and_its_new_piece() -> None:
    """The in-memory bench's tool result: six pieces; a new key's text makes only the
    piece that holds the key, and its mask is the plain one, bit for bit."""
    masks, plain = GramMasks(), GramMasks()

    def text(key: str) -> str:
        return json.dumps({"key": key, "value": 42, "unit": "widgets"}, separators=(",", ":"))

    assert _PIECES.findall(text("k294")) == [
        '{"key":"',
        ':"k294","',
        ',"value":4',
        ':42,"',
        ',"unit":"',
        ':"widgets"}',
    ]
    for n in range(40):
        before = set(masks._words)
        mask = masks.mask(text(f"k{n}"))
        with mock.patch.object(GramMasks, "_pieced", _plain):
            assert plain.mask(text(f"k{n}")) == mask
        assert masks._bits == plain._bits  # bits given in the text's order
        if n:
            assert set(masks._words) - before == {f':"k{n}","'}


def test_short_texts_and_texts_of_one_chunk() -> None:
    """Fewer than three characters (their one trigram is themselves), no cut, and a last
    piece of fewer than three characters: the plain mask."""
    for text in ("", " ", "a", ",", ",,", "a,", ",a", ":,", "abc", "ab,", "a,b", "a,b,", "{}:"):
        masks, plain = GramMasks(), GramMasks()
        with mock.patch.object(GramMasks, "_pieced", _plain):
            expected = plain.mask(text)
        assert masks.mask(text) == expected, text
        assert _decoded(masks, expected[0]) == set(trigrams(text)) or not text.strip()


def test_a_wide_vocabulary_makes_the_text_whole() -> None:
    """Past ``_NARROW_BITS`` trigrams no piece is made or kept: the text whole."""
    masks = GramMasks()
    rng = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    while len(masks._bits) <= similarity._NARROW_BITS:
        masks.mask("".join(rng.choices(letters, k=400)), keep=False)
    before = dict(masks._words)
    text = '{"key":"k1","value":42}'
    mask, count = masks.mask(text)
    assert masks._words == before
    assert _decoded(masks, mask) == set(trigrams(text))
    assert count == len(trigrams(text))


class _Args(BaseModel):
    key: str


@read_tool
async def _lookup(args: _Args) -> str:
    return args.key


def _gains(results: list[str], repeats: int) -> list[float | None]:
    """The gains of a run whose calls read ``results`` in turn, ``repeats`` times over."""
    governor = LoopGovernor()
    loop = LoopState()
    gains: list[float | None] = []
    for n, result in enumerate(results * repeats):
        call_id = f"call-{n}"
        loop = loop.record(governor.action(_lookup.call({"key": f"k{n}"}), "{}", call_id))
        loop = governor.after_action(
            loop, call_id=call_id, effect="read", result=result, ctx=None, step=n
        )
        gains.append(loop.actions[-1].gain)
    return gains


def _result(key: str, value: int) -> str:
    """A tool's JSON result, without white space."""
    return json.dumps({"key": key, "value": value}, separators=(",", ":"))


_RESULTS = st.lists(
    st.one_of(
        st.builds(_result, st.text(alphabet="k0123:,", max_size=6), st.integers(0, 99)),
        _TEXT,
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(_RESULTS, st.integers(1, 3))
def test_gains_of_whole_runs_are_the_plain_masks(results: list[str], repeats: int) -> None:
    """A run's gains with masks from pieces are those with the plain masks, to the bit."""
    fast = _gains(results, repeats)
    with mock.patch.object(GramMasks, "_pieced", _plain):
        plain = _gains(results, repeats)
    assert list(map(repr, fast)) == list(map(repr, plain))


def test_gains_of_the_bench_run_are_the_plain_masks() -> None:
    """The in-memory bench's results (a new key each call), past the masks kept."""
    results = [
        json.dumps({"key": f"k{n}", "value": 42, "unit": "widgets"}, separators=(",", ":"))
        for n in range(similarity._MASKS_KEPT + 50)
    ]
    fast = _gains(results, 1)
    with mock.patch.object(GramMasks, "_pieced", _plain):
        plain = _gains(results, 1)
    assert list(map(repr, fast)) == list(map(repr, plain))
    assert len(set(fast)) > 1
