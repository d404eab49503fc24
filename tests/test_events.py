"""statemachine._events: a run as an async iterator of its transitions, text deltas and end."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from support import CityArgs

from statemachine import (
    Agent,
    Done,
    ModelChunk,
    ModelReply,
    ModelRequest,
    ModelResponseError,
    ProgressLine,
    RunFinished,
    Runner,
    RunStatus,
    StreamingModel,
    TextDelta,
    TransitionEvent,
    read_tool,
)
from statemachine.testing import (
    AutoDenyGate,
    FunctionModel,
    MemoryCheckpointer,
    ScriptedModel,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio


@read_tool
async def weather(args: CityArgs) -> dict[str, str]:
    """Today's weather."""
    return {"city": args.city, "sky": "sunny"}


def agent() -> Agent[None]:
    return Agent[None](name="travel", tools=[weather], instructions="Be brief.")


async def collected(runner: Runner[None], text: str, **options: Any) -> list[Any]:
    async with runner.events(None, text, **options) as events:
        return [event async for event in events]


async def test_a_runs_events_are_its_transitions_in_order_then_its_result() -> None:
    """Each transition is an event, in the order of the result's history, and the last is
    the result; a streaming model's deltas, joined, are its answer."""
    model = ScriptedModel(
        [tool_call("weather", {"city": "Oslo"}), reply("Sunny in Oslo today.")], stream_chunks=3
    )
    runner = Runner(agent(), model=model, gate=AutoDenyGate(), keep_states=True)
    events = await collected(runner, "Weather in Oslo?", run_id="run-1")
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    result = finished.result
    assert result.run_id == "run-1"
    assert isinstance(result.final, Done)
    transitions = [event for event in events if isinstance(event, TransitionEvent)]
    kinds = [transitions[0].before, *(event.after for event in transitions)]
    assert tuple(kinds) == result.history
    assert " -> ".join(kinds) == result.trace()
    assert [event.step for event in transitions] == list(range(1, len(result.history)))
    assert [event.state for event in transitions] == list(result.states[1:])
    deltas = [event for event in events if isinstance(event, TextDelta)]
    assert [delta.text for delta in deltas] == ["Sunny i", "n Oslo ", "today."]
    assert "".join(delta.text for delta in deltas) == result.final.answer
    # The deltas come while the second Planning step runs: after it was entered, before
    # the transition out of it.
    first = events.index(deltas[0])
    assert events[first - 1] == transitions[3]
    assert (transitions[3].after, transitions[4].before) == ("Planning", "Planning")
    assert events[first + 3] == transitions[4]


async def test_a_model_that_cannot_stream_gives_transitions_and_no_deltas() -> None:
    """A model with only ``complete`` is called as in ``run``: no TextDelta events."""

    class Plain:
        async def complete(self, request: ModelRequest) -> ModelReply:
            return reply("Sunny.")

    assert not isinstance(Plain(), StreamingModel)
    runner = Runner(agent(), model=Plain(), gate=AutoDenyGate(), keep_states=True)
    events = await collected(runner, "Weather?")
    assert not [event for event in events if isinstance(event, TextDelta)]
    assert [type(event).__name__ for event in events] == [
        "TransitionEvent",
        "TransitionEvent",
        "TransitionEvent",
        "RunFinished",
    ]


async def test_run_never_asks_a_model_to_stream() -> None:
    """Without a listener, a run calls ``complete``, even on a model that streams."""
    asked: list[str] = []

    class Both:
        async def complete(self, request: ModelRequest) -> ModelReply:
            asked.append("complete")
            return reply("Sunny.")

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
            asked.append("stream")
            yield ModelChunk(reply=reply("Sunny."))

    assert isinstance(Both(), StreamingModel)
    result = await Runner(agent(), model=Both(), gate=AutoDenyGate(), keep_states=True).run(
        None, "Weather?"
    )
    assert result.ok
    assert asked == ["complete"]


async def test_breaking_out_cancels_the_model_call_and_saves_the_run_cancelled() -> None:
    """Leaving the iteration while the model is asked cancels its call; the run is saved
    ``cancelled`` at its last checkpoint and resumes later."""
    never = anyio.Event()
    seen: list[str] = []

    async def waits(request: ModelRequest) -> ModelReply:
        seen.append("called")
        try:
            await never.wait()
        except anyio.get_cancelled_exc_class():
            seen.append("cancelled")
            raise
        raise AssertionError("the event is never set")

    store = MemoryCheckpointer()
    runner = Runner(
        agent(),
        model=FunctionModel(waits),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    kinds: list[str] = []
    async with runner.events(None, "Weather?", run_id="run-2") as events:
        async for event in events:
            assert isinstance(event, TransitionEvent)
            kinds.append(event.after)
            if event.after == "Planning":
                await anyio.sleep(0.01)  # the model is asked now
                break
    assert kinds == ["Planning"]
    assert seen == ["called", "cancelled"]
    record = await store.record("run-2")
    assert record.status == RunStatus.CANCELLED
    assert record.phase == "Planning"
    again = Runner(
        agent(),
        model=ScriptedModel([reply("Sunny.")]),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    assert (await again.resume("run-2")).ok


async def test_a_cancelled_reader_cancels_the_run() -> None:
    """A reader cancelled from outside (a deadline) takes the run's task with it."""
    never = anyio.Event()
    cancelled: list[bool] = []

    async def waits(request: ModelRequest) -> ModelReply:
        try:
            await never.wait()
        finally:
            cancelled.append(True)
        raise AssertionError("the event is never set")

    store = MemoryCheckpointer()
    runner = Runner(
        agent(),
        model=FunctionModel(waits),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    with anyio.move_on_after(0.05):
        async with runner.events(None, "Weather?", run_id="run-3") as events:
            async for _ in events:
                pass
    assert cancelled == [True]
    assert (await store.record("run-3")).status == RunStatus.CANCELLED


async def test_an_error_the_run_raises_is_raised_by_the_iteration() -> None:
    """What ``run`` would raise comes out of ``async for`` as it is, not in a group."""

    class Broken:
        async def complete(self, request: ModelRequest) -> ModelReply:
            raise KeyError("a bug in the model adapter")

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
            raise KeyError("a bug in the model adapter")
            yield ModelChunk()  # pragma: no cover - makes this a generator

    runner = Runner(agent(), model=Broken(), gate=AutoDenyGate(), keep_states=True)
    kinds: list[str] = []

    async def read() -> None:
        async with runner.events(None, "Weather?") as events:
            async for event in events:
                kinds.append(type(event).__name__)

    with pytest.raises(KeyError, match="a bug in the model adapter"):
        await read()
    assert kinds == ["TransitionEvent"]


async def test_a_stream_without_a_reply_is_a_model_response_error() -> None:
    """A stream that ends with deltas only gives the run nothing to use: the step fails
    with the model's fault named, and the deltas were shown and nothing more."""

    class Chatty:
        async def complete(self, request: ModelRequest) -> ModelReply:
            return reply("unused")

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
            yield ModelChunk(text="Sunny")

    runner = Runner(agent(), model=Chatty(), gate=AutoDenyGate(), keep_states=True)
    events = await collected(runner, "Weather?")
    result = events[-1].result
    assert result.status == "failed"
    assert "stream() ended without a chunk that carries the reply" in result.final.reason
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Sunny"]
    assert issubclass(ModelResponseError, ValueError)


async def test_resume_events_streams_a_resumed_run() -> None:
    """A saved run resumed as events goes on from its checkpoint and ends in a result."""
    store = MemoryCheckpointer()
    never = anyio.Event()

    async def waits(request: ModelRequest) -> ModelReply:
        await never.wait()
        raise AssertionError("the event is never set")

    first = Runner(
        agent(),
        model=FunctionModel(waits),
        gate=AutoDenyGate(),
        checkpointer=store,
        keep_states=True,
    )
    async with first.events(None, "Weather?", run_id="run-4") as events:
        async for _ in events:
            await anyio.sleep(0.01)
            break
    model = ScriptedModel([reply("Sunny.")], stream_chunks=2)
    again = Runner(agent(), model=model, gate=AutoDenyGate(), checkpointer=store, keep_states=True)
    async with again.resume_events("run-4") as events:
        seen = [event async for event in events]
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["Sun", "ny."]
    assert seen[-1].result.ok
    assert (await store.record("run-4")).status == RunStatus.COMPLETED


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_a_progress_line_shows_the_events_and_the_text_being_written() -> None:
    """ProgressLine.show: each transition as the on_transition callback shows it, the
    model's text so far on the same line while it comes, and a blank line at the end."""
    model = ScriptedModel(
        [tool_call("weather", {"city": "Oslo"}), reply("Sunny\nin Oslo.")], stream_chunks=2
    )
    runner = Runner(agent(), model=model, gate=AutoDenyGate(), keep_states=True)
    screen = Terminal()
    line = ProgressLine(screen, label="oslo: ")
    async with runner.events(None, "Weather?") as events:
        async for event in events:
            line.show(event)
    written = screen.getvalue()
    assert "\n" not in written
    shown = [part.rstrip() for part in written.split("\r") if part.strip()]
    assert shown == [
        "oslo: step 1: Planning",
        "oslo: step 2: ToolCalling weather",
        "oslo: step 3: Observing weather",
        "oslo: step 4: Planning",
        "oslo: step 4: Sunny i",
        "oslo: step 4: Sunny in Oslo.",
        "oslo: step 5: Responding",
    ]
    assert written.endswith("\r" + " " * len("oslo: step 5: Responding") + "\r")


async def test_a_run_started_inside_a_tool_does_not_stream_into_the_outer_listener() -> None:
    """Only the run ``events`` started streams: an agent a tool runs (in the same task)
    gets no listener, so its transitions and text stay out of the outer stream."""
    inner = Runner(
        Agent[None](name="inner"),
        model=ScriptedModel([reply("inner answer")], stream_chunks=2),
        gate=AutoDenyGate(),
        keep_states=True,
    )

    @read_tool
    async def ask_inner(args: CityArgs) -> dict[str, str]:
        """Ask another agent."""
        result = await inner.run(None, args.city)
        return {"said": str(result.final.answer) if isinstance(result.final, Done) else ""}

    outer = Agent[None](name="outer", tools=[ask_inner])
    model = ScriptedModel([tool_call("ask_inner", {"city": "Oslo"}), reply("Done.")])
    events = await collected(
        Runner(outer, model=model, gate=AutoDenyGate(), keep_states=True), "Go"
    )
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Done."]
    transitions = [e for e in events if isinstance(e, TransitionEvent)]
    assert {e.state.agent.name for e in transitions} == {"outer"}
    assert len(transitions) == len(events[-1].result.history) - 1
