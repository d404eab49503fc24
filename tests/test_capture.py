"""statemachine.testing.capture(), configure_logging() and the terminal progress line."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
import structlog
from opentelemetry import metrics, trace

from agents.travel import FakeProvider, travel_agent
from agents.travel._scenarios import ASK, FLIGHT, TRIP
from statemachine import Budget, ProgressLine, Runner, SetupError, configure_logging
from statemachine.testing import (
    AutoDenyGate,
    ScriptedGate,
    ScriptedModel,
    capture,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

BOOKING = [
    "run travel",
    "Idle -> Planning",
    "Planning -> AwaitApproval",
    "AwaitApproval -> ToolCalling",
    "ToolCalling -> Observing",
    "Observing -> Planning",
    "Planning -> Responding",
    "Responding -> Done",
]


def booking_runner(**options: Any) -> Runner[Any]:
    model = ScriptedModel([tool_call("book_flight", FLIGHT), reply("Booked.")])
    return Runner(
        travel_agent(FakeProvider()),
        model=model,
        gate=ScriptedGate([True]),
        **options,
    )


@pytest.fixture
def structlog_restored() -> Iterator[None]:
    """Whatever a test configures, structlog and the library's logger are as before after it."""
    before = structlog.get_config()
    library = logging.getLogger("statemachine")
    handlers, level, propagate = list(library.handlers), library.level, library.propagate
    yield
    structlog.configure(**before)
    library.handlers[:] = handlers
    library.setLevel(level)
    library.propagate = propagate


async def test_capture_sees_the_span_tree_the_log_events_and_the_metrics() -> None:
    """Spans in the order they started with their parents, one event per transition, counts."""
    with capture() as seen:
        result = await booking_runner(tracer=seen.tracer, meter=seen.meter).run(
            TRIP, ASK, run_id="run-1"
        )
    assert result.ok
    assert [span.name for span in seen.spans] == BOOKING
    assert [span.parent for span in seen.spans] == [None] + ["run travel"] * 7
    approve = seen.spans[3]
    assert approve.attributes["statemachine.tool"] == "book_flight"
    assert approve.attributes["statemachine.run_id"] == "run-1"
    assert approve.error is None
    assert [(e["event"], e["from"], e["to"]) for e in seen.events] == [
        ("transition", *span.name.split(" -> ")) for span in seen.spans[1:]
    ]
    assert seen.total("statemachine.transitions") == 7
    assert seen.total("statemachine.transitions", {"statemachine.from": "Planning"}) == 2
    assert seen.total("statemachine.retries") == 0
    (duration,) = [
        point
        for point in seen.metrics["statemachine.phase.duration"]
        if point.attributes["statemachine.phase"] == "Planning"
    ]
    assert duration.count == 2


async def test_capture_works_twice_in_one_process_and_touches_no_global_provider() -> None:
    """Each block sees only its own run; the global tracer and meter providers stay as they were."""
    tracer_provider = trace.get_tracer_provider()
    meter_provider = metrics.get_meter_provider()
    for run_id in ("first", "second"):
        with capture() as seen:
            await booking_runner(tracer=seen.tracer, meter=seen.meter).run(TRIP, ASK, run_id=run_id)
        assert [span.name for span in seen.spans] == BOOKING
        assert {e["run_id"] for e in seen.events} == {run_id}
        assert seen.total("statemachine.transitions") == 7
    assert trace.get_tracer_provider() is tracer_provider
    assert metrics.get_meter_provider() is meter_provider


async def test_a_failed_phase_is_a_span_with_its_error() -> None:
    """The span of the phase that raised carries the error; the run span still ends."""
    with capture() as seen:
        runner = Runner(
            travel_agent(FakeProvider()),
            model=ScriptedModel([]),
            gate=AutoDenyGate(),
            tracer=seen.tracer,
            meter=seen.meter,
        )
        with pytest.raises(Exception, match="scripted model") as raised:
            await runner.run(TRIP, ASK)
    assert [(span.name, span.error) for span in seen.spans] == [
        ("run travel", None),
        ("Idle -> Planning", None),
        ("Planning -> ?", f"ScriptExhaustedError: {raised.value}"),
    ]


@pytest.mark.usefixtures("structlog_restored")
async def test_capture_keeps_every_event_and_restores_structlog_afterwards() -> None:
    """Logging configured at WARNING: the block still sees info events; the config comes back."""
    configure_logging(json=True, stream=io.StringIO(), level=logging.WARNING)
    configured = structlog.get_config()
    with capture() as seen:
        await booking_runner(tracer=seen.tracer, meter=seen.meter).run(TRIP, ASK)
    assert len(seen.events) == 7
    assert structlog.get_config() == configured


def test_capture_without_the_sdk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """With opentelemetry-sdk missing, one SetupError naming the package to install."""
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(SetupError) as raised, capture():
        pass
    assert str(raised.value).startswith(
        "statemachine.testing.capture() needs opentelemetry-sdk, which is not installed ("
    )
    assert str(raised.value).endswith("); install it: pip install opentelemetry-sdk")


@pytest.mark.usefixtures("structlog_restored")
async def test_json_logging_writes_one_object_per_transition_with_exact_amounts() -> None:
    """Production output: JSON lines with the transition keys; the budget left stays exact."""
    out = io.StringIO()
    configure_logging(json=True, stream=out)
    agent = travel_agent(FakeProvider(), budget=Budget(cost=Decimal("1000")))
    model = ScriptedModel([reply("Sunny.", cost="0.0015")])
    runner = Runner(agent, model=model, gate=AutoDenyGate())
    await runner.run(TRIP, ASK, run_id="run-9")
    lines = [json.loads(line, parse_float=Decimal) for line in out.getvalue().splitlines()]
    assert [(line["event"], line["from"], line["to"]) for line in lines] == [
        ("transition", "Idle", "Planning"),
        ("transition", "Planning", "Responding"),
        ("transition", "Responding", "Done"),
    ]
    assert {line["run_id"] for line in lines} == {"run-9"}
    assert {line["level"] for line in lines} == {"info"}
    assert all(line["timestamp"].endswith("Z") for line in lines)
    assert lines[-1]["budget_left.cost"] == "999.9985"


@pytest.mark.usefixtures("structlog_restored")
async def test_console_logging_is_readable_text_and_honours_the_level() -> None:
    """Demo output: one line per transition with key=value pairs; WARNING hides them all."""
    out = io.StringIO()
    configure_logging(json=False, stream=out)
    runner = Runner(
        travel_agent(FakeProvider()),
        model=ScriptedModel([reply("Sunny.")] * 2),
        gate=AutoDenyGate(),
    )
    await runner.run(TRIP, ASK, run_id="run-7")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "[info     ] transition" in lines[0]
    assert "from=Idle" in lines[0]
    assert "to=Planning" in lines[0]
    assert "run_id=run-7" in lines[0]
    assert "\x1b[" not in out.getvalue()  # no colours when the stream is not a terminal

    quiet = io.StringIO()
    configure_logging(json=False, stream=quiet, level=logging.WARNING)
    await runner.run(TRIP, ASK)
    assert quiet.getvalue() == ""
    assert len(out.getvalue().splitlines()) == 3  # the first handler was replaced, not kept


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


async def test_the_progress_line_rewrites_one_line_and_erases_it_at_the_end() -> None:
    """On a terminal: carriage returns, never a new line; the line is blank when the run ends."""
    screen = Terminal()
    runner = booking_runner(on_transition=ProgressLine(screen, label="trip: "))
    await runner.run(TRIP, ASK)
    written = screen.getvalue()
    assert "\n" not in written
    shown = [part.rstrip() for part in written.split("\r") if part.strip()]
    assert shown == [
        "trip: step 1: Planning",
        "trip: step 2: AwaitApproval book_flight",
        "trip: step 3: ToolCalling book_flight",
        "trip: step 4: Observing book_flight",
        "trip: step 5: Planning",
        "trip: step 6: Responding",
    ]
    assert written.endswith("\r" + " " * len("trip: step 6: Responding") + "\r")


async def test_the_progress_line_writes_nothing_when_output_is_not_a_terminal() -> None:
    """Piped output stays clean."""
    piped = io.StringIO()
    with ProgressLine(piped) as progress:
        await booking_runner(on_transition=progress).run(TRIP, ASK)
    assert piped.getvalue() == ""


def demo(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agents.travel", *flags],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def test_the_demo_prints_spans_with_the_console_exporter() -> None:
    """`--trace`: every run span and transition span, as the SDK's console exporter prints them."""
    done = demo("--trace")
    spans = [json.loads(block) for block in re.findall(r"^\{\n.*?^\}$", done.stdout, re.S | re.M)]
    names = [span["name"] for span in spans]
    assert len(spans) == 72  # 8 runs (five scenarios, the handoffs' three) and 64 transitions
    assert names.count("run travel") == 5
    assert names.count("Idle -> Planning") == 8  # five scenarios and the handoff's three runs
    retry = next(span for span in spans if span["name"] == "Retrying -> ToolCalling")
    assert retry["attributes"]["statemachine.tool"] == "get_weather"
    assert retry["attributes"]["statemachine.attempt"] == 2
    assert done.stdout.count("states:") == 5  # the state sequences are still printed


def test_the_demo_logs_readable_lines_and_no_progress_line_into_a_pipe() -> None:
    """`--log`: one console line per transition on stderr; stdout, not a terminal, has no \\r."""
    done = demo("--log")
    lines = done.stderr.splitlines()
    assert len(lines) == 64  # one per transition span of --trace
    assert all(" [info     ] transition " in line for line in lines)
    assert "\r" not in done.stdout
    assert "\r" not in demo().stdout
