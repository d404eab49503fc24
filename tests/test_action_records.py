"""statemachine.ActionRecord: a slotted frozen class in place of a pydantic model.

A run holds one record for every tool call, so the record is an attrs class (issue 23,
point 4). It must read and write exactly what the pydantic model of the same fields
did (a checkpoint written before loads, and one written now is the same JSON), check
what its public constructor is given, and stay unchangeable through copy and pickle.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any, Literal

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import ActionRecord, LoopGovernor, LoopState
from statemachine._actions import _record
from statemachine.persist._codec import _decode, _encode


class PlainRecord(BaseModel, frozen=True, extra="forbid"):
    """The pydantic model ActionRecord was before issue 23: the plain version."""

    call_id: str
    tool: str
    effect: Literal["read", "write"]
    exact: str
    key: str
    text: str
    outcome: Literal["pending", "ok", "failed", "refused", "suppressed"] = "pending"
    result: str = ""
    gain: float | None = None


text = st.text(max_size=20)
records = st.fixed_dictionaries(
    {
        "call_id": text,
        "tool": text,
        "effect": st.sampled_from(["read", "write"]),
        "exact": text,
        "key": text,
        "text": text,
        "outcome": st.sampled_from(["pending", "ok", "failed", "refused", "suppressed"]),
        "result": text,
        "gain": st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5),
    }
)


_TINY_GAIN = dict.fromkeys(("call_id", "tool", "exact", "key", "text", "result"), "")


@settings(max_examples=200, deadline=None)
@given(records)
# A float whose exponent Python's json pads (e-08) and pydantic's serializer does not (e-8).
@example({**_TINY_GAIN, "effect": "read", "outcome": "pending", "gain": 5.960464477539063e-08})
@example({**_TINY_GAIN, "effect": "write", "outcome": "ok", "text": "été", "gain": None})
def test_a_record_dumps_and_encodes_as_the_pydantic_model_did(fields: dict[str, Any]) -> None:
    """model_dump (both modes), model_dump_json, the checkpoint codec's encoding and a
    LoopState's dump: those of the pydantic model of the same fields; and each reads back."""
    made, plain = ActionRecord(**fields), PlainRecord(**fields)
    assert made.model_dump() == plain.model_dump()
    assert list(made.model_dump()) == list(plain.model_dump())
    assert made.model_dump(mode="json") == plain.model_dump(mode="json")
    assert made.model_dump_json() == plain.model_dump_json()
    encoded = _encode(made)
    assert encoded == _encode(plain)
    assert ActionRecord.model_validate(_decode(encoded)) == made
    assert ActionRecord.model_validate(plain.model_dump(mode="json")) == made
    loop = LoopState().record(made)
    assert loop.model_dump_json() == LoopState().record(made).model_dump_json()
    assert LoopState.model_validate_json(loop.model_dump_json()) == loop
    assert _encode(loop)["actions"] == [_encode(plain)]


def test_the_hot_path_record_is_the_checked_one() -> None:
    """_record (the governor's unchecked maker) gives what the constructor gives."""
    values = ("c1", "search", "read", "e", "k", "search({})", "ok", "r", 0.5)
    names = [field.name for field in attrs.fields(ActionRecord)]
    assert _record(*values) == ActionRecord(**dict(zip(names, values, strict=True)))
    assert _record(*values[:6]) == ActionRecord(**dict(zip(names[:6], values[:6], strict=True)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"effect": "delete"}, "effect is one of read, write"),
        ({"outcome": "fine"}, "outcome is one of pending"),
        ({"gain": "0.5"}, "gain is a number or None"),
        ({"gain": True}, "gain is a number or None"),
        ({"gain": float("inf")}, "gain is a finite number"),
        ({"tool": 3}, "tool is text"),
        ({"result": None}, "result is text"),
    ],
)
def test_a_record_refuses_what_it_cannot_hold(change: dict[str, Any], message: str) -> None:
    fields: dict[str, Any] = {
        "call_id": "c1",
        "tool": "search",
        "effect": "read",
        "exact": "e",
        "key": "k",
        "text": "search({})",
    }
    with pytest.raises((TypeError, ValueError), match=message):
        ActionRecord(**{**fields, **change})
    with pytest.raises((TypeError, ValueError), match=message):
        ActionRecord.model_validate({**fields, **change})


def test_a_record_reads_only_its_fields() -> None:
    with pytest.raises(ValueError, match="no field colour"):
        ActionRecord.model_validate({"colour": "red"})
    with pytest.raises(TypeError, match="object of its fields"):
        ActionRecord.model_validate(["c1"])


def test_a_record_is_frozen_and_keeps_its_values_through_copy_and_pickle() -> None:
    """No attribute can be set or added; copies and pickles are equal and stay frozen;
    model_copy checks the changed fields as the constructor does."""
    made = ActionRecord(
        call_id="c1",
        tool="refund",
        effect="write",
        exact="e",
        key="k",
        text="refund({})",
        outcome="refused",
        result="no",
        gain=0.25,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.outcome = "ok"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        made.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(made, "__dict__")
    for again in (copy.copy(made), copy.deepcopy(made), pickle.loads(pickle.dumps(made))):
        assert again == made
        assert again.model_dump() == made.model_dump()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            again.outcome = "ok"  # type: ignore[misc]
    assert made.model_copy(update={"outcome": "ok"}).outcome == "ok"
    assert made.outcome == "refused"
    with pytest.raises(ValueError, match="outcome is one of"):
        made.model_copy(update={"outcome": "done"})


def test_a_settled_run_survives_pickle_and_json() -> None:
    """A loop state with settled records: pickled, copied and read from its JSON, equal."""
    governor = LoopGovernor()
    first = ActionRecord(
        call_id="c1", tool="search", effect="read", exact="e", key="k", text='search({"q":1})'
    )
    loop = LoopState().record(first)
    loop = governor.after_action(loop, call_id="c1", effect="read", result="r", ctx=None, step=1)
    loop = loop.record(attrs.evolve(first, call_id="c2")).settle("c2", "failed", "boom")
    assert [a.outcome for a in loop.actions] == ["ok", "failed"]
    assert loop.actions[0].gain == 1.0
    assert pickle.loads(pickle.dumps(loop)) == loop
    assert copy.deepcopy(loop) == loop
    assert LoopState.model_validate_json(loop.model_dump_json()) == loop
    assert LoopState.model_validate(_decode(_encode(loop))) == loop
