"""The checkpoint producer's shortcuts of issue 23's eleventh round give what the plain
paths give.

- ``_codec._encode`` of an exact float between 1e-4 and 1e16 (either sign) spells it by
  orjson: the very text of ``repr``; any other float, or a float of a subclass, as before.
- ``PhaseDumper.dump`` of a phase of the library's own classes after another reads the
  document's header in place (``library_change`` of tests/delta_reference.py, the plain form
  of the function per pair that ``_delta._whole_source`` makes): the same document, the very
  objects kept where ``_change`` keeps them, the same ops of the same type and the same
  record of the call encoded; ``None`` (then ``_change``) for a document, an agent or a
  class it does not recognise.
- The functions per pair compare an exact ``Spend`` with the spend before in one frame
  (``_spent``), with ``_money`` keeping the last cost's spelling: the same as ``_compared``,
  and ``_money`` the same as it was, call after call.
- ``_record_fields`` takes an exact ``str`` as its own encoding: the same as ``_by_fields``.
"""

from __future__ import annotations

import math
import sys
from decimal import Decimal
from typing import Any

import attrs
import pytest
from delta_reference import library_change
from hypothesis import given, settings
from hypothesis import strategies as st
from test_delta_pairs import Text, exact
from test_delta_pairs2 import STEPS, Count, _phases_of

from statemachine._actions import ActionRecord
from statemachine._budget import Spend
from statemachine._phases import Observing, Planning, ToolCalling
from statemachine.persist import _delta
from statemachine.persist._codec import _encode, _keeps_spelled
from statemachine.persist._delta import (
    _PAIRS,
    _RECORD_FIELDS,
    _RECORD_VALUES,
    FiniteOps,
    PhaseDumper,
    _by_fields,
    _compared,
    _dumped_fields,
    _money,
    _pair,
    _record_fields,
    _same,
    _spent,
)

# --- a float's text ---------------------------------------------------------------------------


def _edges() -> list[float]:
    out: list[float] = []
    for bound in (1e-4, 1e16):
        for value in (bound, math.nextafter(bound, 0.0), math.nextafter(bound, math.inf)):
            out += [value, -value]
    return out


EDGES = [
    *_edges(),
    0.0,
    -0.0,
    1.0,
    0.1,
    0.5,
    1e-5,
    0.30000000000000004,
    123456789012345.6,
    9999999999999998.0,
    5e-324,
    sys.float_info.max,
    math.inf,
    -math.inf,
    math.nan,
]


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_a_float_s_text_at_the_edges_is_repr_s(value: float) -> None:
    encoded = _encode(value)
    assert type(encoded) is dict
    assert list(encoded) == ["$float"]
    assert type(encoded["$float"]) is str
    assert encoded["$float"] == repr(value)


@settings(max_examples=500, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_s_text_is_repr_s(value: float) -> None:
    assert _encode(value) == {"$float": repr(value)}


@settings(max_examples=300, deadline=None)
@given(value=st.floats(min_value=1e-4, max_value=1e16, exclude_max=True))
def test_a_float_in_the_range_s_text_is_repr_s(value: float) -> None:
    assert _encode(value) == {"$float": repr(value)}
    assert _encode(-value) == {"$float": repr(-value)}


class Spelled(float):
    """A float of a subclass with a text of its own: written as its ``repr`` gives it."""

    def __repr__(self) -> str:
        return "spelled"


def test_a_float_of_a_subclass_is_written_by_its_repr() -> None:
    assert _encode(Spelled(0.5)) == {"$float": "spelled"}


# --- the header read in place -------------------------------------------------------------------


def _plain(old: Any, before: Any, phase: Any, seen: Any) -> tuple[Any, Any, Any]:
    calls = [seen]
    document, ops = PhaseDumper._change(old, before, phase, calls)
    return document, ops, calls[0]


def _fast(old: Any, before: Any, phase: Any, seen: Any) -> Any:
    if _pair(type(old), type(phase)) is None:  # not two of the library's classes
        return None
    known = _PAIRS[(id(type(old)), id(type(phase)))]
    calls = [seen]
    made = library_change(known, old, before, phase, calls)
    if made is None:
        assert calls[0] is seen
        return None
    return made[0], made[1], calls[0]


def _agree(old: Any, before: Any, phase: Any, seen: Any) -> bool:
    """Whether the header read in place answered; when it did, it agrees with ``_change``."""
    fast = _fast(old, before, phase, seen)
    if fast is None:
        return False
    plain = _plain(old, before, phase, seen)
    assert exact(fast[0]) == exact(plain[0])
    assert list(fast[0]) == list(plain[0])
    assert [fast[0][key] is before.get(key) for key in fast[0]] == [
        plain[0][key] is before.get(key) for key in plain[0]
    ]
    fields, plain_fields = fast[0]["fields"], plain[0]["fields"]
    assert [fields[key] is before["fields"].get(key) for key in fields] == [
        plain_fields[key] is before["fields"].get(key) for key in plain_fields
    ]
    assert exact(fast[1]) == exact(plain[1])
    assert type(fast[1]) is type(plain[1])
    assert (fast[2] is None) == (plain[2] is None)
    return True


LIBRARY = (Planning, ToolCalling, Observing)


def test_every_step_of_a_run_agrees_and_is_read_in_place() -> None:
    taken = [_agree(old, document, phase, seen) for old, document, phase, seen in STEPS]
    library = [type(old) in LIBRARY and type(phase) in LIBRARY for old, _, phase, _ in STEPS]
    assert taken == library
    assert sum(taken) >= 100


class Mimic(type):
    def __eq__(cls, other: object) -> bool:
        return True

    def __hash__(cls) -> int:
        return hash(str)


class Weird(metaclass=Mimic):
    """A value equal to anything (as its class is to any class)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


def _header(document: dict[str, Any], how: str) -> dict[str, Any]:
    """The document before, its header as other code may have written it."""
    out = dict(document)
    if how == "kind equal, other object":
        out["kind"] = "".join(document["kind"])
    elif how == "kind other":
        out["kind"] = "Retrying"
    elif how == "kind of a subclass":
        out["kind"] = Text(document["kind"])
    elif how == "class equal, other object":
        out["class"] = "".join(document["class"])
    elif how == "class other":
        out["class"] = "elsewhere:Planning"
    elif how == "agent equal, other object":
        out["agent"] = "".join(document["agent"])
    elif how == "agent other":
        out["agent"] = "another"
    elif how == "agent equal to anything":
        out["agent"] = Weird()
    elif how == "version as a float":
        out["version"] = 3.0
    elif how == "version as a Decimal":
        out["version"] = Decimal("3")
    elif how == "version 2":
        out["version"] = 2
    elif how == "phases copied":
        out["phases"] = {
            kind: [path, list(names)] for kind, (path, names) in document["phases"].items()
        }
    elif how == "phases without the kind":
        out["phases"] = {k: v for k, v in document["phases"].items() if k != "ToolCalling"}
    elif how == "phases of other fields":
        out["phases"] = {k: [v[0], list(reversed(v[1]))] for k, v in document["phases"].items()}
    elif how == "phases missing":
        del out["phases"]
    elif how == "fields reordered":
        keys = list(document["fields"])
        keys[0], keys[1] = keys[1], keys[0]
        out["fields"] = {key: document["fields"][key] for key in keys}
    return out


HEADER_HOWS = [
    "as written",
    "kind equal, other object",
    "kind other",
    "kind of a subclass",
    "class equal, other object",
    "class other",
    "agent equal, other object",
    "agent other",
    "agent equal to anything",
    "version as a float",
    "version as a Decimal",
    "version 2",
    "phases copied",
    "phases without the kind",
    "phases of other fields",
    "phases missing",
    "fields reordered",
]

_REFUSED = {"version as a float", "version as a Decimal", "version 2", "phases missing"}


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(STEPS) - 2), how=st.sampled_from(HEADER_HOWS))
def test_a_header_written_otherwise_agrees_with_change(at: int, how: str) -> None:
    old, document, phase, seen = STEPS[at]
    if type(old) not in LIBRARY or type(phase) not in LIBRARY:
        return
    before = _header(document, how)
    taken = _agree(old, before, phase, seen)
    assert taken == (how not in _REFUSED)


def _copy(phase: Any, **changes: Any) -> Any:
    made = object.__new__(type(phase))
    for field in attrs.fields(type(phase)):
        object.__setattr__(made, field.name, changes.get(field.name, getattr(phase, field.name)))
    return made


def test_another_agent_s_phases_are_left_to_change() -> None:
    old, document, phase, seen = next(s for s in STEPS if type(s[2]) is ToolCalling)
    other = _phases_of(1)[2]  # the same agent's definition, another object
    assert other.agent is not phase.agent
    moved = _copy(phase, agent=other.agent)
    assert _fast(old, document, moved, seen) is None


def test_a_class_renamed_is_left_to_change() -> None:
    old, document, phase, seen = next(s for s in STEPS if type(s[2]) is ToolCalling)
    _pair(type(old), ToolCalling)
    qualname = ToolCalling.__qualname__
    try:
        ToolCalling.__qualname__ = "Renamed"
        assert _fast(old, document, phase, seen) is None
        plain = _plain(old, document, phase, seen)
        assert plain[0]["class"].endswith(":Renamed")
    finally:
        ToolCalling.__qualname__ = qualname
    assert _fast(old, document, phase, seen) is not None


def _never(*args: Any) -> None:
    """A pair's function refusing every phase: ``dump`` takes ``_change``."""


def test_whole_runs_dump_as_without_the_header_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    phases = _phases_of(70)
    fast = PhaseDumper()
    got = [fast.dump(phase) for phase in phases]
    # dump calls each pair's own function (_PAIRS' fifth entry, delta_reference's
    # library_change with the pair's change written in): every one refusing, dump takes _change.
    for key, known in list(_delta._PAIRS.items()):
        monkeypatch.setitem(_delta._PAIRS, key, (*known[:4], _never))
    plain = PhaseDumper()
    want = [plain.dump(phase) for phase in phases]
    for (document, ops), (document2, ops2) in zip(got, want, strict=True):
        assert exact(document) == exact(document2)
        assert exact(ops) == exact(ops2)
        assert type(ops) is type(ops2)
    assert sum(type(ops) is FiniteOps for _, ops in got) >= 3 * 70 - 2


# --- the spend ------------------------------------------------------------------------------------

SPENT = next(field for field in _dumped_fields(Planning) if field.name == "spent")

COUNTS = st.one_of(
    st.integers(0, 5),
    st.integers(0, 5).map(Count),
    st.booleans(),
    st.integers(0, 5).map(lambda n: n + 10**20 - 10**20),
)
COSTS = st.one_of(
    st.sampled_from(["0", "0.00", "1.5", "1.50", "8E+2", "800", "-0", "0.0123", "1E-7"]).map(
        Decimal
    ),
    st.sampled_from(["1.5", "800"]).map(lambda text: type("Money", (Decimal,), {})(text)),
    st.integers(0, 3),
)


def _spend(tokens: Any, cost: Any, tool_calls: Any, model_calls: Any) -> Spend:
    made = object.__new__(Spend)
    for name, value in zip(
        ("tokens", "cost", "tool_calls", "model_calls"),
        (tokens, cost, tool_calls, model_calls),
        strict=True,
    ):
        object.__setattr__(made, name, value)
    return made


SPENDS = st.builds(_spend, COUNTS, COSTS, COUNTS, COUNTS)


def _encoded_before(spend: Spend, how: str) -> Any:
    encoded = _encode(spend.model_dump())
    if how == "reordered":
        return dict(reversed(list(encoded.items())))
    if how == "a count as text":
        return {**encoded, "tokens": str(encoded["tokens"])}
    if how == "a list":
        return list(encoded.values())
    if how == "cost tagged":
        return {**encoded, "cost": {"$decimal": str(spend.cost)}}
    return encoded


@settings(max_examples=400, deadline=None)
@given(
    previous=SPENDS,
    value=SPENDS,
    how=st.sampled_from(["as written", "reordered", "a count as text", "a list", "cost tagged"]),
    share=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_a_spend_s_change_is_compared_s(
    previous: Spend, value: Spend, how: str, share: list[bool]
) -> None:
    # Some counts the very objects of the spend before (as Spend.add leaves them).
    names = ("tokens", "cost", "tool_calls", "model_calls")
    value = _spend(
        *(getattr(previous if s else value, n) for s, n in zip(share, names, strict=True))
    )
    encoded = _encoded_before(previous, how)
    ops: list[Any] = []
    merged: dict[str, Any] = {}
    made = _spent(Planning, SPENT, value, previous, encoded, ops, merged, [None])
    plain_ops: list[Any] = []
    plain_merged: dict[str, Any] = {}
    plain = _compared(Planning, SPENT, value, previous, encoded, plain_ops, plain_merged, [None])
    assert exact(made) == exact(plain)
    assert (made is encoded) == (plain is encoded)
    assert exact(ops) == exact(plain_ops)
    assert exact(merged) == exact(plain_merged)


def _money_before(
    new: dict[str, Any], parts: dict[str, Any], name: str, item: Decimal, before: Any
) -> None:
    """``_money`` as it was before its spelling was kept (the plain version)."""
    text = str(item)
    now: Any
    if _keeps_spelled(text):
        if type(before) is Decimal and str(before) == text:
            return
        now = item
    else:
        if type(before) is dict and len(before) == 1:
            ((key, held),) = before.items()
            if type(key) is str and key == "$decimal" and type(held) is str and held == text:
                return
        now = {"$decimal": text}
    if not _same(now, before):
        new[name] = parts[name] = now


AMOUNTS = st.sampled_from(["0", "0.00", "1.5", "1.50", "8E+2", "800", "-0", "0.0123", "1E-7", "2"])


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(AMOUNTS, st.sampled_from(["new", "same object", "last", "tagged", "text"])),
        min_size=1,
        max_size=12,
    )
)
def test_money_call_after_call_is_as_before(steps: list[tuple[str, str]]) -> None:
    last: Any = Decimal("0")
    for text, how in steps:
        item = Decimal(text)
        if how == "same object":
            item = last if type(last) is Decimal else item
        before: Any = last
        if how == "tagged":
            before = {"$decimal": str(last)}
        elif how == "text":
            before = str(last)
        new: dict[str, Any] = {"cost": before}
        parts: dict[str, Any] = {}
        _money(new, parts, "cost", item, before)
        new2: dict[str, Any] = {"cost": before}
        parts2: dict[str, Any] = {}
        _money_before(new2, parts2, "cost", item, before)
        assert exact(new) == exact(new2)
        assert exact(parts) == exact(parts2)
        assert (new["cost"] is before) == (new2["cost"] is before)
        last = item


# --- a settled record -----------------------------------------------------------------------------


def _record(**changes: Any) -> ActionRecord:
    made = object.__new__(ActionRecord)
    base = {
        "call_id": "c1",
        "tool": "look",
        "effect": "read",
        "exact": "e" * 8,
        "key": "k",
        "text": "look()",
        "outcome": "pending",
        "result": "",
        "gain": None,
    }
    for name, value in {**base, **changes}.items():
        object.__setattr__(made, name, value)
    return made


TEXTS = st.one_of(
    st.sampled_from(["ok", "pending", "", "r"]),
    st.sampled_from(["ok", "r"]).map(Text),
    st.integers(0, 2),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(
    outcome=TEXTS,
    result=TEXTS,
    gain=st.one_of(st.none(), st.floats(allow_nan=False), st.integers(0, 2)),
    before_outcome=TEXTS,
    before_result=TEXTS,
)
def test_a_settled_record_s_fields_are_by_fields_s(
    outcome: Any, result: Any, gain: Any, before_outcome: Any, before_result: Any
) -> None:
    previous = _record()
    value = _record(outcome=outcome, result=result, gain=gain)
    encoded = _encode(previous)
    # As other code may have written them: text of a subclass, an int, null.
    encoded["outcome"] = before_outcome
    encoded["result"] = before_result
    made = _record_fields(value, previous, encoded)
    plain = _by_fields(value, previous, encoded, _RECORD_FIELDS, _RECORD_VALUES)
    assert made is not None
    assert plain is not None
    assert exact(made[0]) == exact(plain[0])
    assert exact(made[1]) == exact(plain[1])
    assert [made[0][k] is encoded[k] for k in made[0]] == [
        plain[0][k] is encoded[k] for k in plain[0]
    ]
