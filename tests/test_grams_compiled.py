"""statemachine/_grams.py compiled by mypyc (setup.py; issue 23, twenty-eighth round)
against the same file run as Python source (``support.PURE_GRAMS``).

The compiled module is what ``import`` finds after ``make install`` (unless the package
was built with ``STATEMACHINE_PURE=1``); every other test of the governor and the
similarities runs on it. Here the two are driven through the same operations: every
answer, and every cache after every operation (vocabulary, masks, segments, pieces, the
window kept), must be equal, with the bounds that start the caches again lowered in both
modules so that those paths run too; and whole runs of the governor give the same gains,
to the bit, on either class.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import PURE_GRAMS
from test_governor_after_fast8 import _gains as run_gains

import statemachine._governor as governor_module
import statemachine._grams as compiled

# What a GramMasks holds (its slots): every cache is compared after every operation.
_STATE: tuple[str, ...] = PURE_GRAMS.GramMasks.__slots__

# The bounds that start the caches again, lowered in both modules at once.
_BOUNDS = ("_FLOOR", "_GROWTH", "_MASKS_KEPT", "_NARROW_BITS", "_TRIGRAMS_KEPT")


def test_the_compiled_module_is_the_one_imported() -> None:
    """``make install`` builds the extension, and ``import`` finds it before the file; a
    package built with ``STATEMACHINE_PURE=1`` imports the file."""
    found = Path(compiled.__file__ or "")
    if os.environ.get("STATEMACHINE_PURE") == "1":
        assert found.suffix == ".py", found
    else:
        assert found.suffix == ".so", f"{found}: the build did not compile it (see setup.py)"
        source = found.parent / "_grams.py"
        assert found.stat().st_mtime >= source.stat().st_mtime, (
            f"{found} is older than {source}: run make install to compile it again"
        )
    assert Path(PURE_GRAMS.__file__ or "").suffix == ".py"


def _state(masks: object) -> dict[str, object]:
    return {name: getattr(masks, name) for name in _STATE}


# Texts as the governor sees them: words, JSON with its cut characters, numbers that
# grow, letters that fold to two characters (U+0130), white space, texts under three.
_WORDS = ["refund", "order", "parcel", "Invoice", "İstanbul", "a", "é", "k1", "x"]
_text = st.one_of(
    st.text(alphabet="abcé İ,:{}\"' 0123\n\t", max_size=40),
    st.lists(st.sampled_from(_WORDS), min_size=1, max_size=8).map(" ".join),
    st.builds(
        lambda key, value: f'{{"key": "{key}", "value": {value}}}',
        st.sampled_from(["k1", "k22", "order", "İ"]),
        st.integers(0, 10**6),
    ),
)

_operation = st.one_of(
    st.tuples(st.just("mask"), _text, st.booleans()),
    st.tuples(st.just("advance"), _text, _text, st.integers(1, 6)),
    st.tuples(st.just("best"), _text, st.integers(0, 6)),
    st.tuples(st.just("compared"), _text, st.integers(1, 6)),
    st.tuples(st.just("start"), st.integers(0, 8)),
)


def _apply(masks: object, operation: tuple[object, ...], evidence: tuple[str, ...]) -> object:
    kind = operation[0]
    if kind == "mask":
        return masks.mask(operation[1], keep=operation[2])  # type: ignore[attr-defined]
    if kind == "advance":
        return masks.advance(evidence, operation[1], operation[2], operation[3])  # type: ignore[attr-defined]
    if kind == "best":  # (a window of one text or more)
        window = evidence[-operation[2] :] if operation[2] else ()
        if not window:
            return masks.mask(operation[1])  # type: ignore[attr-defined]
        return masks.best(operation[1], window)  # type: ignore[attr-defined]
    if kind == "compared":  # (the window as the governor passes it: the evidence kept)
        return masks.compared(operation[1], evidence, operation[2])  # type: ignore[attr-defined]
    return masks.start(operation[1])  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_operation, min_size=1, max_size=40),
    st.lists(st.integers(0, 64), min_size=len(_BOUNDS), max_size=len(_BOUNDS)),
    st.booleans(),
)
def test_the_compiled_class_answers_and_keeps_what_the_source_does(
    operations: list[tuple[object, ...]], bounds: list[int], lowered: bool
) -> None:
    """The same operations on both classes: the same answers (floats by repr) and the
    same caches after each; with the caches' bounds as they are, or lowered (in both)."""
    ours, source = compiled.GramMasks(), PURE_GRAMS.GramMasks()
    patches = []
    if lowered:
        for name, bound in zip(_BOUNDS, bounds, strict=True):
            patches += [
                mock.patch.object(compiled, name, bound),
                mock.patch.object(PURE_GRAMS, name, bound),
            ]
    for patch in patches:
        patch.start()
    try:
        # Each class's own evidence (the tuple its advance made): its window cache knows
        # a window by identity, as the governor passes it back.
        evidence: tuple[str, ...] = ()
        evidence_source: tuple[str, ...] = ()
        for operation in operations:
            got = _apply(ours, operation, evidence)
            expected = _apply(source, operation, evidence_source)
            assert repr(got) == repr(expected), operation
            assert _state(ours) == _state(source), operation
            if operation[0] == "advance":
                assert isinstance(got, tuple)
                assert isinstance(expected, tuple)
                evidence, evidence_source = got[1], expected[1]
    finally:
        for patch in patches:
            patch.stop()


def test_a_lowered_bound_reaches_the_compiled_module() -> None:
    """The bounds are read at each call from the module (what the test above lowers):
    a vocabulary past a bound of 0 starts again in the compiled class too."""
    masks = compiled.GramMasks()
    masks.mask("refund order 1042")
    assert masks._bits
    with mock.patch.object(compiled, "_TRIGRAMS_KEPT", 0):
        masks.start(1)
    assert not masks._bits


def _gains(results: list[str], masks_class: type) -> list[float | None]:
    """The gains of a run whose calls read ``results`` in turn, masks made by ``masks_class``
    (the governor's run of tests/test_governor_after_fast8.py)."""
    with mock.patch.object(governor_module, "GramMasks", masks_class):
        return run_gains(results, 1)


@settings(max_examples=80, deadline=None)
@given(st.lists(_text, min_size=1, max_size=50))
def test_whole_runs_gain_the_same_on_either_class(results: list[str]) -> None:
    """The governor's gains over a run, to the bit, with the compiled class and with the
    source's (the plateau and every verdict follow from them)."""
    assert list(map(repr, _gains(results, compiled.GramMasks))) == list(
        map(repr, _gains(results, PURE_GRAMS.GramMasks))
    )


@pytest.mark.parametrize("count", [40, 400])
def test_a_long_run_gains_the_same_on_either_class(count: int) -> None:
    """Past the evidence window (32) and the caches' bounds: results like the bench's
    (a small dict as JSON, a number that grows) and words repeated."""
    words = ["refund", "order", "parcel", "invoice", "delivery", "address"]
    results = [
        f'{{"key": "k{n}", "value": {n * 7919}}}'
        if n % 3
        else " ".join(words[(n + k) % 6] for k in range(8)) + f" {n}"
        for n in range(count)
    ]
    assert list(map(repr, _gains(results, compiled.GramMasks))) == list(
        map(repr, _gains(results, PURE_GRAMS.GramMasks))
    )
