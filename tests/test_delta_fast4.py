"""The checkpoint producer's fourth round: ``persist._delta._kept`` reads the run of an
exact tuple by slicing it, not by ``islice``, and gives the answer it gave before.

``_kept`` decides which op a list's change is stored as (an append, a splice, a shift or
a set), so the same answer for every input keeps the stored bytes the same. The items
drawn are equal without being the same object (1, 1.0, True, texts built apart), so an
answer by equality is caught; sequences that are not exact tuples (lists, a tuple
subclass iterating other objects than it indexes) must be read as before, through their
iterator.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine.persist import _delta
from statemachine.persist._delta import _kept, _tuple_change


def _former(old: Any, new: Any, start: int, count: int) -> bool:
    """``_kept`` as it was before this round (every run read through ``islice``)."""
    if count > len(new) or start + count > len(old):
        return False
    if start == 0 and count == len(old):
        return new is old or all(map(operator.is_, new, old))
    run: Iterator[Any] = itertools.islice(old, start, start + count)
    return all(map(operator.is_, new, run))


class _Shifty(tuple[Any, ...]):
    """A tuple whose iterator gives other objects than its items (a copy of each text)."""

    __slots__ = ()

    def __iter__(self) -> Iterator[Any]:
        return ((item + "!")[:-1] if type(item) is str else item for item in _own(self))


def _own(items: tuple[Any, ...]) -> list[Any]:
    """A tuple's very items, read by ``tuple``'s own iterator (not a subclass's)."""
    return list(tuple[Any, ...].__iter__(items))


_TEXT = "".join(["ab", "c"])
_POOL: list[Any] = [1, 1.0, True, "abc", _TEXT, None, (), (1,), [1]]
_items = st.lists(st.sampled_from(range(len(_POOL))), max_size=12)


def _made(kind: str, picks: list[int]) -> Sequence[Any]:
    items = [_POOL[pick] for pick in picks]
    if kind == "tuple":
        return tuple(items)
    if kind == "list":
        return items
    return _Shifty(items)


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[Sequence[Any], Sequence[Any], int, int]:
    kind = draw(st.sampled_from(["tuple", "tuple", "list", "shifty"]))
    old = _made(kind, draw(_items))
    how = draw(st.sampled_from(["copy", "grown", "shifted", "other"]))
    if how == "copy":
        new: Sequence[Any] = tuple(old)
    elif how == "grown":
        new = (*old, *_made("tuple", draw(_items)))
    elif how == "shifted":
        items = _own(old) if isinstance(old, tuple) else list(old)
        new = (*items[draw(st.integers(0, 4)) :], *_made("tuple", draw(_items)))
    else:
        new = _made(draw(st.sampled_from(["tuple", "list"])), draw(_items))
    if draw(st.booleans()) and new:  # one item swapped for an equal or other one
        at = draw(st.integers(0, len(new) - 1))
        new = (*new[:at], _POOL[draw(st.sampled_from(range(len(_POOL))))], *new[at + 1 :])
    start = draw(st.integers(0, len(old) + 1))
    count = draw(st.integers(0, len(old) + 1))
    return old, new, start, count


@settings(max_examples=400, deadline=None)
@given(_pairs())
def test_kept_answers_as_before(pair: tuple[Any, Any, int, int]) -> None:
    old, new, start, count = pair
    assert _kept(old, new, start, count) is _former(old, new, start, count)


def test_a_subclass_is_read_through_its_iterator() -> None:
    old = _Shifty(["abc", "abd", 1])
    new = ("abd", 1)
    # The subclass's iterator gives copies of its texts: not the very objects.
    assert _former(old, new, 1, 2) is False
    assert _kept(old, new, 1, 2) is False
    # Its items themselves are new's: an exact tuple of them is kept.
    assert _kept(tuple(_own(old)), new, 1, 2) is True


def test_a_run_ends_where_it_is_asked_to() -> None:
    old = (1, 2.5, "x", None)
    assert _kept(old, (2.5, "x", 7), 1, 2)
    assert not _kept(old, (2.5, "x", 7), 1, 3)
    assert _kept(old, (1, 2.5, 9), 0, 2)
    assert not _kept(old, (1, 2.5, 9), 0, 3)


@settings(max_examples=300, deadline=None)
@given(_pairs())
def test_tuple_change_gives_the_same_ops(
    pair: tuple[Sequence[Any], Sequence[Any], int, int],
) -> None:
    old, new, _, _ = pair
    if not isinstance(old, tuple) or not isinstance(new, tuple):
        return
    encoded = [[index] for index in range(len(old))]  # the old items' encodings, by position
    made = _tuple_change(old, encoded, new, ["fields", "loop", "evidence"])
    saved = _delta._kept
    _delta._kept = _former  # type: ignore[assignment]
    try:
        plain = _tuple_change(old, encoded, new, ["fields", "loop", "evidence"])
    finally:
        _delta._kept = saved
    assert made == plain
