"""A store's ``history`` makes its entries without validating them when every value is
of its field's type exactly (``persist._rows._entry``): the entries are those
``CheckpointEntry(...)`` makes, on every backend, and anything else is validated as before.

Against the validated entry: equal, of the class exactly, the same values of the same
types, the same fields set, frozen, hashed, copied, pickled and dumped alike. A row
changed by hand (a phase stored as bytes) is read as validation reads it; a value no
entry may hold is refused as validation refuses it.
"""

from __future__ import annotations

import copy
import pickle
import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from statemachine import (
    CheckpointEntry,
    Checkpointer,
    MemoryCheckpointer,
    PostgresCheckpointer,
    SQLiteCheckpointer,
)
from statemachine.persist._rows import _entry

_FIELDS = ("seq", "phase", "snapshot", "size", "at")


def _validated(entry: CheckpointEntry) -> CheckpointEntry:
    return CheckpointEntry(
        seq=entry.seq, phase=entry.phase, snapshot=entry.snapshot, size=entry.size, at=entry.at
    )


def _same(made: CheckpointEntry, validated: CheckpointEntry) -> None:
    """``made`` is ``validated`` in every way a caller can tell."""
    assert type(made) is CheckpointEntry
    assert made == validated
    assert list(made.__dict__) == list(_FIELDS)
    for name in _FIELDS:
        assert type(getattr(made, name)) is type(getattr(validated, name)), name
        assert getattr(made, name) == getattr(validated, name), name
    assert made.model_fields_set == validated.model_fields_set == set(_FIELDS)
    assert made.__pydantic_extra__ is None
    assert made.__pydantic_private__ is None
    assert hash(made) == hash(validated)
    assert made.model_dump() == validated.model_dump()
    assert made.model_dump_json() == validated.model_dump_json()
    assert pickle.loads(pickle.dumps(made)) == validated
    assert copy.deepcopy(made) == validated
    assert made.model_copy(update={"size": 1}) == validated.model_copy(update={"size": 1})
    with pytest.raises(ValidationError):
        made.seq = 99  # type: ignore[misc]  # frozen, as the validated one is
    assert made.seq == validated.seq


@pytest.mark.anyio
def _outcome(make: Any, values: dict[str, Any]) -> CheckpointEntry | list[Any]:
    """What ``make(**values)`` makes, or the errors it refuses them with (their inputs left
    out: a NaN is not equal to itself)."""
    try:
        made: CheckpointEntry = make(**values)
    except ValidationError as refused:
        return refused.errors(include_input=False)
    return made


def _alike(values: dict[str, Any]) -> None:
    """``_entry`` makes of ``values`` what validation makes, or refuses them alike."""
    validated = _outcome(CheckpointEntry, values)
    made = _outcome(_entry, values)
    if isinstance(validated, list):
        assert made == validated
    else:
        assert isinstance(made, CheckpointEntry)
        _same(made, validated)


@pytest.mark.anyio
async def test_every_backends_history_is_the_validated_entries(store: Checkpointer) -> None:
    """Snapshots and deltas, on memory, SQLite and PostgreSQL, plain and encrypted."""
    assert isinstance(store, MemoryCheckpointer | SQLiteCheckpointer | PostgresCheckpointer)
    store.snapshot_every = 3
    for seq in range(8):
        await store.save(
            "r1",
            seq,
            {"version": 1, "kind": "Planning", "fields": {"step": seq, "notes": ["n"] * seq}},
            agent="travel",
            status="running",
            phase="Planning" if seq % 2 else "Observing",
        )
    history = await store.history("r1")
    assert [entry.seq for entry in history] == list(range(8))
    assert any(entry.snapshot for entry in history)
    assert not all(entry.snapshot for entry in history)
    for entry in history:
        _same(entry, _validated(entry))
        assert entry.at.tzinfo is not None
        assert entry.at.utcoffset() == timedelta(0)


@pytest.mark.anyio
async def test_a_row_changed_by_hand_is_validated_as_before(tmp_path: Path) -> None:
    """A phase stored as bytes is read as validation reads bytes for a ``str`` field."""
    path = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(path) as store:
        for seq in range(3):
            await store.save(
                "r1", seq, {"step": seq}, agent="travel", status="running", phase="Planning"
            )
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE checkpoints SET phase = CAST('Hand' AS BLOB) WHERE seq = 1")
    async with SQLiteCheckpointer(path) as store:
        history = await store.history("r1")
    assert [entry.phase for entry in history] == ["Planning", "Hand", "Planning"]
    assert type(history[1].phase) is str
    for entry in history:
        _same(entry, _validated(entry))


@settings(max_examples=200, deadline=None)
@given(
    seq=st.integers(min_value=-(2**70), max_value=2**70),
    phase=st.text(max_size=20),
    snapshot=st.booleans(),
    size=st.integers(min_value=-(2**70), max_value=2**70),
    at=st.one_of(st.datetimes(timezones=st.just(UTC)), st.datetimes()),
)
def test_exact_values_are_kept_as_they_are(
    seq: int, phase: str, snapshot: bool, size: int, at: datetime
) -> None:
    made = _entry(seq, phase, snapshot, size, at)
    _same(made, CheckpointEntry(seq=seq, phase=phase, snapshot=snapshot, size=size, at=at))
    assert made.seq is seq
    assert made.phase is phase
    assert made.at is at


class _Moment(datetime):
    """A datetime of another class: validated, not kept as it is."""


_EXACT: dict[str, Any] = {
    "seq": 7,
    "phase": "Planning",
    "snapshot": False,
    "size": 640,
    "at": datetime(2026, 12, 5, 10, 0, tzinfo=UTC),
}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("seq", True),
        ("seq", 7.0),
        ("seq", "7"),
        ("size", False),
        ("size", 640.0),
        ("phase", b"Planning"),
        ("snapshot", 1),
        ("snapshot", "true"),
        ("at", _Moment(2026, 12, 5, 10, 0, tzinfo=UTC)),
        ("at", "2026-12-05T10:00:00+00:00"),
        ("at", 1_796_000_000),
        ("seq", None),
        ("phase", 3),
        ("at", "not a time"),
    ],
)
def test_one_value_of_another_type_is_validated(name: str, value: Any) -> None:
    """The others exact: one near miss (a bool for an int, bytes for a str, a datetime of
    another class, an ISO text) makes the validated entry, or the same refusal."""
    _alike({**_EXACT, name: value})


_ANY = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.text(alphabet="0123456789", min_size=1, max_size=5),
    st.binary(max_size=6),
    st.none(),
    st.datetimes(timezones=st.just(UTC)),
    st.datetimes(),
    st.datetimes(timezones=st.just(timezone(timedelta(hours=5)))).map(
        lambda moment: _Moment.fromisoformat(moment.isoformat())
    ),
    st.just("2026-12-05T10:00:00+00:00"),
)


@settings(max_examples=400, deadline=None)
@given(
    seq=_ANY,
    phase=_ANY,
    snapshot=st.one_of(st.booleans(), _ANY),
    size=_ANY,
    at=_ANY,
)
def test_any_values_make_what_validation_makes_or_the_same_refusal(
    seq: Any, phase: Any, snapshot: Any, size: Any, at: Any
) -> None:
    _alike({"seq": seq, "phase": phase, "snapshot": snapshot, "size": size, "at": at})
