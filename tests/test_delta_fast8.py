"""The checkpoint producer's shortcuts of issue 23's thirteenth round give what the plain
paths give.

- A transcript or an action log made by the library's append (or a log by its replace of
  the last record) keeps in ``_grown`` the pair (the tail it was made from, the tail it
  made); every other one holds ``None`` (made by ``__init__`` or ``_of``: a copy, a
  pickle, a validation, a tail that filled a chunk). The functions per pair and the loop
  memory take the tail before's items as there, without looking at them one by one,
  when that pair is of the very tail before and the very tail now: the same encoding and
  ops as ``_fields_change`` for any tail, hand-built, of a subclass, copied, restored,
  or changed after it was made (the tail before or now replaced, the pair set to
  anything, or not set at all).
- ``_spent`` for a spend of exact ints and an exact ``Decimal`` cost (each step a new
  ``Decimal``, most often of the same spelling): the same as ``_spent_plain`` and
  ``_compared``, whatever ``_money``'s last spelling held.
- ``_codec._message`` (a message's encoding, its validated calls copied at once): the
  same as before for calls of any class, made around validation, of subclass texts,
  reordered or of other keys.
- Observing's output (a flat dict) encoded by the function per pair at once: the same as
  ``_dump_field`` for any output, raising what it raises.
"""

from __future__ import annotations

import copy
import itertools
import pickle
import warnings
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from test_delta_fast5 import COSTS, COUNTS, _copy, _encoded_before, _spend
from test_delta_fast7 import GROWN, LIBRARY, SETTLED, _again, _counted, _pair_of
from test_delta_pairs import Text, exact
from test_delta_pairs2 import PHASES, STEPS

from statemachine import Message, ToolRequest
from statemachine._actions import CHUNK, ActionLog, ActionRecord
from statemachine._errors import SetupError
from statemachine._fast._messages import _appended as fast_appended
from statemachine._governor import LoopState
from statemachine._model import _CHUNK, Transcript
from statemachine._phases import Observing, Planning, ToolCalling
from statemachine.persist import _delta
from statemachine.persist._codec import (
    _REQUEST_KEYS,
    _encode,
    _holds_text,
    _message,
    dump_phase,
)
from statemachine.persist._delta import (
    _PAIRS,
    _compared,
    _dumped_fields,
    _fields_change,
    _loop_fields,
    _spent,
    _spent_plain,
)

# --- the tail a transcript or log was made from ------------------------------------------------


def _message_of(n: int) -> Message:
    return Message(role="user", content=f"m{n}")


def _record_of(n: int) -> ActionRecord:
    made = object.__new__(ActionRecord)
    for field in attrs.fields(ActionRecord):
        object.__setattr__(made, field.name, None if field.name == "gain" else f"{field.name}{n}")
    return made


def _holds_its_pair(sequence: Any) -> bool:
    """``_grown`` is ``None``, or the pair of a tail before and this very tail whose
    items are the tail before's, the very objects: all of them first (appended), or all
    but the last at the same length (the last replaced)."""
    grown = sequence._grown
    if grown is None:
        return True
    before, tail = grown
    if tail is not sequence._tail or type(before) is not tuple or type(tail) is not tuple:
        return False
    if len(tail) == len(before):
        return all(a is b for a, b in zip(tail[:-1], before[:-1], strict=True))
    return len(tail) > len(before) and all(a is b for a, b in zip(tail, before, strict=False))


STEPS_OF_TRANSCRIPTS = st.lists(
    st.tuples(
        st.sampled_from(["appended", "fast", "prefixed", "copy", "deep", "pickle", "again"]),
        st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(start=st.integers(0, 70), steps=STEPS_OF_TRANSCRIPTS)
def test_a_transcript_keeps_the_tail_its_append_grew(
    start: int, steps: list[tuple[str, int]]
) -> None:
    transcript = Transcript(_message_of(n) for n in range(start))
    assert transcript._grown is None
    made = start
    for how, count in steps:
        new = tuple(_message_of(made + n) for n in range(count))
        made += count
        before = transcript
        if how == "appended":
            transcript = transcript.appended(*new)
        elif how == "fast":
            transcript = fast_appended(transcript, *new)
        elif how == "prefixed":
            transcript = transcript.prefixed(*new)
        elif how == "copy":
            transcript = copy.copy(transcript)
        elif how == "deep":
            transcript = copy.deepcopy(transcript)
        elif how == "pickle":
            transcript = pickle.loads(pickle.dumps(transcript))
        else:
            transcript = Transcript(list(transcript))
        assert type(transcript) is Transcript
        assert _holds_its_pair(transcript)
        grows = how in ("appended", "fast") and len(before._tail) + count <= _CHUNK
        if grows:
            grown = transcript._grown
            assert grown is not None
            assert grown[0] is before._tail
            assert grown[1] is transcript._tail
        else:
            assert transcript._grown is None
        assert list(transcript) == [*before, *new] if how in ("appended", "fast") else True


STEPS_OF_LOGS = st.lists(
    st.tuples(st.sampled_from(["appended", "replaced", "copy", "pickle", "again"]), st.integers()),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(start=st.integers(0, 70), steps=STEPS_OF_LOGS)
def test_a_log_keeps_the_tail_its_append_or_last_replace_made(
    start: int, steps: list[tuple[str, int]]
) -> None:
    log = ActionLog(_record_of(n) for n in range(start))
    assert log._grown is None
    made = start
    for how, at in steps:
        before = log
        if how == "appended":
            log = log.appended(_record_of(made))
            made += 1
        elif how == "replaced" and len(log):
            position = at % len(log)
            log = log.replaced(position, _record_of(made))
            made += 1
        elif how == "copy":
            log = copy.copy(log)
        elif how == "pickle":
            log = pickle.loads(pickle.dumps(log))
        else:
            log = ActionLog(list(log))
        assert _holds_its_pair(log)
        tail = before._tail
        last = how == "replaced" and len(before) and at % len(before) == len(before) - 1
        if (how == "appended" and len(tail) < CHUNK) or last:
            grown = log._grown
            assert grown is not None
            assert grown[0] is tail
            assert grown[1] is log._tail
        else:
            assert log._grown is None


def test_a_run_s_transcripts_and_logs_keep_their_pairs() -> None:
    """The runner's append (``_fast._messages``) and the governor's record and settle
    (made in place in ``_governor``) keep the pair as the classes' own do."""
    grown_transcripts = grown_logs = 0
    for before, phase in itertools.pairwise(PHASES):
        for old, new in (
            (before.transcript, phase.transcript),
            (before.loop.actions, phase.loop.actions),
        ):
            assert _holds_its_pair(new)
            if new is not old and new._grown is not None and new._grown[0] is old._tail:
                if type(new) is Transcript:
                    grown_transcripts += 1
                else:
                    grown_logs += 1
    # Each call's record and settle, less the record that starts a chunk.
    assert grown_transcripts >= 2 * 40 - 2
    assert grown_logs >= 2 * 40 - 2


def test_a_run_s_tails_are_not_looked_at_item_by_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of a run takes its tails by their pairs: the functions per pair look
    at no tail item by item, the loop memory only at its windows moved on."""
    steps = [s for s in STEPS if type(s[0]) in LIBRARY and type(s[2]) in LIBRARY]
    for old, _, phase, _ in steps:
        _pair_of(old, phase)
    walks = {"pair": 0, "loop": 0}

    def counting(where: str) -> Any:
        def walk(items: Any) -> bool:
            walks[where] += 1
            return all(items)

        return walk

    for known in _PAIRS.values():
        monkeypatch.setitem(known[2].__globals__, "all", counting("pair"))
    monkeypatch.setitem(_loop_fields.__globals__, "all", counting("loop"))
    windows = 0
    for old, document, phase, seen in steps:
        windows += old.loop.evidence is not phase.loop.evidence
        made = _pair_of(old, phase)(old, document["fields"], phase, [], [seen])
        assert made is not None
    assert walks["pair"] == 0
    assert walks["loop"] == windows


def _agree(old: Any, before: Any, phase: Any, seen: Any) -> None:
    """The pair's function gives what ``_fields_change`` gives (kept objects included),
    or raises what it raises."""
    kind: Any = type(phase)
    ops_plain: list[list[Any]] = []
    ops: list[list[Any]] = []
    with warnings.catch_warnings():  # pydantic's on a field of another type: not ours
        warnings.simplefilter("ignore")
        try:
            plain: Any = _fields_change(kind, old, before, phase, ops_plain, [seen])
        except (TypeError, ValueError, SetupError) as error:
            plain = type(error)
        try:
            made: Any = _pair_of(old, phase)(old, before, phase, ops, [seen])
        except (TypeError, ValueError, SetupError) as error:
            made = type(error)
    if type(plain) is type:
        assert made is plain
        return
    assert made is not None
    assert exact(made[0]) == exact(plain[0])
    assert list(made[0]) == list(plain[0])
    assert exact(made[1]) == exact(plain[1])
    assert exact(ops) == exact(ops_plain)
    assert [made[0][key] is before.get(key) for key in made[0]] == [
        plain[0][key] is before.get(key) for key in plain[0]
    ]
    loop, plain_loop = made[0]["loop"], plain[0]["loop"]
    assert [loop[key] is before["loop"].get(key) for key in loop] == [
        plain_loop[key] is before["loop"].get(key) for key in plain_loop
    ]


class SubTranscript(Transcript):  # type: ignore[misc]  # final: a subclass made only here
    """A transcript of a class of its own."""


class SubLog(ActionLog):  # type: ignore[misc]  # final: a subclass made only here
    """An action log of a class of its own."""


class SubMessage(Message):  # type: ignore[misc]  # final: a subclass made only here
    """A message of a class of its own."""


def _other(item: Any) -> Any:
    """An item of ``item``'s class that encodes otherwise."""
    if type(item) is ActionRecord:
        return _copy(item, result=f"{item.result} and more")
    return _copy(item, content=f"{item.content} and more")


def _of_a_subclass(item: Any) -> Any:
    """``item`` as an object of a class of its own (a message) or a record of another class."""
    if type(item) is ActionRecord:
        return _copy(item, gain=Decimal("0.5"))  # not a float: encoded otherwise
    made = object.__new__(SubMessage)
    for field in attrs.fields(Message):
        object.__setattr__(made, field.name, getattr(item, field.name))
    return made


def _remade(sequence: Any, how: str, before: Any) -> Any:
    """``sequence`` (grown from ``before``, of the same class) made again, changed after it
    was made, copied or restored."""
    if how == "as made":
        return sequence
    if how == "copy":
        return copy.copy(sequence)
    if how == "deep copy":
        return copy.deepcopy(sequence)
    if how == "pickled":
        return pickle.loads(pickle.dumps(sequence))
    if how == "rebuilt":
        return type(sequence)(list(sequence))
    if how == "a subclass":
        kind: Any = SubTranscript if type(sequence) is Transcript else SubLog
        made: Any = object.__new__(kind)
        for name in type(sequence).__slots__:
            object.__setattr__(made, name, getattr(sequence, name))
        return made
    made = _again(sequence)
    tail, grown = sequence._tail, sequence._grown
    if how == "pair unset":
        made = object.__new__(type(sequence))
        for name in type(sequence).__slots__:
            if name != "_grown":
                object.__setattr__(made, name, getattr(sequence, name))
    elif how == "pair none":
        made._grown = None
    elif how == "pair of a copy of the tail before":
        made._grown = (tuple(list(before._tail)), tail)
    elif how == "pair of a copy of the tail":
        made._grown = (before._tail, tuple(list(tail)))
    elif how == "pair of the tail twice":
        made._grown = (tail, tail)
    elif how == "pair a list":
        made._grown = [before._tail, tail]
    elif how == "pair of three":
        made._grown = (before._tail, tail, tail)
    elif how == "pair of one":
        made._grown = (before._tail,)
    elif how == "pair empty":
        made._grown = ()
    elif how == "pair a number":
        made._grown = 5
    elif how == "tail an equal copy":  # the pair kept, the tail another tuple of its items
        made._tail = tuple(list(tail))
    elif how == "tail changed" and len(tail) > 1:  # the pair kept, an item before replaced
        made._tail = (*tail[:-2], _other(tail[-2]), tail[-1])
    elif how == "tail one more":  # as an append of two would make it (a true pair)
        made._tail = (*tail, tail[-1])
        appended = grown is not None and len(tail) == len(before._tail) + 1
        made._grown = (before._tail, made._tail) if appended else None
    elif how == "tail a list":
        made._tail = list(tail)
    elif how == "last of a subclass":  # made so by an append (a true pair) or not
        made._tail = (*tail[:-1], _of_a_subclass(tail[-1]))
        appended = grown is not None and len(tail) == len(before._tail) + 1
        made._grown = (before._tail, made._tail) if appended else None
    return made


def _changed_before(sequence: Any, how: str) -> Any:
    """The sequence before, its tail replaced after the next was made from it."""
    made = _again(sequence)
    tail = sequence._tail
    if how == "before an equal copy":
        made._tail = tuple(list(tail))
    elif how == "before changed" and tail:
        made._tail = (
            (*tail[:-1], _other(tail[-1])) if len(tail) == 1 else (_other(tail[0]), *tail[1:])
        )
    return made


REMADE = ["as made", "copy", "deep copy", "pickled", "rebuilt", "a subclass", "pair unset"]
REMADE += ["pair none", "pair of a copy of the tail before", "pair of a copy of the tail"]
REMADE += ["pair of the tail twice", "pair a list", "pair of three", "pair of one", "pair empty"]
REMADE += ["pair a number", "tail an equal copy", "tail changed", "tail one more", "tail a list"]
REMADE += ["last of a subclass"]
BEFORE = ["before as made", "before an equal copy", "before changed"]


def _with_log(state: Any, log: Any) -> Any:
    return _copy(state, loop=LoopState.model_construct(**{**state.loop._fields(), "actions": log}))


def _agree_remade(step: Any, how: str, was: str, log: bool) -> None:
    old, document, phase, seen = step
    if log:
        before = old.loop.actions
        phase = _with_log(phase, _remade(phase.loop.actions, how, before))
        if was != "before as made":
            old = _with_log(old, _changed_before(before, was))
    else:
        before = old.transcript
        phase = _copy(phase, transcript=_remade(phase.transcript, how, before))
        if was != "before as made":
            old = _copy(old, transcript=_changed_before(before, was))
    fields = document["fields"]
    if was != "before as made":  # the document before of the phase before as changed
        fields = dump_phase(old)["fields"]
    _agree(old, fields, phase, seen)


@settings(max_examples=300, deadline=None)
@given(
    at=st.integers(0, len(GROWN) - 1),
    how=st.sampled_from(REMADE),
    was=st.sampled_from(BEFORE),
    log=st.booleans(),
)
def test_a_tail_grown_by_one_is_as_the_plain_path_however_made(
    at: int, how: str, was: str, log: bool
) -> None:
    _agree_remade(GROWN[at], how, was, log)


@settings(max_examples=300, deadline=None)
@given(
    at=st.integers(0, len(SETTLED) - 1),
    how=st.sampled_from(REMADE),
    was=st.sampled_from(BEFORE),
)
def test_a_log_s_last_record_settled_is_as_the_plain_path_however_made(
    at: int, how: str, was: str
) -> None:
    _agree_remade(SETTLED[at], how, was, True)


def test_every_kind_of_change_is_met() -> None:
    """Each change is tried on steps the pair tells apart: the tail's items first."""
    for step in GROWN[:6] + SETTLED[:6]:
        for how in REMADE:
            for was in BEFORE:
                for log in (False, True):
                    _agree_remade(step, how, was, log)


# --- the spend ---------------------------------------------------------------------------------

SPENT = next(field for field in _dumped_fields(Planning) if field.name == "spent")
INTS = st.integers(0, 3) | st.integers(10**20, 10**20 + 2)
SPENDS = st.builds(_spend, INTS | COUNTS, COSTS, INTS | COUNTS, INTS | COUNTS)
AMOUNTS = st.sampled_from(["0", "0.00", "1.5", "1.50", "8E+2", "800", "-0", "1E-7", "2"])
ENCODED = ["as written", "reordered", "a count as text", "a list", "cost tagged"]
ENCODED += ["cost tagged of a subclass text", "cost tagged and more", "cost of a subclass"]
ENCODED += ["cost a number", "cost another spelling", "cost tagged as a list", "cost none"]


class Money(Decimal):
    """A ``Decimal`` of a class of its own."""


def _encoded(spend: Any, how: str) -> Any:
    encoded = _encoded_before(spend, how)
    cost = spend.cost
    text = str(cost)
    if how == "cost tagged of a subclass text":
        return {**encoded, "cost": {"$decimal": Text(text)}}
    if how == "cost tagged and more":
        return {**encoded, "cost": {"$decimal": text, "more": 1}}
    if how == "cost of a subclass":
        return {**encoded, "cost": Money(text) if isinstance(cost, Decimal) else cost}
    if how == "cost a number":
        return {**encoded, "cost": 1}
    if how == "cost another spelling" and isinstance(cost, Decimal):
        return {**encoded, "cost": cost + Decimal("0.00")}  # the same amount, spelled 0.00
    if how == "cost tagged as a list":
        return {**encoded, "cost": ["$decimal", text]}
    if how == "cost none":
        return {**encoded, "cost": None}
    return encoded


@settings(max_examples=600, deadline=None)
@given(
    previous=SPENDS,
    value=SPENDS,
    how=st.sampled_from(ENCODED),
    share=st.lists(st.booleans(), min_size=4, max_size=4),
    again=st.booleans(),
    last=st.sampled_from(["none", "the cost before", "the cost now", "another", "encoded"]),
    amount=AMOUNTS,
)
def test_a_spend_s_change_is_as_the_plain_path(
    previous: Any,
    value: Any,
    how: str,
    share: list[bool],
    again: bool,
    last: str,
    amount: str,
) -> None:
    names = ("tokens", "cost", "tool_calls", "model_calls")
    value = _spend(
        *(getattr(previous if s else value, n) for s, n in zip(share, names, strict=True))
    )
    if again and type(previous.cost) is Decimal and value.cost is not previous.cost:
        # A new Decimal of the cost before's spelling (as each step's sum makes it).
        value = _spend(
            value.tokens, Decimal(str(previous.cost)), value.tool_calls, value.model_calls
        )
    _spends_agree(previous, value, how, last, amount)


SPEND_COUNTS = [0, 1, True, 10**20 + 1]
SPEND_COSTS = ["0", "1.5", "800", "8E+2"]


def test_every_kind_of_spend_change_is_met() -> None:
    """Every encoding before, last spelling and count changed, over a grid: the counts
    each kept, of another value or another class, the cost the one before, of its
    spelling or of another."""
    for tokens, cost, calls, encoded_as, last in itertools.product(
        [*SPEND_COUNTS, "kept"],
        ["kept", "again", *SPEND_COSTS],
        [*SPEND_COUNTS, "kept"],
        ENCODED,
        ["none", "the cost before", "the cost now", "encoded"],
    ):
        for before in (_spend(1, Decimal("0"), 1, 1), _spend(0, Decimal("1.5"), 0, 2)):
            value = _spend(
                before.tokens if tokens == "kept" else tokens,
                before.cost
                if cost == "kept"
                else Decimal(str(before.cost) if cost == "again" else cost),
                before.tool_calls if calls == "kept" else calls,
                3,
            )
            _spends_agree(before, value, encoded_as, last, "2")


def _spends_agree(previous: Any, value: Any, how: str, last: str, amount: str) -> None:
    encoded = _encoded(previous, how)
    held = {
        "none": None,
        "the cost before": previous.cost,
        "the cost now": value.cost,
        "another": Decimal(amount),
        "encoded": encoded["cost"] if type(encoded) is dict else None,
    }[last]
    kept = _delta._last_money
    try:
        state: Any = (None, "", False)
        if type(held) is Decimal:  # as _money leaves it after spelling held
            state = (held, str(held), _delta._keeps_spelled(str(held)))
        outcomes = []
        for change in (_spent, _spent_plain, _compared):
            _delta._last_money = state
            ops: list[Any] = []
            merged: dict[str, Any] = {}
            made = change(Planning, SPENT, value, previous, encoded, ops, merged, [None])
            outcomes.append((exact(made), made is encoded, exact(ops), exact(merged)))
    finally:
        _delta._last_money = kept
    assert outcomes[0] == outcomes[1] == outcomes[2]


def test_a_run_s_spends_take_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [s for s in STEPS if type(s[0]) in LIBRARY and type(s[2]) in LIBRARY]
    for old, _, phase, _ in steps:
        _pair_of(old, phase)
    counts = _counted(monkeypatch, ("_spent",))
    plain = {"n": 0}
    held = _delta._spent_plain

    def counting(*args: Any) -> Any:
        plain["n"] += 1
        return held(*args)

    monkeypatch.setattr(_delta, "_spent_plain", counting)
    for old, document, phase, seen in steps:
        _agree(old, document["fields"], phase, seen)
    assert counts["_spent"] >= 40
    assert plain["n"] == 0


# --- a message's encoding ----------------------------------------------------------------------


def _message_before(value: Message) -> dict[str, Any]:
    """``_encode``'s branch for a message as it was (the plain version)."""
    requests: list[Any] = []
    for call in value.tool_calls:
        if type(call) is not ToolRequest or not _holds_text(call):
            requests = [_encode(call) for call in value.tool_calls]
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


class SubRequest(ToolRequest):
    """A tool request of a class of its own."""


class Sly(dict[str, Any]):
    """A dict whose copy is not dict's."""

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        return {"sly": "copy"}


class Other(BaseModel):
    name: str


def _request(how: str, name: str, arguments: str) -> Any:
    made = ToolRequest(name=name, arguments=arguments, id="i")
    if how == "constructed of a number":
        return ToolRequest.model_construct(name=name, arguments=7, id="i")
    if how == "constructed of a subclass text":
        return ToolRequest.model_construct(name=Text(name), arguments=arguments, id="i")
    if how == "reordered":
        object.__setattr__(made, "__dict__", dict(reversed(list(made.__dict__.items()))))
    elif how == "another key":
        object.__setattr__(made, "__dict__", {"name": name, "arguments": arguments, "ids": "i"})
    elif how == "a dict of its own":
        object.__setattr__(made, "__dict__", Sly(made.__dict__))
    elif how == "a subclass":
        return SubRequest(name=name, arguments=arguments, id="i")
    elif how == "another model":
        return Other(name=name)
    elif how == "a tuple":
        return (name, arguments)
    return made


REQUESTS = ["validated", "constructed of a number", "constructed of a subclass text"]
REQUESTS += ["reordered", "another key", "a dict of its own", "a subclass", "another model"]
REQUESTS += ["a tuple"]


@settings(max_examples=300, deadline=None)
@given(
    calls=st.lists(
        st.tuples(st.sampled_from(REQUESTS), st.text(max_size=4), st.text(max_size=6)),
        max_size=3,
    ),
    content=st.text(max_size=5),
)
def test_a_message_is_encoded_as_before(calls: list[tuple[str, str, str]], content: str) -> None:
    message = Message(role="assistant", content=content)
    requests = tuple(_request(how, name, arguments) for how, name, arguments in calls)
    message = _copy(message, tool_calls=requests)
    outcomes = []
    for encode in (_message, _message_before, _encode):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outcomes.append(exact(encode(message)))
            except (TypeError, ValueError) as error:
                outcomes.append(type(error).__name__)
    assert outcomes[0] == outcomes[1] == outcomes[2]


# --- an observation's output ------------------------------------------------------------------

OBSERVED = [s for s in STEPS if type(s[0]) is ToolCalling and type(s[2]) is Observing]


class Plain(dict[str, Any]):
    """A dict of a class of its own."""


class Hidden(dict[str, Any]):
    """A dict whose entries and copy are not dict's."""

    def items(self) -> Any:  # type: ignore[override]
        return iter([("hidden", "yes")])

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        return {"hidden": "copy"}


class Out(BaseModel):
    key: str = "k"


OUTPUTS: dict[str, Any] = {
    "flat": {"key": "k1", "value": 42, "unit": "widgets", "ok": True, "none": None},
    "empty": {},
    "a float": {"key": "k", "value": 1.5},
    "a tagged key": {"$decimal": "1"},
    "a tagged key and more": {"$decimal": "1", "more": 2},
    "a key not text": {1: "a"},
    "a key of a subclass": {Text("key"): "a"},
    "a value of a subclass": {"key": Text("a")},
    "nested": {"key": {"inner": [1, 2]}},
    "a decimal": {"cost": Decimal("1.50")},
    "a dict of its own": Plain(key="a"),
    "a dict hiding its entries": Hidden(key="a"),
    "a model": Out(),
    "a list": [1, "a"],
    "a text": "done",
    "a number": 3,
    "none": None,
    "a set": {1, 2},
}


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(OBSERVED) - 1), how=st.sampled_from(sorted(OUTPUTS)))
def test_an_output_is_dumped_as_dump_field_dumps_it(at: int, how: str) -> None:
    old, document, phase, seen = OBSERVED[at]
    _agree(old, document["fields"], _copy(phase, output=OUTPUTS[how]), seen)


def test_every_output_is_met() -> None:
    old, document, phase, seen = OBSERVED[0]
    for output in OUTPUTS.values():
        _agree(old, document["fields"], _copy(phase, output=output), seen)


def test_a_run_s_outputs_are_dumped_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    for old, _, phase, _ in OBSERVED:
        _pair_of(old, phase)
    counts = _counted(monkeypatch, ("_dump_field", "_flat"))
    for old, document, phase, seen in OBSERVED:
        _agree(old, document["fields"], phase, seen)
    assert counts["_flat"] == len(OBSERVED)
    assert counts["_dump_field"] == 0
