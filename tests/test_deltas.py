"""Checkpoint deltas: what turns one saved document into the next, and back.

The store saves only what changed since the run's last checkpoint. These tests hold
the diff to two promises: applying a delta rebuilds the new document exactly (a
property over arbitrary JSON documents and edits), and a change deep in the state (the
governor's actions, a sliding window of evidence) costs what changed, not the whole
list, so the bytes per transition stay flat as the run grows.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine import MemoryCheckpointer
from statemachine.persist._delta import _apply, _diff, _seen_of

pytestmark = pytest.mark.anyio

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.text(max_size=6),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)
documents = st.dictionaries(st.text(max_size=3), json_values, max_size=5)


def edit(document: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """A document like the one before, with lists grown, shifted, cut or changed."""
    new = copy.deepcopy(document)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            for key in list(value):
                value[key] = walk(value[key])
            if data.draw(st.booleans()):
                value[data.draw(st.text(max_size=3))] = data.draw(json_values)
            return value
        if isinstance(value, list):
            how = data.draw(st.sampled_from(["keep", "append", "shift", "cut", "last", "new"]))
            if how == "append":
                value.extend(data.draw(st.lists(json_values, max_size=3)))
            elif how == "shift" and value:
                del value[: data.draw(st.integers(1, len(value)))]
                value.extend(data.draw(st.lists(json_values, max_size=3)))
            elif how == "cut" and value:
                del value[data.draw(st.integers(0, len(value) - 1)) :]
            elif how == "last" and value:
                value[-1] = data.draw(json_values)
            elif how == "new":
                return data.draw(json_values)
            return [walk(item) for item in value]
        return value

    return walk(new)


def fingerprint(document: Any) -> str:
    """Exact text: 1, 1.0, True and Decimal('1.00') all differ."""
    return json.dumps(document, default=lambda d: f"Decimal({d})", sort_keys=False)


@settings(max_examples=200, deadline=None)
@given(first=documents, data=st.data())
def test_a_delta_rebuilds_the_next_document_exactly(first: dict[str, Any], data: Any) -> None:
    """Over a chain of edits, applying each delta to the last rebuilt document gives
    the new document, value for value, key order included."""
    rebuilt = copy.deepcopy(first)
    seen = _seen_of(first)
    current = first
    for _ in range(3):
        new = edit(current, data)
        ops: list[list[Any]] = []
        seen = _diff(seen, new, [], ops)
        json.dumps(ops, default=str)  # a delta is plain JSON (Decimal aside)
        _apply(rebuilt, copy.deepcopy(ops))
        assert fingerprint(rebuilt) == fingerprint(new)
        assert seen == _seen_of(new)
        current = new


def governed(step: int) -> dict[str, Any]:
    """A phase-like document: actions appended then settled in place, a sliding window."""
    actions = [
        {"call_id": f"c{n}", "key": f"search({n})", "outcome": "ok", "gain": 0.5}
        for n in range(step // 2)
    ]
    if step % 2:
        actions.append({"call_id": f"c{step // 2}", "key": "pending", "outcome": "pending"})
    evidence = [f"result {n}: " + "x" * 40 for n in range(max(0, step - 32), step)]
    return {
        "version": 1,
        "kind": "Planning",
        "fields": {
            "step": step,
            "spent": {"cost": Decimal(step) / 100, "tool_calls": step},
            "loop": {"actions": actions, "evidence": evidence, "tool_iterations": step // 2},
        },
    }


async def test_deep_list_changes_cost_what_changed_and_stay_flat() -> None:
    """Saving 900 such documents: a late delta is the size of an early one, and every
    checkpoint loads back exactly."""
    store = MemoryCheckpointer()
    for step in range(903):
        await store.save("r", step, governed(step), agent="a", status="running", phase="Planning")
    sizes = {entry.seq: entry for entry in await store.history("r")}
    # Odd steps append a pending action, even ones settle it in place; every step
    # shifts the evidence window by one.
    assert abs(sizes[901].size - sizes[101].size) <= 16
    assert abs(sizes[902].size - sizes[102].size) <= 16
    assert max(sizes[901].size, sizes[902].size) < 600
    last_snapshot = max(seq for seq, entry in sizes.items() if entry.snapshot)
    assert last_snapshot > 500
    assert sizes[902].size * 20 < sizes[last_snapshot].size  # a snapshot: the whole state
    assert await store.load("r") == (902, governed(902))


@functools.cache
def _hex(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()[:60]


def growing(step: int) -> dict[str, Any]:
    """A document whose transcript grows by one message per checkpoint."""
    # Text that compresses little (hex digits), as a real run's results: a large snapshot
    # is stored compressed, and one of a repeated letter would stay small however long.
    transcript = [{"role": "tool", "content": f"result {n}: " + _hex(n)} for n in range(step)]
    return {"kind": "Planning", "fields": {"step": step, "transcript": transcript}}


async def test_snapshots_come_as_the_deltas_add_up_so_bytes_per_transition_stay_flat() -> None:
    """A snapshot once the deltas since the last one add up to its size: the state grows
    with the run, so snapshots come further apart, and their bytes per transition stay
    level instead of growing with the state (a fixed interval would grow 8 times here,
    doubling the interval every 16 of them 1.4 times).
    Loading reads one snapshot and at most about its size again in deltas."""
    store = MemoryCheckpointer(snapshot_every=10)
    for step in range(1280):
        await store.save("r", step, growing(step), agent="a", status="running", phase="Planning")
    history = await store.history("r")
    snapshots = [entry.seq for entry in history if entry.snapshot]
    assert snapshots[:3] == [0, 10, 20]
    gaps = [b - a for a, b in itertools.pairwise(snapshots)]
    assert gaps[-1] > 8 * gaps[2], gaps  # further apart as the state grows

    def per_transition(first: int, last: int) -> float:
        return sum(entry.size for entry in history[first:last]) / (last - first)

    early, late = per_transition(0, 160), per_transition(640, 1280)
    assert late < 1.1 * early, (early, late)
    replayed = sum(entry.size for entry in history[snapshots[-1] + 1 :])
    assert replayed <= history[snapshots[-1]].size + history[-1].size
    assert await store.load("r") == (1279, growing(1279))


def _kept_plainly(old: tuple[Any, ...], new: tuple[Any, ...], start: int, count: int) -> bool:
    """The definition: ``new[:count]`` holds the very objects ``old[start:start + count]``."""
    if count > len(new) or start + count > len(old):
        return False
    return all(new[at] is old[start + at] for at in range(count))


@settings(max_examples=400, deadline=None)
@given(
    pool=st.integers(1, 6),
    old=st.lists(st.integers(0, 5), max_size=8),
    new=st.lists(st.integers(0, 5), max_size=8),
    start=st.integers(0, 9),
    count=st.integers(0, 9),
    same=st.booleans(),
)
def test_the_dumper_s_identity_check_is_the_plain_one(
    pool: int, old: list[int], new: list[int], start: int, count: int, same: bool
) -> None:
    """``_delta._kept`` (map of operator.is_, the same tuple taken at once) answers as the
    item-by-item identity check, for runs that share objects, equal ones (1 and 1.0, two
    equal lists) or neither, and for the very same tuple."""
    from statemachine.persist._delta import _kept

    objects: list[Any] = [[index] for index in range(pool)] + [1, 1.0, True, [0], [0]]
    before = tuple(objects[index % len(objects)] for index in old)
    after = before if same else tuple(objects[index % len(objects)] for index in new)
    assert _kept(before, after, start, count) == _kept_plainly(before, after, start, count)
    if len(before) <= len(after):  # a tuple that grew from before's items
        grown = before + after
        assert _kept(before, grown, 0, len(before))
        assert _kept(before, grown, start, count) == _kept_plainly(before, grown, start, count)
