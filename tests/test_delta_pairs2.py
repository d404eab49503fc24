"""The delta producer's functions per pair of the library's phase classes, and for a loop
memory of exactly ``LoopState``, give what the plain paths give (issue 23).

``persist._delta._pair`` writes out ``_fields_change`` for the phase before and the
phase now when both are the library's own ``Planning``, ``ToolCalling`` or ``Observing``
(by identity), and ``_loop_fields`` writes out ``_loop_change`` for exactly
``LoopState``. Each is compared here with the plain version on phases of real runs
changed in the ways untrusted code can change them (fields of other types, text and
ints of subclasses, objects changed in place, a field missing, documents of other
keys): the same fields (JSON for JSON and type for type, and the very encodings kept
where the plain path keeps them), the same fields set whole, the same ops and the same
record of the call encoded. Subclasses and classes equal to the library's by their
metaclass get no function.
"""

from __future__ import annotations

import copy
import enum
import itertools
import json
import operator
import types
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import anyio
import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from test_delta_pairs import HOWS, Text, _check, _run, exact, look_count, look_key

from statemachine import Agent, Budget, Phase, Runner, dump_phase, read_tool
from statemachine._actions import ActionLog, ActionRecord, _record
from statemachine._budget import Spend
from statemachine._errors import SetupError
from statemachine._governor import LoopState
from statemachine._json import to_plain
from statemachine._model import Message, ToolRequest
from statemachine._phases import Observing, Planning, ToolCalling
from statemachine.persist._chunks import _decode
from statemachine.persist._codec import (
    _PLAIN,
    _REQUEST_KEYS,
    _dump_loop,
    _dump_output,
    _encode,
    _flat,
    _holds_text,
    _importable,
    _keeps,
    _plain_json,
    _Plan,
    _plan,
    _try_encode,
    _try_rebuild,
)
from statemachine.persist._delta import (
    _RECORD_FIELDS,
    _RECORD_VALUES,
    PhaseDumper,
    _apply,
    _by_fields,
    _fields_change,
    _loop_change,
    _loop_fields,
    _pair,
    _record_fields,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class Count(int):
    """An int equal to a plain one, of another class."""


class Ctx(BaseModel):
    n: int = 0
    note: str = ""


def _phases_of(calls: int, ctx: Any = None) -> list[Phase[Any]]:
    """The phases of a run of ``calls`` tool calls (a context given, or none)."""
    agent = Agent[Any](name="pairs2", tools=[look_key], budget=Budget(), max_steps=10**6)
    turns = [tool_call("look_key", json.dumps({"key": f"k{n}"})) for n in range(calls)]
    runner = Runner(
        agent,
        model=ScriptedModel([*turns, reply("done")]),
        gate=AutoDenyGate(),
        keep_states=True,
    )
    return list(anyio.run(runner.run, ctx, "go").states)


def _steps(phases: list[Phase[Any]]) -> list[tuple[Phase[Any], dict[str, Any], Phase[Any], Any]]:
    """Each phase after the first with the phase before, that one's document and the
    record of the call encoded then, as the dumper held them."""
    dumper = PhaseDumper()
    steps = []
    for phase in phases:
        old, before, seen = dumper._phase, dumper._document, dumper._call[0]
        dumper.dump(phase)
        if old is not None and before is not None:
            steps.append((old, before, phase, seen))
    return steps


PHASES = _phases_of(40)
STEPS = _steps(PHASES)
LIBRARY = (Planning, ToolCalling, Observing)


def _same_seen(one: Any, other: Any, fields: Any, plain: Any) -> bool:
    """Whether two records of a call encoded (``_call_seen``) hold the very objects, but
    for the encoding, which each holds as its own fields' (equal JSON)."""
    if one is other:  # neither changed it
        return True
    if one is None or other is None:
        return False
    if not (one[-1] is fields.get("call") and other[-1] is plain.get("call")):
        return False
    return len(one) == len(other) and all(
        a is b or (type(a) is tuple and type(b) is tuple and all(map(operator.is_, a, b)))
        for a, b in zip(one[:-1], other[:-1], strict=True)
    )


def _both(old: Phase[Any], before: Any, phase: Phase[Any], seen: Any) -> bool:
    """Run the pair's function (when there is one) and ``_fields_change`` on the same
    phases; assert they agree. Whether the pair's function answered (not ``None``)."""
    cls = type(phase)
    ops_plain: list[list[Any]] = []
    calls_plain = [seen]
    plain = _fields_change(cls, old, before, phase, ops_plain, calls_plain)
    pair = _pair(type(old), cls)
    if type(old) in LIBRARY and cls in LIBRARY:
        assert pair is not None
    if pair is None:
        return False
    ops: list[list[Any]] = []
    calls = [seen]
    made = pair(old, before, phase, ops, calls)
    if made is None:
        assert ops == []
        assert calls[0] is seen
        return False
    fields, merged = made
    assert exact(fields) == exact(plain[0])
    assert list(fields) == list(plain[0])
    assert exact(merged) == exact(plain[1])
    assert exact(ops) == exact(ops_plain)
    assert _same_seen(calls[0], calls_plain[0], fields, plain[0])
    # The very encodings of the phase before kept where the plain path keeps them.
    kept = [fields[name] is before.get(name) for name in fields]
    assert kept == [plain[0][name] is before.get(name) for name in plain[0]]
    # The loop memory's: field by field.
    if type(before) is dict and type(before.get("loop")) is dict:
        inner = [fields["loop"].get(key) is value for key, value in before["loop"].items()]
        assert inner == [plain[0]["loop"].get(key) is v for key, v in before["loop"].items()]
    return True


def test_every_pair_of_a_run_agrees_with_the_plain_path() -> None:
    taken = sum(_both(old, document["fields"], phase, seen) for old, document, phase, seen in STEPS)
    library = [type(old) in LIBRARY and type(phase) in LIBRARY for old, _, phase, _ in STEPS]
    assert taken == sum(library) >= 3 * 40 - 2  # all but from Idle and to the end
    kinds = {(type(old).__name__, type(phase).__name__) for old, _, phase, _ in STEPS}
    assert {("Planning", "ToolCalling"), ("ToolCalling", "Observing")} <= kinds
    assert ("Observing", "Planning") in kinds


# --- phases changed as untrusted code may change them --------------------------------------


def _copy(phase: Phase[Any]) -> Phase[Any]:
    """Another object of the phase's class holding its fields (``copy.copy`` of a phase
    is refused): as untrusted code may make one."""
    made = object.__new__(type(phase))
    for field in attrs.fields(type(phase)):
        object.__setattr__(made, field.name, getattr(phase, field.name))
    return made


def _set(phase: Phase[Any], name: str, value: Any) -> Phase[Any]:
    made = _copy(phase)
    object.__setattr__(made, name, value)
    return made


def _loop_variant(loop: LoopState, how: str) -> LoopState:
    """A loop memory of ``loop``'s fields with one changed as ``how`` says."""
    values = loop._fields()
    if how == "int as bool":
        values["low_gain_streak"] = True
    elif how == "int of a subclass":
        values["tool_iterations"] = Count(values["tool_iterations"])
    elif how == "int as float":
        values["tool_iterations"] = float(values["tool_iterations"])
    elif how == "int equal, other object":
        values["tool_iterations"] = int(values["tool_iterations"]) + 10**20 - 10**20 + 1000 - 1000
    elif how == "text of a subclass":
        values["finalize"] = Text(values["finalize"])
    elif how == "text changed":
        values["paused"] = "waiting"
    elif how == "evidence as a list":
        values["evidence"] = list(values["evidence"])
    elif how == "evidence copied":
        values["evidence"] = tuple("".join(item) for item in values["evidence"])
    elif how == "evidence of subclass texts":
        values["evidence"] = tuple(Text(item) for item in values["evidence"])
    elif how == "actions as a tuple":
        values["actions"] = tuple(values["actions"])
    elif how == "actions appended":
        record = _record("call-x", "look_key", "read", "e" * 64, "k:" + "f" * 64, "look()")
        actions = values["actions"]
        if type(actions) is ActionLog:
            values["actions"] = actions.appended(record)
        else:
            values["actions"] = (*actions, record)
    elif how == "actions rebuilt":
        values["actions"] = ActionLog(list(values["actions"]))
    elif how == "flags":
        values["flags"] = ("stuck",)
    return LoopState.model_construct(**values)


class OwnLoop(LoopState):
    """A loop memory of a subclass: the plain path on both sides."""


LOOP_HOWS = [
    "int as bool",
    "int of a subclass",
    "int as float",
    "int equal, other object",
    "text of a subclass",
    "text changed",
    "evidence as a list",
    "evidence copied",
    "evidence of subclass texts",
    "actions as a tuple",
    "actions appended",
    "actions rebuilt",
    "flags",
]

PHASE_HOWS = [
    "step of a subclass",
    "step as bool",
    "step equal, other object",
    "step unchanged",
    "call id of a subclass",
    "transcript as a tuple",
    "spend changed",
    "spend the same counts",
    "spend of numbers of a subclass",
    "loop of a subclass",
    "loop the same fields",
    "loop memory missing on the phase before",
    "step missing on the phase before",
    "pending as a list",
    "call replaced",
    *LOOP_HOWS,
]


def _variant(old: Phase[Any], phase: Phase[Any], how: str) -> tuple[Phase[Any], Phase[Any]]:
    if how in LOOP_HOWS:
        return old, _set(phase, "loop", _loop_variant(phase.loop, how))
    if how == "step of a subclass":
        return old, _set(phase, "step", Count(phase.step))
    if how == "step as bool":
        return old, _set(phase, "step", True)
    if how == "step equal, other object":
        return old, _set(phase, "step", int(str(phase.step + 10**20)) - 10**20)
    if how == "step unchanged":
        return old, _set(phase, "step", old.step)
    if how == "call id of a subclass" and hasattr(phase, "call_id"):
        return old, _set(phase, "call_id", Text(phase.call_id))
    if how == "transcript as a tuple":
        return old, _set(phase, "transcript", tuple(phase.transcript))
    if how == "spend changed":
        return old, _set(phase, "spent", Spend(tokens=5, cost=Decimal("1.50")))
    if how == "spend the same counts":
        spent = phase.spent
        return old, _set(phase, "spent", Spend(tokens=spent.tokens, cost=spent.cost))
    if how == "spend of numbers of a subclass":
        made = Spend()
        object.__setattr__(made, "tool_calls", Count(phase.spent.tool_calls))
        return old, _set(phase, "spent", made)
    if how == "loop of a subclass":
        return old, _set(phase, "loop", OwnLoop.model_construct(**phase.loop._fields()))
    if how == "loop the same fields":
        return old, _set(phase, "loop", LoopState.model_construct(**old.loop._fields()))
    if how == "loop memory missing on the phase before":
        made = _copy(old)
        object.__delattr__(made, "loop")
        return made, phase
    if how == "step missing on the phase before":
        made = _copy(old)
        object.__delattr__(made, "step")
        return made, phase
    if how == "pending as a list" and hasattr(phase, "pending"):
        return old, _set(phase, "pending", list(phase.pending))
    if how == "call replaced" and hasattr(phase, "call") and hasattr(old, "call"):
        return old, _set(phase, "call", copy.copy(old.call))
    return old, phase


def _before_variant(before: dict[str, Any], how: str) -> Any:
    """The fields of the document before, as other code may have written them."""
    if how == "reordered":
        keys = list(before)
        keys[0], keys[1] = keys[1], keys[0]
        return {key: before[key] for key in keys}
    if how == "a key missing":
        return {key: value for key, value in before.items() if key != "step"}
    if how == "a key more":
        return {**before, "extra": 1}
    if how == "a dict of a subclass":

        class Fields(dict[str, Any]):
            pass

        return Fields(before)
    if how == "loop memory reordered":
        loop = dict(reversed(list(before["loop"].items())))
        return {**before, "loop": loop}
    if how == "loop memory of a key less":
        loop = {key: value for key, value in before["loop"].items() if key != "flags"}
        return {**before, "loop": loop}
    return before


BEFORE_HOWS = [
    "as written",
    "reordered",
    "a key missing",
    "a key more",
    "a dict of a subclass",
    "loop memory reordered",
    "loop memory of a key less",
]


def _outcome(function: Any, *args: Any) -> tuple[Any, ...]:
    """What ``function(*args)`` gives, or the class and text of the error it raises."""
    try:
        return ("value", function(*args))
    except Exception as error:
        return ("error", type(error), str(error))


def _agree_or_fail_alike(old: Any, before: Any, phase: Any, seen: Any) -> None:
    """Both paths give the same, or both raise the same error."""
    plain = _outcome(_fields_change, type(phase), old, before, phase, [], [seen])
    if plain[0] == "error":
        pair = _pair(type(old), type(phase))
        if pair is not None:  # else not a pair of the library's classes: nothing to compare
            assert _outcome(pair, old, before, phase, [], [seen]) == plain
        return
    _both(old, before, phase, seen)


@settings(max_examples=200, deadline=None)
@given(
    at=st.integers(1, len(STEPS) - 2),
    how=st.sampled_from(PHASE_HOWS),
    before_how=st.sampled_from(BEFORE_HOWS),
)
def test_a_changed_pair_agrees_with_the_plain_path(at: int, how: str, before_how: str) -> None:
    old, document, phase, seen = STEPS[at]
    old, phase = _variant(old, phase, how)
    before = _before_variant(document["fields"], before_how)
    _agree_or_fail_alike(old, before, phase, seen)


def test_documents_of_other_keys_take_the_plain_path() -> None:
    old, document, phase, seen = STEPS[5]
    pair = _pair(type(old), type(phase))
    assert pair is not None
    for how in BEFORE_HOWS[1:5]:
        assert pair(old, _before_variant(document["fields"], how), phase, [], [seen]) is None


# --- the loop memory ----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(STEPS) - 2), hows=st.lists(st.sampled_from(LOOP_HOWS), max_size=3))
def test_a_loop_memory_s_change_is_loop_change_s(at: int, hows: list[str]) -> None:
    old, document, phase, _ = STEPS[at]
    loop = phase.loop
    for how in hows:
        loop = _loop_variant(loop, how)
    encoded = document["fields"]["loop"]
    ops: list[list[Any]] = []
    plain_ops: list[list[Any]] = []
    made = _loop_fields(old.loop, encoded, loop, ops)
    plain = _loop_change(old.loop, encoded, loop, plain_ops)
    assert exact(made) == exact(plain)
    assert list(made) == list(plain)
    assert [made[key] is encoded.get(key) for key in made] == [
        plain[key] is encoded.get(key) for key in plain
    ]
    assert exact(ops) == exact(plain_ops)
    if not hows:
        assert exact(made) == exact(_dump_loop(loop))


def test_a_loop_memory_encoded_in_another_order_takes_the_plain_path() -> None:
    old, document, phase, _ = next(step for step in STEPS if step[0].loop is not step[2].loop)
    encoded = dict(reversed(list(document["fields"]["loop"].items())))
    ops: list[list[Any]] = []
    plain_ops: list[list[Any]] = []
    made = _loop_fields(old.loop, encoded, phase.loop, ops)
    assert exact(made) == exact(_loop_change(old.loop, encoded, phase.loop, plain_ops))
    assert list(made) == list(_encode(phase.loop))  # the fields' order, not the document's
    assert exact(ops) == exact(plain_ops)


# --- classes that are not the library's -----------------------------------------------------


class OwnPlanning(Planning[Any]):
    """A subclass of Planning with no field of its own."""


class Mimic(type):
    """A metaclass making its classes equal to, and hash as, Planning."""

    def __eq__(cls, other: object) -> bool:
        return other is Planning or type.__eq__(cls, other)

    def __hash__(cls) -> int:
        return hash(Planning)


class LooksLikePlanning(metaclass=Mimic):
    kind = "Planning"


def test_only_the_library_s_own_classes_get_a_pair() -> None:
    assert _pair(Planning, ToolCalling) is _pair(Planning, ToolCalling) is not None
    assert _pair(OwnPlanning, ToolCalling) is None
    assert _pair(ToolCalling, OwnPlanning) is None
    assert LooksLikePlanning == Planning
    assert hash(LooksLikePlanning) == hash(Planning)
    assert _pair(LooksLikePlanning, ToolCalling) is None
    assert _pair(Observing, LooksLikePlanning) is None
    assert _pair(Planning, ToolCalling) is not _pair(ToolCalling, Observing)


# --- whole runs, dumped as the saver dumps them ---------------------------------------------


@settings(max_examples=20, deadline=None)
@given(hows=st.lists(st.sampled_from(HOWS), min_size=1, max_size=4))
def test_runs_whose_tool_changes_its_arguments_are_dumped_as_in_full(hows: list[str]) -> None:
    """Through the pairs' functions: each document is dump_phase's, the ops rebuild it."""
    _check(_run(look_key, hows))
    # A model of numbers (no shortcut for its call) with the changes its fields can hold.
    _check(_run(look_count, [how for how in hows if how in ("set", "same text", "order")]))


@read_tool
async def bump(args: Ctx) -> dict[str, object]:
    """Return what it was given."""
    return {"n": args.n}


def test_a_context_changed_in_place_is_dumped_again() -> None:
    """The phases share one context object, changed in place between two dumps: the pair's
    function compares it (not the same encoding by identity) and sets it."""
    ctx = Ctx(n=1)
    agent = Agent[Ctx](name="ctx", tools=[bump], budget=Budget(), max_steps=100)
    model = ScriptedModel(
        [tool_call("bump", '{"n": 1}'), tool_call("bump", '{"n": 2}'), reply("x")]
    )
    dumper = PhaseDumper()
    dumped: list[tuple[Any, Any]] = []

    def seen(before: Phase[Any], after: Phase[Any]) -> None:
        if not dumped:
            dumped.append(dumper.dump(before))
        after.ctx.n += 1  # in place, on the object every phase holds
        document, ops = dumper.dump(after)
        assert exact(document) == exact(dump_phase(after))
        dumped.append((copy.deepcopy(document), ops))

    runner = Runner(agent, model=model, gate=AutoDenyGate(), on_transition=seen)
    anyio.run(runner.run, ctx, "go")
    assert len(dumped) > 4
    for (before, _), (document, ops) in itertools.pairwise(dumped):
        rebuilt = copy.deepcopy(before)
        _apply(rebuilt, copy.deepcopy(ops))
        assert exact(rebuilt) == exact(document)
        assert any(op[1][:2] == ["fields", "ctx"] or "ctx" in op[-1] for op in ops if op[1])


def test_a_subclass_s_run_is_dumped_as_in_full() -> None:
    """An agent whose Planning is a subclass: its pairs take the plain path."""
    from statemachine import Phases

    phases = Phases(planning=OwnPlanning)
    agent = Agent[None](name="own", tools=[look_key], budget=Budget(), max_steps=100, phases=phases)
    model = ScriptedModel([tool_call("look_key", '{"key": "a"}'), reply("x")])
    dumper = PhaseDumper()
    seen_kinds: list[type[Any]] = []

    def seen(before: Phase[Any], after: Phase[Any]) -> None:
        if not seen_kinds:
            dumper.dump(before)
        seen_kinds.append(type(after))
        document, _ = dumper.dump(after)
        assert exact(document) == exact(dump_phase(after))

    runner = Runner(agent, model=model, gate=AutoDenyGate(), on_transition=seen)
    anyio.run(runner.run, None, "go")
    assert OwnPlanning in seen_kinds


def test_the_premise_the_pairs_are_written_for() -> None:
    """The classes' fields are attrs slots the functions read by name."""
    for cls in LIBRARY:
        assert all(field.name.isidentifier() for field in attrs.fields(cls))
    assert _encode(0) == 0
    assert _encode(Count(3)) == 3
    assert type(_encode(Count(3))) is int


# --- a value's encoding: exact types first ------------------------------------------------


def _encode_before(value: Any) -> Any:
    """``_codec._encode`` as it was before its exact types were tested first."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return {"$float": repr(value)}
    if isinstance(value, Decimal):
        return value if _keeps(value) else {"$decimal": str(value)}
    if type(value) is Message:
        requests: list[Any] = []
        for call in value.tool_calls:
            if type(call) is not ToolRequest or not _holds_text(call):
                requests = [_encode_before(call) for call in value.tool_calls]
                break
            held = call.__dict__
            requests.append(
                held.copy() if tuple(held) == _REQUEST_KEYS else call.model_dump(mode="json")
            )
        return {
            "role": value.role,
            "content": value.content,
            "tool_calls": requests,
            "tool_call_id": value.tool_call_id,
            "name": value.name,
        }
    if type(value) is ActionRecord:
        record = value.model_dump()
        for key, item in record.items():
            if type(item) is not str:
                record[key] = _encode_before(item)
        return record
    if isinstance(value, BaseModel):
        plan = _plan(type(value))
        if plan is _Plan.TEXT:
            if _holds_text(value):
                return value.model_dump(mode="json")
            return _encode_before(value.model_dump(mode="python", warnings=False))
        dumped = value.model_dump(mode="python")
        if plan is _Plan.FLAT:
            for key, item in dumped.items():
                if type(item) not in _PLAIN:
                    dumped[key] = _encode_before(item)
            return dumped
        return _encode_before(dumped)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"an object key must be text, got {key!r}")
            out[str.__str__(key)] = _encode_before(item)
        if len(out) == 1 and next(iter(out)).startswith("$"):
            return {"$object": out}
        return out
    if isinstance(value, list | tuple):
        return [_encode_before(item) for item in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError("bytes are not a JSON value")
    plain = to_jsonable_python(value)
    if type(plain) is type(value):
        raise TypeError(f"{type(value).__name__} is not a JSON value")
    return _encode_before(plain)


def _shape(value: Any) -> Any:
    """A value's types all the way down, with its JSON: type for type."""
    if type(value) is dict:
        return ("dict", [(key, type(key).__name__, _shape(item)) for key, item in value.items()])
    if type(value) is list:
        return ("list", [_shape(item) for item in value])
    return (type(value).__name__, repr(value))


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Word(enum.StrEnum):
    YES = "yes"


class Box(dict[str, Any]):
    """A dict of a subclass: a mapping, not exactly a dict."""


class Point(BaseModel):
    x: int = 1
    label: str = "p"


def _records() -> st.SearchStrategy[Any]:
    return st.builds(
        lambda gain, outcome: _record("c", "t", "read", "e", "k", "x", outcome, "r", gain),
        st.none() | st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(["pending", "ok"]),
    )


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.integers(-3, 300).map(Count)
    | st.floats()
    | st.decimals(allow_nan=False, allow_infinity=False, places=2)
    | st.sampled_from([Decimal("800"), Decimal("8E+2"), Decimal("-0")])
    | st.text(max_size=4)
    | st.text(max_size=4).map(Text)
    | st.sampled_from([Colour.RED, Level.HIGH, Word.YES, b"x", 1j, Point(), Spend()])
    | st.builds(Message, role=st.sampled_from(["user", "tool"]), content=st.text(max_size=3))
    | _records()
)
keys = st.text(max_size=3) | st.sampled_from(["$x", "$float", "$"]) | st.text(max_size=2).map(Text)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Lists, tuples, dicts, mappings and dicts of int keys of ``inner``."""
    return (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(keys, inner, max_size=3)
        | st.dictionaries(keys, inner, max_size=2).map(Box)
        | st.dictionaries(keys, inner, max_size=2).map(types.MappingProxyType)
        | st.dictionaries(st.integers(0, 2), inner, min_size=1, max_size=2)
    )


# Values two containers deep at most.
values = scalars | _containers(scalars | _containers(scalars))


@settings(max_examples=400, deadline=None)
@given(value=values)
def test_a_value_is_encoded_as_before(value: Any) -> None:
    expected = _outcome(_encode_before, value)
    made = _outcome(_encode, value)
    if expected[0] == "error":
        assert made == expected
    else:
        assert made[0] == "value"
        assert _shape(made[1]) == _shape(expected[1])


def test_text_and_ints_are_their_own_encoding() -> None:
    text, number = "".join(["a", "b"]), 10**30
    assert _encode(text) is text
    assert _encode(number) is number
    assert type(_encode(Text("a"))) is str
    assert type(_encode(Count(2))) is int
    assert type(_encode(Word.YES)) is str
    assert type(_encode(Level.HIGH)) is int
    assert _encode(Box(a=1)) == {"a": 1}
    assert _encode({"$a": 1}) == {"$object": {"$a": 1}}


# --- a record settled ---------------------------------------------------------------------


@st.composite
def record_pairs(draw: st.DrawFn) -> tuple[ActionRecord, ActionRecord]:
    words = st.sampled_from(["a", "b", "pending", "ok", ""]) | st.text(max_size=3)
    gains = st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.just(1.0)

    def one() -> list[Any]:
        return [
            *(draw(words) for _ in range(6)),
            draw(st.sampled_from(["pending", "ok", "failed"])),
            draw(words),
            draw(gains),
        ]

    before, after = one(), one()
    kept = draw(st.lists(st.booleans(), min_size=9, max_size=9))
    after = [old if keep else new for old, new, keep in zip(before, after, kept, strict=True)]
    if draw(st.booleans()):  # an equal text, another object or of a subclass
        after[7] = draw(st.sampled_from([Text(before[7]), "".join([*before[7], "x"])]))
    return _record(*before), _record(*after)


@settings(max_examples=300, deadline=None)
@given(pair=record_pairs(), shape=st.sampled_from(["own", "other", "reordered", "short", "list"]))
def test_a_record_s_change_is_by_fields_s(
    pair: tuple[ActionRecord, ActionRecord], shape: str
) -> None:
    previous, value = pair
    encoded: Any = _encode(previous)
    if shape == "other":
        encoded = {key: 1.0 for key in encoded}
    elif shape == "reordered":
        encoded = dict(reversed(list(encoded.items())))
    elif shape == "short":
        encoded = dict(list(encoded.items())[:-1])
    elif shape == "list":
        encoded = list(encoded.values())
    made = _record_fields(value, previous, encoded)
    plain = _by_fields(value, previous, encoded, _RECORD_FIELDS, _RECORD_VALUES)
    assert _shape(made) == _shape(plain)
    if shape == "own":
        assert made is not None
        assert _shape(made[0]) == _shape(_encode(value))


# --- a tool's output ----------------------------------------------------------------------


def _dump_output_before(output: Any) -> dict[str, Any]:
    """``_codec._dump_output`` as it was before a flat dict was copied."""
    if isinstance(output, BaseModel):
        path = _importable(type(output), "the tool output class")
        return {"type": "pydantic", "class": path, "data": _encode(output)}
    plain = to_plain(output)
    encoded = _try_encode(_encode, plain)
    if encoded is None or (
        not _plain_json(plain) and _try_rebuild(lambda: _decode(encoded)) != output
    ):
        raise SetupError(
            f"a tool output of type {type(output).__name__} cannot be checkpointed: it does "
            "not come back equal from JSON. Return JSON values (dicts, lists, text, numbers, "
            "Decimal) or a pydantic model from tools"
        )
    return {"type": "json", "value": encoded}


class LikeText(type):
    """A metaclass making its classes equal to, and hash as, str."""

    def __eq__(cls, other: object) -> bool:
        return other is str or type.__eq__(cls, other)

    def __hash__(cls) -> int:
        return hash(str)


class Odd(metaclass=LikeText):
    """Not text, whatever its class says of itself."""


output_values = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.integers(0, 3).map(Count)
    | st.text(max_size=4)
    | st.text(max_size=4).map(Text)
    | st.floats(allow_nan=False)
    | st.sampled_from([Decimal("1.50"), Level.HIGH, Word.YES, Odd(), [1, "a"], {"a": 1}])
)
output_keys = st.text(max_size=3) | st.sampled_from(["$x", "$"]) | st.text(max_size=2).map(Text)


@settings(max_examples=400, deadline=None)
@given(
    output=st.dictionaries(output_keys, output_values, max_size=4)
    | st.dictionaries(st.integers(0, 2), output_values, min_size=1, max_size=2)
    | st.dictionaries(output_keys, output_values, max_size=2).map(Box)
)
def test_a_tool_output_is_dumped_as_before(output: Any) -> None:
    expected = _outcome(_dump_output_before, output)
    made = _outcome(_dump_output, output)
    if expected[0] == "error":
        assert made == expected
    else:
        assert made[0] == "value"
        assert _shape(made[1]) == _shape(expected[1])


def test_a_flat_output_is_copied_and_anything_else_is_not() -> None:
    output = {"key": "k1", "value": 42, "unit": "widgets", "ok": True, "none": None}
    dumped = _dump_output(output)
    assert dumped == {"type": "json", "value": output}
    assert dumped["value"] is not output
    assert _flat({"a": Odd()}) is None
    assert _flat({"a": Count(1)}) is None
    assert _flat({Text("a"): 1}) is None
    assert _flat({"$a": 1}) is None
    assert _flat({"$a": 1, "b": 2}) == {"$a": 1, "b": 2}
