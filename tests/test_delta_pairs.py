"""The delta producer's shortcuts for a call kept, a spend and a message give what the
plain paths give (issue 23).

``persist._delta`` keeps the encoding of a call that the next phase holds again (the
Observing after a ToolCalling) when every object it was made from is still there, the
very same (``_call_seen``, ``_call_kept``), reads a spend's counts one by one
(``_spend_change`` against ``_by_fields``), and ``persist._codec._encode`` writes a
message's calls from their fields (against ``Message.model_dump``). Each is compared
here with the plain version: JSON for JSON and type for type, and the same ops; the
runs below dump each phase as the saver does, as it comes, while a tool changes its
arguments in place.
"""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, Phase, Runner, dump_phase, read_tool
from statemachine._budget import Spend
from statemachine._model import Message, ToolRequest
from statemachine.persist._codec import _encode
from statemachine.persist._delta import (
    _SPEND_FIELDS,
    _SPEND_VALUES,
    PhaseDumper,
    _apply,
    _by_fields,
    _call_kept,
    _call_seen,
    _spend_change,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


def exact(value: Any) -> str:
    """JSON that tells 1, 1.0, True and Decimal("1.0") apart."""
    return json.dumps(value, default=lambda item: ["Decimal", str(item), type(item).__name__])


class Text(str):
    """A text equal to a plain one: never taken for the same object."""


# --- a call kept from ToolCalling to Observing -------------------------------------------


class KeyArgs(BaseModel):
    key: str
    note: str = ""


class CountArgs(BaseModel):
    key: str
    count: int = 0


def _change(args: BaseModel, how: str) -> None:
    """Change a call's arguments in place, as a tool may."""
    held = args.__dict__
    if how == "set":
        args.key = held["key"] + "!"  # type: ignore[attr-defined]
    elif how == "same text":
        held["key"] = "".join(list(held["key"]))  # equal, another object
    elif how == "subclass":
        held["key"] = Text(held["key"])
    elif how == "number":
        held["key"] = 7
    elif how == "order":
        held["key"] = held.pop("key")
    elif how == "extra":
        held["extra"] = "x"
    elif how == "dropped":
        del held["key"]
    elif how == "dict":
        object.__setattr__(args, "__dict__", dict(held))  # the same values, another dict


HOWS = ["none", "set", "same text", "subclass", "number", "order", "extra", "dropped", "dict"]


CHANGES: list[str] = []
CALLS: list[int] = [0]


@read_tool
async def look_key(args: KeyArgs) -> dict[str, object]:
    """Look a key up, changing the arguments in place as CHANGES says."""
    _change(args, CHANGES.pop(0) if CHANGES else "none")
    CALLS[0] += 1
    return {"value": CALLS[0], "text": f"result {CALLS[0]} " * CALLS[0]}


@read_tool
async def look_count(args: CountArgs) -> dict[str, object]:
    """Look a key up, changing the arguments in place as CHANGES says."""
    _change(args, CHANGES.pop(0) if CHANGES else "none")
    CALLS[0] += 1
    return {"value": Decimal("1.50"), "text": f"result {CALLS[0]} " * CALLS[0]}


def _run(tool: Any, hows: list[str]) -> list[tuple[Phase[Any], Any, Any]]:
    """Run ``len(hows)`` calls of a tool that changes its arguments as ``hows`` says,
    dumping each phase as it comes (as the saver does); return each phase with its
    document and ops."""
    CHANGES[:] = hows
    agent = Agent[None](name="pairs", tools=[tool], budget=Budget(), max_steps=10**6)
    turns = [tool_call(tool.name, json.dumps({"key": f"k{n}"})) for n in range(len(hows))]
    dumper = PhaseDumper()
    dumped: list[tuple[Phase[Any], Any, Any]] = []

    def seen(before: Phase[Any], after: Phase[Any]) -> None:
        if not dumped:
            dumped.append((before, *dumper.dump(before)))
        dumped.append((after, *dumper.dump(after)))
        # The plain dump now, before the next transition changes anything more.
        assert exact(dumped[-1][1]) == exact(dump_phase(after)), after.kind

    model = ScriptedModel([*turns, reply("done")])
    runner = Runner(agent, model=model, gate=AutoDenyGate(), on_transition=seen)
    anyio.run(runner.run, None, "go")
    assert dumped[-1][0].kind in ("Done", "Failed")
    return dumped


def _touches_call(ops: list[list[Any]]) -> bool:
    """Whether ops set the call, whole or in part."""
    return any(
        op[1][:2] == ["fields", "call"]
        or (op[0] == "merge" and op[1] == ["fields"] and "call" in op[2])
        for op in ops
        if op[0] in ("set", "merge")
    )


def _check(dumped: list[tuple[Phase[Any], Any, Any]]) -> None:
    before: Any = None
    for phase, document, ops in dumped:
        if before is not None:
            assert ops is not None
            rebuilt = copy.deepcopy(before)
            _apply(rebuilt, copy.deepcopy(ops))
            assert exact(rebuilt) == exact(document), phase.kind
        before = copy.deepcopy(document)


@settings(max_examples=25, deadline=None)
@given(hows=st.lists(st.sampled_from(HOWS), min_size=1, max_size=5))
def test_a_call_s_arguments_changed_in_place_are_dumped_as_in_full(hows: list[str]) -> None:
    """Whatever a tool does to its arguments, the Observing after it holds the call as
    dump_phase writes it then, and the ops rebuild it (the shortcut keeps the encoding
    only when the very same texts are there)."""
    _check(_run(look_key, hows))


def test_a_call_changed_in_place_is_dumped_again_and_one_untouched_is_kept() -> None:
    """The shortcut is taken when the arguments are untouched (the Observing gives no op
    for the call) and refused when they changed: the new arguments are set."""
    dumped = _run(look_key, ["none", "set", "same text", "subclass"])
    observed = [(document, ops) for phase, document, ops in dumped if phase.kind == "Observing"]
    assert len(observed) == 4
    assert [_touches_call(ops) for _, ops in observed] == [False, True, False, False]
    assert observed[1][0]["fields"]["call"]["args"] == {"key": "k1!", "note": ""}
    # A tool output and a call of a model of numbers (no shortcut): the same as in full.
    _check(_run(look_count, ["none", "set", "same text", "order"]))


def test_the_call_seen_is_refused_for_what_it_cannot_vouch_for() -> None:
    """No snapshot for a call whose arguments are not all exact text; a snapshot kept
    only for the very call and encoding it was made for."""
    dumped = _run(look_key, ["none"])
    (calling,) = [phase for phase, _, _ in dumped if phase.kind == "ToolCalling"]
    call = calling.call  # type: ignore[attr-defined]
    encoded = {"type": "read"}
    seen = _call_seen(call, encoded)
    assert seen is not None
    assert _call_kept(call, seen, encoded)
    assert not _call_kept(call, seen, dict(encoded))
    assert not _call_kept(call, None, encoded)
    call.args.__dict__["key"] = Text(call.args.key)
    assert not _call_kept(call, seen, encoded)
    assert _call_seen(call, encoded) is None  # a str subclass: no snapshot
    assert _call_seen(object(), encoded) is None


# --- a spend ------------------------------------------------------------------------------

counts = st.integers(0, 3) | st.integers(10**20, 10**20 + 1)
moneys = st.sampled_from([Decimal(0), Decimal("0.0"), Decimal("1.50"), Decimal("800"), Decimal(1)])


@st.composite
def spends(draw: st.DrawFn, like: Spend | None = None) -> Spend:
    def pick(name: str, values: st.SearchStrategy[Any]) -> Any:
        if like is not None and draw(st.booleans()):
            return getattr(like, name)  # the very object
        return draw(values)

    return Spend(
        tokens=pick("tokens", counts),
        cost=pick("cost", moneys),
        tool_calls=pick("tool_calls", counts),
        model_calls=pick("model_calls", counts),
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_spend_s_change_is_by_fields_s(data: st.DataObject) -> None:
    previous = data.draw(spends())
    value = data.draw(spends(previous))
    encoded: Any = _encode(previous.model_dump())
    other = data.draw(st.booleans())
    if other:  # an encoding of another spend, or of another shape
        encoded = data.draw(
            st.sampled_from(
                [
                    _encode(data.draw(spends()).model_dump()),
                    {key: True for key in _SPEND_FIELDS},
                    {key: 1.0 for key in _SPEND_FIELDS},
                    dict(reversed(list(encoded.items()))),
                    [],
                ]
            )
        )
    made = _spend_change(value, previous, encoded)
    plain = _by_fields(value, previous, encoded, _SPEND_FIELDS, _SPEND_VALUES)
    assert exact(made) == exact(plain)
    if not other:
        assert made is not None
        assert exact(made[0]) == exact(_encode(value.model_dump()))


# --- a message ----------------------------------------------------------------------------


def _plain_message(value: Message) -> Any:
    """``_encode`` of a message before its calls were written from their fields."""
    for call in value.tool_calls:
        if type(call) is not ToolRequest or not all(
            type(item) is str for item in call.__dict__.values()
        ):
            return {
                "role": value.role,
                "content": value.content,
                "tool_calls": [_encode(call) for call in value.tool_calls],
                "tool_call_id": value.tool_call_id,
                "name": value.name,
            }
    return value.model_dump(mode="json")


class OwnRequest(ToolRequest):
    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return {"own": super().model_dump(**kwargs)}


texts = st.text(max_size=5)


@st.composite
def requests(draw: st.DrawFn) -> ToolRequest:
    how = draw(st.sampled_from(["valid", "constructed", "reordered", "subclass", "number"]))
    name, arguments, id_ = draw(texts), draw(texts), draw(texts)
    if how == "valid":
        return ToolRequest(name=name, arguments=arguments, id=id_)
    if how == "constructed":
        return ToolRequest.model_construct(name=name, arguments=Text(arguments))
    if how == "reordered":
        request = ToolRequest(name=name, arguments=arguments, id=id_)
        held = dict(request.__dict__)
        object.__setattr__(request, "__dict__", {"id": held["id"], **held})
        return request
    if how == "subclass":
        return OwnRequest(name=name, arguments=arguments, id=id_)
    request = ToolRequest(name=name, arguments=arguments, id=id_)
    request.__dict__["id"] = 3
    return request


@settings(max_examples=300, deadline=None)
@given(
    role=st.sampled_from(["assistant", "user", "tool"]),
    content=texts,
    calls=st.lists(requests(), max_size=3),
)
def test_a_message_is_encoded_as_its_model_dump(
    role: str, content: str, calls: list[ToolRequest]
) -> None:
    message = Message(role=role, content=content)  # type: ignore[arg-type]
    object.__setattr__(message, "tool_calls", tuple(calls))
    assert exact(_encode(message)) == exact(_plain_message(message))
