"""after_action's step without frames (round 10 of issue 23): ``_observed`` copies the log
and notes the settled keys in place for an exact ``ActionLog`` (anything else takes the
general path), ``advance`` reads the result's mask and the window's masks in place and asks
``start`` only when it has something to do, and a trigram's ``zip`` is made without its
keyword. Each against the plain step it stands for."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import LoopGovernor, LoopState, read_tool
from statemachine._actions import ActionLog, ActionRecord, _record
from statemachine._grams import _FLOOR, _MASKS_KEPT, GramMasks, _grams_of
from statemachine._similarity import lexical_similarity


class _Args(BaseModel):
    query: str


@read_tool
async def _search(args: _Args) -> str:
    return args.query


def _state(records: list[ActionRecord], settled: list[bool]) -> LoopState:
    """A state that recorded ``records`` in turn, settling those marked (all but the last)."""
    loop = LoopState()
    for n, (record, settle) in enumerate(zip(records, settled, strict=True)):
        loop = loop.record(record)
        if settle and n < len(records) - 1:
            loop = loop.settle(record.call_id, "ok", f"r{n}")
    return loop


# Keys and exact texts from a few letters: they repeat, and the exact text of one record is
# at times the key of another (or its own).
_NAMES = st.sampled_from(["a", "b", "c", "s:a", "s:b"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_NAMES, _NAMES, st.booleans()), min_size=1, max_size=40))
def test_observed_notes_the_keys_as_settled_does(rows: list[tuple[str, str, bool]]) -> None:
    """``_observed`` notes the settled action's keys as ``_Line.settled`` does, whether the
    exact text or key was noted before (a list of positions, kept ascending) or not: the
    index's keys are those of the state made by ``_settled`` and ``_evolve``, and of a
    state indexed anew from its actions."""
    records = [
        _record(f"call-{n}", "search", "read", exact, key, f"search({n})")
        for n, (exact, key, _) in enumerate(rows)
    ]
    loop = _state(records, [settle for _, _, settle in rows])
    twin = LoopState.model_validate(loop.model_dump())
    last = records[-1].call_id
    fast = loop._observed(last, "the result", 0.25, ("e",), 1)
    assert fast is not None
    changes = twin._settled(last, "ok", "the result", 0.25)
    assert changes is not None
    plain = twin._evolve(**changes, evidence=("e",), low_gain_streak=1)
    assert fast == plain
    assert fast._line().keys == plain._line().keys
    anew = LoopState.model_validate(fast.model_dump())
    assert anew._line().keys == fast._line().keys
    assert type(fast.actions) is ActionLog
    assert list(fast.actions) == list(plain.actions)


class _OtherLog(ActionLog):  # pyright: ignore[reportGeneralTypeIssues]
    """A log of another class (final to type checkers only: untrusted code may make one)."""


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 70))
def test_a_log_of_another_class_takes_the_general_path(size: int) -> None:
    """A state whose log is not an ``ActionLog`` itself gets no state from ``_observed``
    (the caller takes ``_settled`` and ``_evolve``); after_action still settles it."""
    governor = LoopGovernor()
    loop = LoopState()
    for n in range(size):
        loop = loop.record(governor.action(_search.call({"query": f"q{n}"}), "{}", f"call-{n}"))
    other = _OtherLog(loop.actions)
    odd = loop._evolve(actions=other)
    assert odd._observed(f"call-{size - 1}", "r", 0.5, (), 0) is None
    settled = governor.after_action(
        odd, call_id=f"call-{size - 1}", effect="read", result="r", ctx=None, step=0
    )
    assert settled.actions[-1].outcome == "ok"
    assert settled.actions[-1].gain == 1.0
    assert list(settled.actions)[:-1] == list(loop.actions)[:-1]


def _done_after(count: int) -> Any:
    def done(loop: LoopState, ctx: object) -> str | None:
        return "enough" if len(loop.actions) >= count else None

    return done


def _plain_lexical(first: str, second: str) -> float:
    """The lexical similarity under another name: after_action's general path."""
    return lexical_similarity(first, second)


_WORDS = st.sampled_from(["refund", "order", "a", "7", "b:", "parcel", "x1", "late"])


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(_WORDS, min_size=0, max_size=8), min_size=1, max_size=30),
    st.integers(1, 6),
    st.integers(1, 4),
    st.sampled_from([None, 3, 12]),
)
def test_after_action_is_the_general_path_s(
    texts: list[list[str]], window: int, plateau: int, done: int | None
) -> None:
    """after_action with the default similarity (masks, the window kept, the step without
    frames) makes the states the general path makes with the same similarity under another
    name (trigram sets, ``_settled`` and ``_evolve``): the same gains to the bit, the same
    evidence, streaks, verdicts and finalize reasons, with and without a completion signal."""
    completion = None if done is None else _done_after(done)
    fast_governor = LoopGovernor(
        evidence_window=window, plateau_steps=plateau, completion=completion
    )
    plain_governor = LoopGovernor(
        evidence_window=window,
        plateau_steps=plateau,
        completion=completion,
        evidence_similarity=_plain_lexical,
    )
    fast, plain = LoopState(), LoopState()
    for n, words in enumerate(texts):
        result = f"result {n * 7919}: " + " ".join(words)
        action = fast_governor.action(_search.call({"query": f"q{n}"}), "{}", f"call-{n}")
        fast = fast_governor.after_action(
            fast.record(action),
            call_id=action.call_id,
            effect="read",
            result=result,
            ctx=None,
            step=n,
        )
        plain = plain_governor.after_action(
            plain.record(action),
            call_id=action.call_id,
            effect="read",
            result=result,
            ctx=None,
            step=n,
        )
        assert fast == plain
        assert repr(fast.actions[-1].gain) == repr(plain.actions[-1].gain)
        if done is not None and n + 1 >= done:  # the agent's signal, unless a plateau was first
            assert fast.finalize in ("complete: enough", *(v.reason for v in fast.verdicts))
            assert fast.finalize


def _filled(texts: int, wide: bool) -> GramMasks:
    """Masks that hold ``texts`` texts' masks; past ``_FLOOR`` trigrams when ``wide``."""
    masks = GramMasks()
    rng = random.Random(texts)
    if wide:
        letters = "abcdefghijklmnopqrstuvwxyz0123456789"
        while len(masks._bits) <= _FLOOR:
            masks.mask(" ".join("".join(rng.choices(letters, k=8)) for _ in range(40)), keep=False)
    masks.advance((), "first", "first", 1)  # a window signed: the vocabulary's base
    for n in range(texts):
        masks.mask(f"text {n}")
    return masks


def _cache(masks: GramMasks) -> tuple[object, ...]:
    return (masks._bits, masks._words, masks._seen, masks.masks, masks._window, masks._base)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(_MASKS_KEPT - 3, _MASKS_KEPT + 3),
    st.sampled_from([1, 4, 32, 63, 64, 65, 70]),
    st.booleans(),
)
def test_advance_starts_again_as_start_does(texts: int, size: int, wide: bool) -> None:
    """``advance`` asks ``start`` only when one of its tests may hold: its cache after a
    comparison is the one ``start`` then the same comparison leave, at the bounds of the
    masks kept and of the vocabulary."""
    fast, plain = _filled(texts, wide), _filled(texts, wide)
    window = ("alpha beta", "beta gamma")
    plain.start(size)
    assert fast.advance(window, "gamma delta", "gamma delta", size) == plain.advance(
        window, "gamma delta", "gamma delta", size
    )
    assert _cache(fast) == _cache(plain)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab :\u00e91", max_size=12))
def test_grams_are_the_slices(text: str) -> None:
    """A text's trigrams (zip without its keyword) are its slices of three, in order (the
    text itself when shorter), and its mask sets their bits."""
    expected = [text[at : at + 3] for at in range(len(text) - 2)] if len(text) >= 3 else [text]
    assert list(_grams_of(text)) == expected
    masks = GramMasks()
    mask = masks._made(text)
    assert mask == sum(1 << masks._bits[gram] for gram in set(expected))
