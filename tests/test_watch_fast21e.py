# pyright: reportPrivateUsage=false, reportUnknownMemberType=false, reportUnknownVariableType=false, reportUnknownArgumentType=false
"""A pair's function checks the budget's values with the runtime and the agent, all at
once (``_raw_terms``'s last three: the budget's ``__dict__``, a view of its words and
their bytes): the very dict kept, whose words from its type through its values' pointer
(its size, tables and version, which CPython changes at every change of its contents)
are the bytes they were. The same verdicts as the budget's values compared one at a
time (the Watch without its raw check) and as ``Watch._checked``: for any value set to
another object, an equal copy, ``None`` or put back, through the dict or past the frozen
model, a key added, removed or moved, the ``__dict__`` replaced by a copy, a changed
copy or a ``dict`` subclass; and only a ``Budget`` itself whose ``__dict__`` is a
``dict`` takes it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import test_watch_fast19 as fast19
from hypothesis import given, settings
from hypothesis import strategies as st
from test_watch_fast16 import _fast_of

from statemachine import Budget, _watch

_RUN = fast19._RUN
_KEYS = ("tokens", "cost", "tool_calls", "wall_clock")
_HOW = ("other", "copy", "none", "back", "set-other", "set-back", "drop", "add", "moved")


class _Dict(dict[str, Any]):
    pass


class _SameBudget(Budget, frozen=True):
    pass


def _equal_copy(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return int(str(value))  # equal, another object (not a small int)
    return object()


def _change(budget: Any, key: str, how: str) -> None:
    values = vars(budget)
    was = values.get(key)
    if how == "other":
        values[key] = object()
    elif how == "copy":
        values[key] = _equal_copy(was)
    elif how == "none":
        values[key] = None
    elif how == "back":  # changed, then put back: the very object again
        values[key] = object()
        values[key] = was
    elif how == "set-other":  # past the frozen model
        object.__setattr__(budget, key, object())
    elif how == "set-back":
        object.__setattr__(budget, key, object())
        object.__setattr__(budget, key, was)
    elif how == "drop":
        values.pop(key, None)
    elif how == "add":
        values[key + "_more"] = None
    else:  # moved to the end: the same keys and values, in another order
        if key in values:
            values[key] = values.pop(key)


def _restore(budget: Any, kept: dict[str, Any], values: dict[str, Any]) -> None:
    object.__setattr__(budget, "__dict__", values)
    values.clear()
    values.update(kept)


def _cases() -> list[fast19._Seen]:
    cases = [seen for seen in _RUN if _fast_of(seen[0], seen[3], seen[4]) is not None]
    assert cases
    return cases


def test_the_raw_check_holds_the_budget_dict_and_its_words() -> None:
    for seen in _cases():
        watch = seen[0]
        words = watch._raw
        assert words is not None
        assert len(words) == 9
        values = vars(watch._agent.budget)
        assert words[6] is values
        assert words[7].raw == words[8]
        fast = fast19._fast(seen)
        assert "__dict__" in fast.__code__.co_names
        consts = fast.__code__.co_consts
        for part in words:
            assert any(const is part for const in consts)
        assert fast19._verdict(seen) == fast19._verdict(seen, raw=False)


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(0, 10**6),
    changes=st.lists(
        st.tuples(st.sampled_from(_KEYS), st.sampled_from(_HOW)), min_size=0, max_size=3
    ),
)
def test_budget_values_changed_in_place_are_judged_as_one_at_a_time(
    at: int, changes: list[tuple[str, str]]
) -> None:
    """Any of the budget's values changed in place (another object, an equal copy, None,
    changed and put back, through its dict or past the frozen model; a key dropped,
    added or moved): the raw check answers as the values compared one at a time, and
    ``accept`` as ``_checked``; a value put back is judged as one never changed."""
    cases = _cases()
    seen = cases[at % len(cases)]
    budget = seen[0]._agent.budget
    values = vars(budget)
    kept = dict(values)
    unchanged = fast19._verdict(seen)
    try:
        for key, how in changes:
            _change(budget, key, how)
        fast19._judged_alike(seen)
        if all(how in ("back", "set-back") for _, how in changes):
            assert fast19._verdict(seen) == unchanged
    finally:
        _restore(budget, kept, values)
    assert fast19._verdict(seen) == unchanged


@pytest.mark.parametrize("key", _KEYS)
def test_each_budget_value_changed_is_refused_by_the_raw_check(key: str) -> None:
    for seen in _cases():
        budget = seen[0]._agent.budget
        values = vars(budget)
        kept = dict(values)
        unchanged = fast19._verdict(seen)
        values[key] = object()
        try:
            assert fast19._verdict(seen)[0] is None
            assert fast19._verdict(seen, raw=False)[0] is None
            fast19._judged_alike(seen)
        finally:
            _restore(budget, kept, values)
        assert fast19._verdict(seen) == unchanged


@pytest.mark.parametrize("how", ["copy", "changed", "subclass"])
def test_a_budget_dict_replaced_is_judged_as_one_at_a_time(how: str) -> None:
    """The budget's ``__dict__`` replaced (past the frozen model) by an equal copy, a
    copy with another value or a ``dict`` subclass: the kept dict, still unchanged, is
    not the budget's; the values are compared one at a time."""
    for seen in _cases():
        budget = seen[0]._agent.budget
        values = vars(budget)
        kept = dict(values)
        unchanged = fast19._verdict(seen)
        other: dict[str, Any] = dict(values)
        if how == "changed":
            other["tokens"] = object()
        elif how == "subclass":
            other = _Dict(values)
        object.__setattr__(budget, "__dict__", other)
        try:
            fast19._judged_alike(seen)
            if how == "copy":
                assert fast19._verdict(seen) == unchanged  # the same values: accepted
            else:
                assert fast19._verdict(seen)[0] is None
        finally:
            _restore(budget, kept, values)
        assert fast19._verdict(seen) == unchanged


def test_only_a_budget_itself_with_a_dict_takes_the_raw_check() -> None:
    watch = _RUN[0][0]
    rt, agent = watch._rt, watch._agent
    assert _watch._raw_terms(rt, agent) is not None
    assert len(_watch._raw_terms(rt, agent) or ()) == 9
    budget = agent.budget
    values = vars(budget)
    try:
        object.__setattr__(budget, "__class__", _SameBudget)
        assert len(_watch._raw_terms(rt, agent) or ()) == 6
        object.__setattr__(budget, "__class__", Budget)
        object.__setattr__(budget, "__dict__", _Dict(values))
        assert len(_watch._raw_terms(rt, agent) or ()) == 6
    finally:
        object.__setattr__(budget, "__class__", Budget)
        object.__setattr__(budget, "__dict__", values)
    assert len(_watch._raw_terms(rt, agent) or ()) == 9


@pytest.mark.parametrize("raw", [0, 1, 2])
def test_each_raw_kind_s_code_names_what_it_checks(raw: int) -> None:
    code = _watch._pair_code(True, True, True, False, True, _KEYS, raw)
    names = code.co_names
    assert ("_raw" in names) is bool(raw)
    assert ("raw" in names) is bool(raw)
    found = sum(map(_watch._placeholder, code.co_consts))
    assert found == 14 + 16 + len(_KEYS) + (0, 6, 9)[raw]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's layout")
def test_a_dict_s_words_change_at_each_change_of_its_contents() -> None:
    """The probe's rule, on another dict: each change (a value put back included) gives
    words not seen before; reading it changes nothing."""
    import ctypes

    size = _watch._dict_laid_out()
    assert size == 5 * _watch._WORD
    first, second = object(), object()
    values: dict[str, Any] = {"tokens": first, "cost": None}
    view = (ctypes.c_char * size).from_address(id(values) + _watch._WORD)
    seen = {view.raw}
    assert values["tokens"] is first
    assert len(values) == 2
    assert "cost" in values
    assert view.raw in seen  # reading is no change
    changes: tuple[Callable[[], object], ...] = (
        lambda: values.__setitem__("tokens", second),
        lambda: values.__setitem__("tokens", first),
        lambda: values.pop("cost"),
        lambda: values.setdefault("cost", None),
        lambda: values.update(tokens=second),
        lambda: values.update({"tokens": first}),
        lambda: values.clear(),
    )
    for change in changes:
        change()
        assert view.raw not in seen
        seen.add(view.raw)
