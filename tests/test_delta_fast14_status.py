"""``_saving._status`` (the run's status and what it waits for, at each save) takes a
phase of exactly ``Planning``, ``ToolCalling`` or ``Observing`` without its
``isinstance`` checks: the same answer as ``_status_plain`` for every phase of a run,
paused or not, for the other classes (``Done``, ``Failed``, ``AwaitApproval``) and for
subclasses that answer ``waiting_for`` their own way."""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import Agent, Budget, Runner, read_tool
from statemachine._phases import Observing, Planning, ToolCalling
from statemachine._saving import _status, _status_plain
from statemachine.persist._lifecycle import RunStatus
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": 42, "unit": "widgets"}


def _phases(calls: int) -> list[Any]:
    agent = Agent[None](name="status", tools=[lookup], budget=Budget(), max_steps=10**6)
    turns = [tool_call("lookup", json.dumps({"key": f"k{n}"})) for n in range(calls)]
    runner = Runner(
        agent, model=ScriptedModel([*turns, reply("done")]), gate=AutoDenyGate(), keep_states=True
    )
    return list(anyio.run(runner.run, None, "go").states)


PHASES = _phases(6)


class _Sub(Planning[Any]):
    __slots__ = ()

    @property
    def waiting_for(self) -> str:
        return "a reason of its own"


class _SubCalling(ToolCalling[Any]):
    __slots__ = ()

    @property
    def waiting_for(self) -> str:
        return "calling's own"


class _SubObserving(Observing[Any]):
    __slots__ = ()

    @property
    def waiting_for(self) -> str:
        return ""


class _Reason(str):
    def __bool__(self) -> bool:
        return False


def _raw(phase: Any, cls: type[Any]) -> Any:
    """A copy of ``phase`` of class ``cls`` (the same slots), made around the class's
    refusal to be copied: every slot set on it, set on the copy."""
    made = object.__new__(cls)
    for klass in type(phase).__mro__:
        for name in klass.__dict__.get("__slots__", ()):
            if name == "__weakref__":
                continue
            try:
                value = object.__getattribute__(phase, name)
            except AttributeError:
                continue
            object.__setattr__(made, name, value)
    return made


def _paused(phase: Any, reason: Any) -> Any:
    # Unchecked (model_copy checks its update since round 18, which would make a str
    # subclass a str).
    loop = type(phase.loop).model_construct(**{**phase.loop._fields(), "paused": reason})
    kind: type[Any] = type(phase)
    made = _raw(phase, kind)
    object.__setattr__(made, "loop", loop)
    return made


def _made(phase: Any, how: str) -> Any:
    if how == "as run":
        return phase
    kind: type[Any] = type(phase)
    if how == "copy":
        return _raw(phase, kind)
    subclasses: dict[type[Any], type[Any]] = {
        Planning: _Sub,
        ToolCalling: _SubCalling,
        Observing: _SubObserving,
    }
    subclass = subclasses.get(kind)
    if how == "subclass" and subclass is not None:
        return _raw(phase, subclass)
    if how.startswith("paused") and kind in (Planning, ToolCalling, Observing):
        reason = {"paused": "hold", "paused empty": "", "paused falsy": _Reason("x")}[how]
        return _paused(phase, reason)
    return phase


HOWS = ["as run", "copy", "subclass", "paused", "paused empty", "paused falsy"]


@settings(max_examples=200, deadline=None)
@given(at=st.integers(0, len(PHASES) - 1), how=st.sampled_from(HOWS))
def test_status_is_as_the_plain_way(at: int, how: str) -> None:
    phase = _made(PHASES[at], how)
    made, plain = _status(phase), _status_plain(phase)
    assert made == plain
    assert type(made[0]) is type(plain[0])
    assert type(made[1]) is type(plain[1])
    assert made[1] is plain[1] or made[1] == plain[1] == ""


def test_every_kind_is_met() -> None:
    kinds = {type(phase).__name__ for phase in PHASES}
    assert {"Planning", "ToolCalling", "Observing", "Done"} <= kinds
    paused = _paused(PHASES[1], "hold")
    assert _status(paused) == (RunStatus.INTERRUPTED, "hold")
    assert _status(_made(PHASES[1], "subclass")) == (RunStatus.INTERRUPTED, "a reason of its own")
    assert _status(PHASES[-1]) == (RunStatus.COMPLETED, "")
    assert _status(PHASES[1]) == (RunStatus.RUNNING, "")
    # A running phase other than Planning does not wait for its loop memory's pause.
    for phase in PHASES[2:4]:
        assert type(phase) in (ToolCalling, Observing)
        assert _status(_paused(phase, "hold")) == (RunStatus.RUNNING, "")
    falsy = _paused(PHASES[1], _Reason("x"))
    assert _status(falsy) == (RunStatus.RUNNING, "")
