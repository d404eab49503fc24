"""One span per transition under one span per run, and one log event with the same keys."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from pydantic import BaseModel
from structlog.testing import capture_logs

from agents.travel import FakeProvider, travel_agent
from agents.travel._scenarios import ASK, FLIGHT, TRIP
from statemachine import Agent, Runner, read_tool
from statemachine.testing import ScriptedGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class WhereArgs(BaseModel):
    """A city."""

    city: str


def tracing() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


async def test_a_travel_run_is_one_span_with_one_child_per_transition() -> None:
    """The exact span tree of an approved booking, with the transition's attributes."""
    tracer, exporter = tracing()
    model = ScriptedModel([tool_call("book_flight", FLIGHT), reply("Booked.")])
    runner = Runner(
        travel_agent(FakeProvider()),
        model=model,
        gate=ScriptedGate([True]),
        tracer=tracer,
        keep_states=True,
    )
    with capture_logs() as logs:
        result = await runner.run(TRIP, ASK, run_id="run-1")
    spans = exporter.get_finished_spans()
    (root,) = [span for span in spans if span.parent is None]
    assert root.name == "run travel"
    assert root.attributes["statemachine.run_id"] == "run-1"
    children = sorted(
        (span for span in spans if span.parent is not None), key=lambda span: span.start_time
    )
    assert all(span.parent.span_id == root.context.span_id for span in children)
    assert [span.name for span in children] == [
        "Idle -> Planning",
        "Planning -> AwaitApproval",
        "AwaitApproval -> ToolCalling",
        "ToolCalling -> Observing",
        "Observing -> Planning",
        "Planning -> Responding",
        "Responding -> Done",
    ]
    approve = children[2].attributes
    assert approve["statemachine.tool"] == "book_flight"
    assert approve["statemachine.effect"] == "write"
    assert approve["statemachine.step"] == 3
    assert approve["statemachine.agent"] == "travel"
    events = [entry for entry in logs if entry["event"] == "transition"]
    assert [(e["from"], e["to"]) for e in events] == [
        tuple(span.name.split(" -> ")) for span in children
    ]
    assert all(e["run_id"] == "run-1" for e in events)
    assert result.ok


async def test_a_phase_that_raises_ends_its_span_with_the_error() -> None:
    """The exception is recorded on the transition's span, and the run span still ends."""
    tracer, exporter = tracing()
    runner = Runner(
        travel_agent(FakeProvider()),
        model=ScriptedModel([]),
        gate=ScriptedGate([]),
        tracer=tracer,
        keep_states=True,
    )
    with pytest.raises(Exception, match="scripted model"):
        await runner.run(TRIP, ASK)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    failing = spans["Planning -> ?"]
    assert not failing.status.is_ok
    assert failing.events[0].name == "exception"
    assert "run travel" in spans


async def test_a_transition_span_that_is_not_recorded_is_still_current_in_its_phase() -> None:
    """With spans sampled out, each transition's span is still the current span while its
    phase runs (instrumentation inside the phase sees it): one per transition, one trace."""
    seen: list[trace.Span] = []

    @read_tool
    async def where(args: WhereArgs) -> str:
        """Note the current span."""
        seen.append(trace.get_current_span())
        return args.city

    provider = TracerProvider(sampler=ALWAYS_OFF)
    model = ScriptedModel(
        [tool_call("where", {"city": "Oslo"}), tool_call("where", {"city": "Rome"}), reply("Ok.")]
    )
    runner = Runner(
        Agent[None](name="a", tools=[where]),
        model=model,
        gate=ScriptedGate([]),
        tracer=provider.get_tracer("test"),
        keep_states=True,
    )
    await runner.run(None, "Where?")
    contexts = [span.get_span_context() for span in seen]
    assert len(contexts) == 2
    assert all(context.is_valid for context in contexts)
    assert not any(span.is_recording() for span in seen)
    assert contexts[0].trace_id == contexts[1].trace_id
    assert contexts[0].span_id != contexts[1].span_id
    assert not trace.get_current_span().get_span_context().is_valid  # and none after the run


async def test_no_event_is_built_when_nothing_takes_it_and_one_per_transition_when_it_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Below INFO the runner skips the event before structlog renders it; at INFO it logs."""
    rendered: list[str] = []

    def count(logger: Any, method: str, event: dict[str, Any]) -> str:
        rendered.append(str(event["event"]))
        return str(event["event"])

    previous = structlog.get_config()
    structlog.configure(processors=[count])
    try:
        model = ScriptedModel([tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny.")])
        runner = Runner(
            travel_agent(FakeProvider()), model=model, gate=ScriptedGate([]), keep_states=True
        )
        with caplog.at_level(logging.WARNING, logger="statemachine"):
            quiet = await runner.run(TRIP, ASK)
        assert rendered == []
        model = ScriptedModel([tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny.")])
        runner = Runner(
            travel_agent(FakeProvider()), model=model, gate=ScriptedGate([]), keep_states=True
        )
        with caplog.at_level(logging.INFO, logger="statemachine"):
            heard = await runner.run(TRIP, ASK)
        assert rendered == ["transition"] * (len(heard.states) - 1)
        assert quiet.history == heard.history
    finally:
        structlog.configure(processors=previous["processors"])
