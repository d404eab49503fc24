"""The runner's shortcuts of issue 23's ninth round, each against the plain path.

- ``Runner._steps`` does ``_step``'s work in its own frame for a run with OpenTelemetry's
  no-op tracer and quiet instruments (no coroutine of ``_step``'s per transition). A run
  whose tracer is not the no-op one by its exact class goes through ``_step`` (and its
  ``_traced``) as before: the two give the same path, phases, clock readings, events and
  failures, and refuse a hostile ``on_transition`` or phase subclass with the same error.
- In that frame the library's own ``Planning``, ``ToolCalling`` and ``Observing`` (by
  class identity) are advanced without ``advance``'s coroutine (nor ``execute``'s): the
  very calls their ``advance`` makes. A subclass's own ``advance`` is awaited, and one
  that lies about its transition is refused as before.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from pydantic import BaseModel

from statemachine import (
    Agent,
    AwaitApproval,
    Budget,
    Failed,
    IllegalTransitionError,
    ModelReply,
    ModelRetrying,
    Observing,
    Phases,
    Planning,
    Responding,
    Retrying,
    Runner,
    Runtime,
    ToolCalling,
    read_tool,
)
from statemachine._runner import Runner as _Runner
from statemachine.testing import AutoDenyGate, ScriptedModel, capture, reply, tool_call

pytestmark = pytest.mark.anyio


class KeyArgs(BaseModel):
    key: str


@read_tool
async def look(args: KeyArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": len(args.key)}


class _Tracer(trace.NoOpTracer):
    """OpenTelemetry's no-op tracer but not by its exact class: ``_step`` is asked."""


class _Clock:
    """A clock that ticks at each reading and counts them."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return self.readings * 0.25


def _turns(keys: list[str | None]) -> list[ModelReply]:
    """A call of ``look`` for each key (``None``: a call of a tool that is not there),
    then the answer."""
    made = [
        tool_call("look", f'{{"key": "{key}"}}') if key is not None else tool_call("nope", "{}")
        for key in keys
    ]
    return [*made, reply("done", tokens=3, cost="0.01")]


async def _run(
    keys: list[str | None], *, traced: bool, **runner: Any
) -> tuple[Any, _Clock, list[tuple[str, str]], list[dict[str, Any]]]:
    agent = Agent[None](name="a", tools=[look], budget=Budget(cost=Decimal(5)))
    clock = _Clock()
    seen: list[tuple[str, str]] = []

    def note(before: Any, after: Any) -> None:
        seen.append((before.kind, after.kind))

    with capture() as events:
        result = await Runner(
            agent,
            model=ScriptedModel(_turns(keys)),
            gate=AutoDenyGate(),
            clock=clock,
            on_transition=note,
            keep_states=True,
            tracer=_Tracer() if traced else None,
            **runner,
        ).run(None, "go")
    return result, clock, seen, [dict(event) for event in events.events]


def _plain(event: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in event.items() if key != "run_id"}


async def _both(keys: list[str | None]) -> None:
    fast, fast_clock, fast_seen, fast_events = await _run(keys, traced=False)
    plain, plain_clock, plain_seen, plain_events = await _run(keys, traced=True)
    assert fast.path == plain.path
    assert [type(state) for state in fast.states] == [type(state) for state in plain.states]
    assert fast.final.transcript == plain.final.transcript
    assert fast.final.spent == plain.final.spent
    assert fast_clock.readings == plain_clock.readings
    assert fast_seen == plain_seen
    assert [_plain(event) for event in fast_events] == [_plain(event) for event in plain_events]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text("abc", max_size=3)), max_size=5))
async def test_the_inline_step_is_steps_own(keys: list[str | None]) -> None:
    await _both(keys)


async def test_the_inline_step_is_taken_only_for_the_no_op_tracer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stepped: list[str] = []
    step: Any = getattr(_Runner, "_step")  # noqa: B009  (private to the runner)

    async def counted(self: Any, rt: Any, before: Any, *rest: Any) -> Any:
        stepped.append(before.kind)
        return await step(self, rt, before, *rest)

    monkeypatch.setattr(_Runner, "_step", counted)
    fast, *_ = await _run(["a", "b"], traced=False)
    assert stepped == []
    plain, *_ = await _run(["a", "b"], traced=True)
    assert stepped == [kind for kind, _ in plain.path[:-1]]
    assert fast.path == plain.path


async def test_a_phase_that_raises_is_counted_failed_either_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failed: list[str] = []
    from statemachine._observe import Instruments

    def note(self: Any, before: Any, took: float) -> None:
        failed.append(before.kind)

    monkeypatch.setattr(Instruments, "failed", note)

    class Broken(Exception):
        pass

    class Raising:
        async def complete(self, request: Any) -> ModelReply:
            raise Broken

    for traced in (False, True):
        agent = Agent[None](name="a", tools=[look])
        runner = Runner(
            agent,
            model=Raising(),
            gate=AutoDenyGate(),
            tracer=_Tracer() if traced else None,
        )
        with pytest.raises(Broken):
            await runner.run(None, "go")
    assert failed == ["Planning", "Planning"]


async def _hostile_run(traced: bool, hostile: Any) -> str:
    agent = Agent[None](name="a", tools=[look], budget=Budget(cost=Decimal(5)))
    with pytest.raises(IllegalTransitionError) as caught:
        await Runner(
            agent,
            model=ScriptedModel(_turns(["a", "b", "c"])),
            gate=AutoDenyGate(),
            on_transition=hostile,
            tracer=_Tracer() if traced else None,
        ).run(None, "go")
    return str(caught.value)


async def test_an_on_transition_that_lowers_the_step_is_refused_either_way() -> None:
    def hostile(before: Any, after: Any) -> None:
        if after.kind == "Observing":
            object.__setattr__(after, "step", after.step - 1)

    fast, plain = await _hostile_run(False, hostile), await _hostile_run(True, hostile)
    assert fast == plain
    assert "step" in fast


async def test_an_on_transition_that_swaps_the_budget_is_refused_either_way() -> None:
    def hostile(before: Any, after: Any) -> None:
        if after.kind == "ToolCalling":
            object.__setattr__(after.agent, "budget", Budget(cost=Decimal(500)))

    fast, plain = await _hostile_run(False, hostile), await _hostile_run(True, hostile)
    assert fast == plain
    assert "changed" in fast


_Planned = (
    ToolCalling[None]
    | AwaitApproval[None]
    | Responding[None]
    | Planning[None]
    | ModelRetrying[None]
    | Failed[None]
)


# Subclasses of the three classes the runner advances in place: each overrides advance,
# which must be awaited (the class is not the library's by identity).
_ADVANCED: list[str] = []


@attrs.frozen(kw_only=True)
class _MyPlanning(Planning[None]):
    async def advance(
        self, rt: Runtime
    ) -> (
        ToolCalling[None]
        | AwaitApproval[None]
        | Responding[None]
        | Planning[None]
        | ModelRetrying[None]
        | Failed[None]
    ):
        _ADVANCED.append(self.kind)
        return await super().advance(rt)


@attrs.frozen(kw_only=True)
class _MyCalling(ToolCalling[None]):
    async def advance(self, rt: Runtime) -> Observing[None] | Retrying[None] | Failed[None]:
        _ADVANCED.append(self.kind)
        return await super().advance(rt)


@attrs.frozen(kw_only=True)
class _MyObserving(Observing[None]):
    async def advance(self, rt: Runtime) -> Planning[None]:
        _ADVANCED.append(self.kind)
        return await super().advance(rt)


@attrs.frozen(kw_only=True)
class _LyingObserving(Observing[None]):
    """Advances to a Planning one step further on than one transition makes."""

    async def advance(self, rt: Runtime) -> Planning[None]:
        planning = await super().advance(rt)
        object.__setattr__(planning, "step", planning.step + 1)
        return planning


@pytest.mark.parametrize("traced", [False, True])
async def test_a_subclass_s_own_advance_is_awaited(traced: bool) -> None:
    phases = Phases[None](planning=_MyPlanning, tool_calling=_MyCalling, observing=_MyObserving)
    agent = Agent[None](name="a", tools=[look], phases=phases)
    _ADVANCED.clear()
    result = await Runner(
        agent,
        model=ScriptedModel(_turns(["a", "b"])),
        gate=AutoDenyGate(),
        tracer=_Tracer() if traced else None,
    ).run(None, "go")
    mine = {"Planning", "ToolCalling", "Observing"}
    assert [kind for kind, _ in result.path if kind in mine] == _ADVANCED
    assert _ADVANCED.count("Observing") == 2


async def test_a_subclass_that_lies_is_refused_either_way() -> None:
    messages: list[str] = []
    for traced in (False, True):
        agent = Agent[None](name="a", tools=[look], phases=Phases[None](observing=_LyingObserving))
        with pytest.raises(IllegalTransitionError) as caught:
            await Runner(
                agent,
                model=ScriptedModel(_turns(["a"])),
                gate=AutoDenyGate(),
                tracer=_Tracer() if traced else None,
            ).run(None, "go")
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "step" in messages[0]


async def test_a_library_class_patched_in_the_process_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Instrumentation that wraps the library's advance (or execute) is called: the
    runner calls in place only the functions the classes were defined with."""
    asked: list[str] = []
    for cls, name in ((Observing, "advance"), (ToolCalling, "execute"), (Planning, "advance")):
        own: Any = getattr(cls, name)

        def wrapped(self: Any, rt: Runtime, _own: Any = own, _name: str = name) -> Any:
            asked.append(f"{self.kind}.{_name}")
            return _own(self, rt)

        with monkeypatch.context() as patched:
            patched.setattr(cls, name, wrapped)
            result, *_ = await _run(["a"], traced=False)
        assert f"{cls.kind}.{name}" in asked
        assert result.path == (await _run(["a"], traced=True))[0].path
