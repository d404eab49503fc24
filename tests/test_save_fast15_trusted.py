"""``_fast._pydantic._trusted`` makes a model as its class's making class, its four slots
stored as ``object`` stores them, then gives it the class by ``__class__`` assignment:
against ``_trusted_plain`` (each slot through its descriptor, as before) and
``model_construct``.

The same model: of the class exactly, ``__dict__`` the very dict given, the fields set the
very set, no extra, the very private dict; equal, frozen, copied, pickled and dumped alike.
A class whose ``__new__`` is not ``object``'s, or one not made by pydantic's metaclass,
has no making class and is made the plain way.
"""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, PrivateAttr, ValidationError

from statemachine._fast import _pydantic
from statemachine._fast._pydantic import _trusted, _trusted_plain
from statemachine.persist._lifecycle import RunStatus
from statemachine.persist._protocol import RunRecord

_SAVED = (
    "run_id",
    "agent",
    "status",
    "phase",
    "waiting_for",
    "updated_at",
    "seq",
    "stop_requested",
    "decision_pending",
    "reason",
    "failures",
    "retry_at",
)
_TEXT = st.text(max_size=12)
_WHEN = st.integers(0, 10**9).map(lambda s: datetime(2020, 1, 1, tzinfo=UTC) + timedelta(seconds=s))


@st.composite
def _record_values(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "run_id": draw(_TEXT),
        "agent": draw(_TEXT),
        "status": draw(st.sampled_from(list(RunStatus))),
        "phase": draw(_TEXT),
        "waiting_for": draw(_TEXT),
        "updated_at": draw(_WHEN),
        "seq": draw(st.integers(0, 10**6)),
        "stop_requested": draw(st.booleans()),
        "decision_pending": draw(st.booleans()),
        "reason": draw(_TEXT),
        "failures": draw(st.integers(0, 9)),
        "retry_at": draw(st.none() | _WHEN),
    }


def _same(
    made: Any, plain: BaseModel, values: dict[str, Any], fields: set[str], private: Any
) -> None:
    cls: type[BaseModel] = type(plain)
    assert type(made) is cls
    assert made.__class__ is cls
    assert made.__dict__ is values
    assert made.__pydantic_fields_set__ is fields
    assert made.__pydantic_extra__ is None
    assert made.__pydantic_private__ is private
    assert made == plain
    assert repr(made) == repr(plain)
    assert made.model_dump() == plain.model_dump()
    assert made.model_dump_json() == plain.model_dump_json()
    for copied in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert type(copied) is cls
        assert copied == plain
        assert copied.model_dump_json() == plain.model_dump_json()
    name: str = next(iter(type(plain).model_fields))
    with pytest.raises(ValidationError):
        setattr(made, name, getattr(made, name))
    assert cls.model_validate_json(made.model_dump_json()) == cls.model_validate_json(
        plain.model_dump_json()
    )


@settings(max_examples=150)
@given(_record_values(), st.booleans())
def test_run_record(values: dict[str, Any], own_set: bool) -> None:
    fields: set[str] = set(_SAVED[:8]) if own_set else set(values)
    made = _trusted(RunRecord, values, fields)
    plain = _trusted_plain(RunRecord, dict(values), set(fields))
    _same(made, plain, values, fields, None)
    constructed = RunRecord.model_construct(_fields_set=set(fields), **values)
    assert made == constructed
    assert made.model_dump_json() == constructed.model_dump_json()
    assert (made.reason, made.failures, made.retry_at) == (
        values["reason"],
        values["failures"],
        values["retry_at"],
    )


class _Memory(BaseModel, frozen=True, extra="forbid"):
    """A frozen model with private attributes (as ``LoopState`` was before round 18)."""

    evidence: tuple[str, ...] = ()
    tool_iterations: int = 0
    finalize: str = ""
    _index: Any = PrivateAttr(default=None)
    _grams: Any = PrivateAttr(default=None)


@settings(max_examples=60)
@given(st.lists(_TEXT, max_size=3).map(tuple), st.integers(0, 50), _TEXT)
def test_loop_state(evidence: tuple[str, ...], iterations: int, finalize: str) -> None:
    base = _Memory()
    values = {**base.__dict__, "evidence": evidence, "tool_iterations": iterations}
    values["finalize"] = finalize
    fields = set(_Memory.model_fields)
    private = {"_index": None, "_grams": None}
    made = _trusted(_Memory, values, fields, private)
    plain = _trusted_plain(_Memory, dict(values), set(fields), dict(private))
    _same(made, plain, values, fields, private)
    assert made.tool_iterations == iterations
    assert made.evidence == evidence


class _OwnNew(BaseModel, frozen=True):
    a: int = 0

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        made = super().__new__(cls)
        object.__setattr__(made, "__pydantic_private__", None)
        _MADE.append(cls)
        return made


_MADE: list[type[Any]] = []


def test_a_class_with_its_own_new_is_made_the_plain_way() -> None:
    before = len(_MADE)
    made = _trusted(_OwnNew, {"a": 3}, {"a"})
    assert len(_MADE) == before + 1
    assert type(made) is _OwnNew
    assert made.a == 3
    assert _pydantic._MAKING[_OwnNew] is _OwnNew
    again = _trusted(_OwnNew, {"a": 4}, {"a"})
    assert type(again) is _OwnNew
    assert again.a == 4


def test_making_classes_are_kept_per_class() -> None:
    record = _trusted(RunRecord, dict.fromkeys(_SAVED, ""), set())
    assert type(record) is RunRecord
    making = _pydantic._MAKING[RunRecord]
    assert making is not RunRecord
    assert making.__bases__ == (RunRecord,)
    assert making.__slots__ == ()
    assert making.__basicsize__ == RunRecord.__basicsize__
    assert _pydantic._making(RunRecord) is making
    assert _trusted(RunRecord, dict.fromkeys(_SAVED, ""), set()).__class__ is RunRecord
