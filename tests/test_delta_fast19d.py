"""``PhaseDumper.dump`` of a phase after another of the library's own classes calls one
function per pair (``_PAIRS``' fifth entry, made by ``_delta._whole_source``): what
``library_change`` (tests/delta_reference.py, the plain form) does with the pair's function
written in (no frame of its own, no tuple of the fields made) and the new class's field
names held as a list (``NOW``) where ``library_change`` makes ``list(fields)`` (issue 23).

Here it must give what ``library_change`` gives (then ``_change``) for every step of
runs and for headers, phase tables and fields written otherwise (``None`` where that
gives ``None``), keep the same objects, make the same ops of the same type and the same
record of the call encoded; a table's names of a list subclass are compared with a copy;
and whole runs saved through it store the very rows the plain way stores.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest
from delta_reference import library_change
from hypothesis import given, settings
from hypothesis import strategies as st
from test_delta_fast5 import HEADER_HOWS, _header
from test_delta_pairs import Text, exact
from test_delta_pairs2 import STEPS, Ctx, _phases_of
from test_save_fast5 import phases_of, save_run

from statemachine._phases import Observing, Planning, ToolCalling
from statemachine.persist import _delta
from statemachine.persist._delta import (
    _PAIRS,
    FiniteOps,
    PhaseDumper,
    _dumped_fields,
    _pair,
)

LIBRARY = (Planning, ToolCalling, Observing)


def _known(old: Any, phase: Any) -> Any:
    if _pair(type(old), type(phase)) is None:
        return None
    return _PAIRS[(id(type(old)), id(type(phase)))]


def _run(how: str, old: Any, before: Any, phase: Any, seen: Any) -> Any:
    """One way's answer: ``None``, or the document, ops and the call's record after."""
    known = _known(old, phase)
    calls = [seen]
    try:
        if how == "whole":
            made = known[4](old, before, phase, calls)
        else:
            made = library_change(known, old, before, phase, calls)
    except Exception as error:  # both ways must raise alike
        return ("raised", type(error), str(error), calls[0] is seen)
    if made is None:
        return None
    return made[0], made[1], calls[0]


def _agree(old: Any, before: Any, phase: Any, seen: Any) -> bool:
    """Whether the pair's whole function answered; when and as ``library_change`` does."""
    if _known(old, phase) is None:  # not two of the library's classes
        return False
    fast = _run("whole", old, before, phase, seen)
    plain = _run("plain", old, before, phase, seen)
    if fast is None or plain is None:
        assert fast is None
        assert plain is None
        return False
    if fast[0] == "raised" or plain[0] == "raised":
        assert fast == plain
        return True
    document, ops, record = fast
    want, want_ops, want_record = plain
    assert exact(document) == exact(want)
    assert list(document) == list(want)
    assert [document[key] is before.get(key) for key in document] == [
        want[key] is before.get(key) for key in want
    ]
    fields, plain_fields = document["fields"], want["fields"]
    kept = before.get("fields")
    if type(kept) is dict:
        assert [fields[key] is kept.get(key) for key in fields] == [
            plain_fields[key] is kept.get(key) for key in plain_fields
        ]
    assert list(fields) == list(plain_fields)
    assert exact(ops) == exact(want_ops)
    assert type(ops) is type(want_ops)
    assert [type(op) for op in ops] == [type(op) for op in want_ops]
    assert (record is None) == (want_record is None)
    assert (record is seen) == (want_record is seen)
    if record is not None and record is not seen:
        assert len(record) == len(want_record)
        assert record[:8] == want_record[:8]
        assert record[8] is fields.get("call")
        assert exact(record[8]) == exact(want_record[8])
    return True


def test_every_step_of_a_run_agrees() -> None:
    taken = [_agree(old, document, phase, seen) for old, document, phase, seen in STEPS]
    library = [type(old) in LIBRARY and type(phase) in LIBRARY for old, _, phase, _ in STEPS]
    assert taken == library
    assert sum(taken) >= 100


class Names(list[Any]):
    """A table's field names of a list subclass: its ``__eq__`` is told what it is compared
    with, and changes it."""

    given: ClassVar[list[Any]] = []

    def __eq__(self, other: object) -> bool:
        Names.given.append(other)
        if type(other) is list:
            other.append("changed")
        return list(self) == other

    __hash__ = None


def _table(document: dict[str, Any], how: str, phase: Any = None) -> dict[str, Any]:
    """The document before, its table of phases or its fields written otherwise (or its
    kind, class or agent those of ``phase``, as other objects)."""
    out = dict(document)
    if how == "kind now, another object":
        out["kind"] = "".join(phase.kind)
    elif how == "kind and class now, other objects":
        out["kind"] = "".join(phase.kind)
        out["class"] = "".join(f"{type(phase).__module__}:{type(phase).__qualname__}")
    elif how == "class now, another object":
        out["class"] = "".join(f"{type(phase).__module__}:{type(phase).__qualname__}")
    kind = {Planning: "ToolCalling", ToolCalling: "Observing", Observing: "Planning"}
    table = {key: list(value) for key, value in document["phases"].items()}
    out["phases"] = table
    for key in table:
        names = table[key][1]
        if how == "names as a tuple":
            table[key][1] = tuple(names)
        elif how == "names of a list subclass":
            table[key][1] = Names(names)
        elif how == "names of a list subclass, other":
            table[key][1] = Names([*names, "more"])
        elif how == "names one short":
            table[key][1] = list(names[:-1])
        elif how == "names of text of a subclass":
            table[key][1] = [Text(name) for name in names]
        elif how == "path other":
            table[key][0] = "elsewhere:" + key
        elif how == "path of a subclass":
            table[key][0] = Text(table[key][0])
    if how == "entry missing":
        for value in kind.values():
            table.pop(value, None)
    fields = document["fields"]
    if how == "fields missing one":
        out["fields"] = {key: fields[key] for key in list(fields)[1:]}
    elif how == "fields with one more":
        out["fields"] = {**fields, "extra": 1}
    elif how == "fields as other keys' text":
        out["fields"] = {Text(key): value for key, value in fields.items()}
    return out


TABLE_HOWS = [
    "as written",
    "names as a tuple",
    "names of a list subclass",
    "names of a list subclass, other",
    "names one short",
    "names of text of a subclass",
    "path other",
    "path of a subclass",
    "entry missing",
    "fields missing one",
    "fields with one more",
    "fields as other keys' text",
    "kind now, another object",
    "kind and class now, other objects",
    "class now, another object",
]


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(STEPS) - 1), how=st.sampled_from(HEADER_HOWS))
def test_a_header_written_otherwise_agrees(at: int, how: str) -> None:
    old, document, phase, seen = STEPS[at]
    if type(old) not in LIBRARY or type(phase) not in LIBRARY:
        return
    _agree(old, _header(document, how), phase, seen)


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(STEPS) - 1), how=st.sampled_from(TABLE_HOWS))
def test_a_table_or_fields_written_otherwise_agree(at: int, how: str) -> None:
    old, document, phase, seen = STEPS[at]
    if type(old) not in LIBRARY or type(phase) not in LIBRARY:
        return
    _agree(old, _table(document, how, phase), phase, seen)


def test_a_list_subclass_of_names_is_given_a_copy() -> None:
    old, document, phase, seen = next(
        step
        for step in STEPS
        if type(step[0]) in LIBRARY
        and type(step[2]) in LIBRARY
        and type(step[0]) is not type(step[2])
    )
    known = _known(old, phase)
    now = known[4].__globals__["NOW"]
    want = [field.name for field in _dumped_fields(type(phase))]
    Names.given = []
    made = known[4](old, _table(document, "names of a list subclass"), phase, [seen])
    assert made is not None
    assert Names.given
    assert all(given is not now for given in Names.given)
    assert now == want  # not changed by the subclass's __eq__


def test_now_is_every_field_the_pair_makes() -> None:
    for old, document, phase, seen in STEPS:
        known = _known(old, phase)
        if known is None:
            continue
        made = known[4](old, document, phase, [seen])
        assert made is not None
        assert list(made[0]["fields"]) == known[4].__globals__["NOW"]


# --- whole runs ---------------------------------------------------------------------------------


def _plain_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pair's whole function replaced by ``library_change`` with the pair's."""
    for key, known in list(_PAIRS.items()):

        def plain(old: Any, before: Any, phase: Any, calls: Any, _known: Any = known) -> Any:
            return library_change(_known, old, before, phase, calls)

        monkeypatch.setitem(_PAIRS, key, (*known[:4], plain))


def _never(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pair's whole function answering ``None``: ``dump`` takes ``_change``."""
    for key, known in list(_PAIRS.items()):
        monkeypatch.setitem(_PAIRS, key, (*known[:4], lambda *args: None))


@pytest.mark.parametrize("ctx", [None, Ctx(n=1)])
def test_whole_runs_dump_as_the_plain_ways(monkeypatch: pytest.MonkeyPatch, ctx: Any) -> None:
    phases = _phases_of(70, ctx)
    fast = PhaseDumper()
    got = [fast.dump(phase) for phase in phases]
    assert sum(type(ops) is FiniteOps for _, ops in got) >= 3 * 70 - 2
    for patch in (_plain_library, _never):
        with monkeypatch.context() as patched:
            patch(patched)
            plain = PhaseDumper()
            want = [plain.dump(phase) for phase in phases]
        for (document, ops), (document2, ops2) in zip(got, want, strict=True):
            assert exact(document) == exact(document2)
            assert exact(ops) == exact(ops2)
            assert type(ops) is type(ops2)


@settings(max_examples=8, deadline=None)
@given(calls=st.integers(2, 40), every=st.integers(2, 30))
def test_whole_runs_store_the_same_rows(calls: int, every: int) -> None:
    states = phases_of(calls)
    with tempfile.TemporaryDirectory() as folder:
        fast = anyio.run(save_run, Path(folder) / "fast.db", "r", states, {"snapshot_every": every})
        with pytest.MonkeyPatch.context() as patched:
            _never(patched)
            plain = anyio.run(
                save_run, Path(folder) / "plain.db", "r", states, {"snapshot_every": every}
            )
    assert fast == plain


def test_the_module_names_the_whole_function() -> None:
    assert all(callable(known[4]) for known in _PAIRS.values())
    assert "_whole_source" in vars(_delta)
