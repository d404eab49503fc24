"""The delta producer's shortcuts give what its plain paths give (issue 23).

``persist._delta`` encodes a spend and a settled action record from the fields that are
not the very objects the value before held (``_by_fields``), takes one item appended to a
chunked sequence's tail or its last record settled without the general walk
(``_chunked_change`` against ``_chunked_plain``), and skips two checks of a tuple that
kept its length but not its first item (``_tuple_change``). Each is compared here with
the plain version: the same encoding, JSON for JSON and type for type, and the same ops.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from statemachine._actions import _RECORD_FIELDS, ActionLog, ActionRecord
from statemachine._budget import Spend
from statemachine.persist._chunks import _packed
from statemachine.persist._codec import _encode
from statemachine.persist._delta import (
    _RECORD_VALUES,
    _SHIFT,
    _SPEND_FIELDS,
    _SPEND_VALUES,
    _by_fields,
    _chunked_change,
    _chunked_plain,
    _kept,
    _parts,
    _tuple_change,
)


def exact(value: Any) -> str:
    """JSON that tells 1, 1.0, True and Decimal("1.0") apart."""
    return json.dumps(value, default=lambda item: ["Decimal", str(item), type(item).__name__])


def fresh(text: str) -> str:
    """An equal text that is another object (when it can be: longer than one character)."""
    return "".join(list(text)) if len(text) > 1 else text


texts = st.text(max_size=6)
gains = st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-3, 3)


@st.composite
def records(draw: st.DrawFn) -> ActionRecord:
    return ActionRecord(
        call_id=draw(texts),
        tool=draw(texts),
        effect=draw(st.sampled_from(["read", "write"])),
        exact=draw(texts),
        key=draw(texts),
        text=draw(texts),
        outcome=draw(st.sampled_from(["pending", "ok", "failed", "refused", "suppressed"])),
        result=draw(texts),
        gain=draw(gains),
    )


@st.composite
def settled(draw: st.DrawFn, record: ActionRecord) -> ActionRecord:
    """``record`` with some fields changed, some kept (the same object) and some equal
    but new objects, as the governor's settle and anything else may make one."""
    changes: dict[str, Any] = {}
    for name in _RECORD_FIELDS:
        how = draw(st.sampled_from(["keep", "keep", "fresh", "change"]))
        value = getattr(record, name)
        if how == "fresh" and type(value) is str:
            changes[name] = fresh(value)
        elif how == "fresh" and type(value) is float:
            changes[name] = float(repr(value))
        elif how == "change":
            if name == "effect":
                changes[name] = draw(st.sampled_from(["read", "write"]))
            elif name == "outcome":
                changes[name] = draw(st.sampled_from(["pending", "ok", "failed"]))
            elif name == "gain":
                changes[name] = draw(gains)
            else:
                changes[name] = draw(texts)
    return attrs.evolve(record, **changes)


def plainly(value: Any, previous_encoded: Any) -> tuple[Any, Any]:
    """What ``_by_fields`` stands for: the whole encoding, and ``_parts`` of it."""
    new = _encode(value.model_dump())
    return new, _parts(new, previous_encoded)


@settings(max_examples=300)
@given(data=st.data())
def test_a_settled_record_encoded_by_its_changed_fields_is_the_plain_encoding(data: Any) -> None:
    before = data.draw(records())
    after = data.draw(settled(before))
    encoded = _encode(before)
    made = _by_fields(after, before, encoded, _RECORD_FIELDS, _RECORD_VALUES)
    assert made is not None
    new, parts = made
    plain_new, plain_parts = plainly(after, encoded)
    assert exact(new) == exact(plain_new) == exact(_encode(after))
    assert exact(parts) == exact(plain_parts)


def spends() -> st.SearchStrategy[Spend]:
    costs = st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=0)
    counts = st.integers(0, 10**20)
    return st.builds(Spend, tokens=counts, cost=costs, tool_calls=counts, model_calls=counts)


@settings(max_examples=300)
@given(before=spends(), data=st.data())
def test_a_spend_encoded_by_its_changed_counts_is_the_plain_encoding(
    before: Spend, data: Any
) -> None:
    changes: dict[str, Any] = {}
    for name in _SPEND_FIELDS:
        how = data.draw(st.sampled_from(["keep", "equal", "change"]))
        value = getattr(before, name)
        if how == "equal":  # an equal value that may write otherwise (1.0 and 1.00)
            changes[name] = (
                Decimal(str(value) + ("0" if "." in str(value) else ".0"))
                if name == "cost"
                else int(str(value))
            )
        elif how == "change":
            changes[name] = value + 1
    after = attrs.evolve(before, **changes)
    encoded = _encode(before.model_dump())
    made = _by_fields(after, before, encoded, _SPEND_FIELDS, _SPEND_VALUES)
    assert made is not None
    assert exact(made) == exact(plainly(after, encoded))


def test_an_encoding_of_other_keys_is_left_to_the_plain_path() -> None:
    record = ActionRecord(call_id="c", tool="t", effect="read", exact="e", key="k", text="x")
    encoded = _encode(record)
    reordered = dict(reversed(list(encoded.items())))
    short = {key: encoded[key] for key in list(encoded)[:-1]}
    for other in (reordered, short, [encoded], None):
        assert _by_fields(record, record, other, _RECORD_FIELDS, _RECORD_VALUES) is None


def log_of(records: list[ActionRecord]) -> ActionLog:
    log = ActionLog()
    for record in records:
        log = log.appended(record)
    return log


def encoding_of(log: ActionLog) -> list[Any]:
    """A log's version 2 encoding: each full chunk's text, then the tail's records."""
    chunks = [_packed([_encode(item) for item in chunk], _RECORD_FIELDS) for chunk in log.chunks]
    return chunks + [_encode(item) for item in log.tail]


@settings(max_examples=200, deadline=None)
@given(data=st.data(), size=st.integers(0, 70))
def test_a_log_appended_to_or_settled_gives_the_plain_walk_s_encoding_and_ops(
    data: Any, size: int
) -> None:
    items = [data.draw(records()) for _ in range(size)]
    old = log_of(items)
    how = data.draw(st.sampled_from(["append", "settle", "settle", "replace", "same"]))
    if how == "append":
        new = old.appended(data.draw(records()))
    elif how in ("settle", "replace") and size:
        at = size - 1 if how == "settle" else data.draw(st.integers(0, size - 1))
        new = old.replaced(at, data.draw(settled(old[at])))
    else:
        new = old
    encoded = encoding_of(old)
    path = ["fields", "loop", "actions"]
    parts = ((old._chunks, old._tail), (new._chunks, new._tail))
    fast = _chunked_change(*parts, new, list(encoded), list(path), _RECORD_FIELDS)
    plain = _chunked_plain(*parts, new, list(encoded), list(path), _RECORD_FIELDS)
    assert exact(fast) == exact(plain)
    assert exact(fast[0]) == exact(encoding_of(new))


def _tuple_change_plainly(
    old: tuple[Any, ...], encoded: list[Any], new: tuple[Any, ...], path: list[str]
) -> tuple[list[Any], list[Any] | None]:
    """``_tuple_change`` without its skip of the first two checks."""
    size = len(old)
    if len(new) >= size and _kept(old, new, 0, size):
        if len(new) == size:
            return encoded, None
        added = [_encode(item) for item in new[size:]]
        return encoded + added, ["append", path, added]
    if size and len(new) >= size and _kept(old, new, 0, size - 1):
        added = [_encode(item) for item in new[size - 1 :]]
        return encoded[: size - 1] + added, ["splice", path, size - 1, added]
    for dropped in range(1, min(_SHIFT, size) + 1):
        rest = size - dropped
        if rest <= len(new) and _kept(old, new, dropped, rest):
            added = [_encode(item) for item in new[rest:]]
            return encoded[dropped:] + added, ["shift", path, dropped, added]
    whole = [_encode(item) for item in new]
    return whole, ["set", path, whole]


@settings(max_examples=400)
@given(
    pool=st.integers(1, 5),
    old=st.lists(st.integers(0, 9), max_size=10),
    new=st.lists(st.integers(0, 9), max_size=10),
    shift=st.integers(0, 10),
    grow=st.lists(st.integers(0, 9), max_size=3),
)
def test_a_window_s_change_is_the_plain_one(
    pool: int, old: list[int], new: list[int], shift: int, grow: list[int]
) -> None:
    objects: list[Any] = [f"text {index}" for index in range(pool)] + [fresh("text 0"), 1, 1.0]
    before = tuple(objects[index % len(objects)] for index in old)
    afters = [
        tuple(objects[index % len(objects)] for index in new),
        before[shift:] + tuple(objects[index % len(objects)] for index in grow),
        before + tuple(objects[index % len(objects)] for index in grow),
        before[:-1] + tuple(objects[index % len(objects)] for index in grow),
    ]
    encoded = [_encode(item) for item in before]
    for after in afters:
        fast = _tuple_change(before, list(encoded), after, ["fields", "loop", "evidence"])
        plain = _tuple_change_plainly(before, list(encoded), after, ["fields", "loop", "evidence"])
        assert exact(fast) == exact(plain)
