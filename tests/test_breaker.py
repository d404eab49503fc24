"""Circuit breakers and fallback models, on an injected clock: a failing model is left
alone for its cool-down (the run falls back or fails fast, naming the circuit), a
half-open probe closes it, and every attempt of every model is a recorded transition."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import BaseModel

from statemachine import (
    Agent,
    CircuitBreaker,
    CircuitOpenError,
    Done,
    Failed,
    ModelReply,
    ModelRequest,
    ModelRetriesExhaustedError,
    ModelRetrying,
    ModelUnavailableError,
    Phase,
    RetryPolicy,
    Runner,
    SetupError,
    ToolError,
    Usage,
    read_tool,
)
from statemachine._breaker import BREAKER_CHANGES
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class Clock:
    """The run's clock: it moves when the run sleeps or a test says so; sleeps recorded."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


class Service:
    """A model behind a named endpoint that is down (503) until ``up`` is set."""

    def __init__(self, name: str, *, up: bool = False) -> None:
        self.model = name
        self.base_url = f"http://{name}.test/v1"
        self.up = up
        self.requests = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.requests += 1
        if not self.up:
            raise ModelUnavailableError("overloaded", url=self.base_url, status=503)
        return ModelReply(text=f"Hello from {self.model}.", usage=Usage(input_tokens=3))


def metered() -> tuple[Any, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]).get_meter("test"), reader


def changes(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    """The breaker's changes of state so far, by (circuit, state)."""
    found: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == BREAKER_CHANGES:
                    for point in metric.data.data_points:
                        attributes = point.attributes or {}
                        key = (
                            str(attributes["statemachine.circuit"]),
                            str(attributes["statemachine.state"]),
                        )
                        found[key] = int(point.value)
    return found


# --- the breaker on its own -------------------------------------------------------------


def test_failures_in_a_row_open_the_circuit_and_a_probe_after_the_cool_down_closes_it() -> None:
    """3 failures open it for 10s; then one probe goes, others wait; its success closes it."""
    meter, reader = metered()
    breaker = CircuitBreaker(failures=3, cool_down=10, meter=meter)
    for now in (0.0, 1.0):
        breaker.check("model:m", now)
        breaker.failed("model:m", now)
    assert breaker.state("model:m", 1.0) == "closed"
    breaker.failed("model:m", 2.0)
    assert breaker.state("model:m", 2.0) == "open"
    with pytest.raises(CircuitOpenError) as raised:
        breaker.check("model:m", 5.0)
    assert (raised.value.circuit, raised.value.failures, raised.value.retry_in) == (
        "model:m",
        3,
        7.0,
    )
    assert str(raised.value) == (
        "the circuit breaker of model:m is open after 3 failure(s) in a row, so it was not "
        "called; a probe may go in 7.00s. Wait, or configure a fallback model"
    )
    breaker.check("model:m", 12.0)  # the probe
    assert breaker.state("model:m", 12.0) == "half_open"
    with pytest.raises(CircuitOpenError):
        breaker.check("model:m", 12.5)  # one probe at a time
    breaker.succeeded("model:m")
    assert breaker.state("model:m", 13.0) == "closed"
    breaker.check("model:m", 13.0)
    assert changes(reader) == {
        ("model:m", "open"): 1,
        ("model:m", "half_open"): 1,
        ("model:m", "closed"): 1,
    }


def test_a_failed_probe_opens_the_circuit_for_another_cool_down() -> None:
    """The probe fails: open again, from the probe's time."""
    breaker = CircuitBreaker(failures=1, cool_down=10, meter=metered()[0])
    breaker.failed("tool:lookup", 0.0)
    breaker.check("tool:lookup", 10.0)
    breaker.failed("tool:lookup", 10.5)
    with pytest.raises(CircuitOpenError) as raised:
        breaker.check("tool:lookup", 15.0)
    assert raised.value.retry_in == 5.5


def test_a_probe_cut_short_lets_the_next_call_probe() -> None:
    """A probe that ends without an outcome (the run's deadline) does not keep it half-open."""
    breaker = CircuitBreaker(failures=1, cool_down=1, meter=metered()[0])
    breaker.failed("model:m", 0.0)
    breaker.check("model:m", 2.0)
    breaker.release("model:m")
    breaker.check("model:m", 2.0)  # the next probe, not refused


def test_a_success_resets_the_count_of_failures_in_a_row() -> None:
    """Failures must be in a row: one success between them starts the count again."""
    breaker = CircuitBreaker(failures=2, cool_down=10, meter=metered()[0])
    breaker.failed("model:m", 0.0)
    breaker.succeeded("model:m")
    breaker.failed("model:m", 1.0)
    assert breaker.state("model:m", 1.0) == "closed"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"failures": 0}, "failures must be at least 1"),
        ({"cool_down": -1.0}, "cool_down must be zero or more seconds, got -1.0"),
    ],
)
def test_a_breaker_that_cannot_work_is_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(SetupError, match=message):
        CircuitBreaker(**settings)


# --- in a run ---------------------------------------------------------------------------


def runner(
    agent: Agent[None],
    model: Service,
    clock: Clock,
    *fallbacks: Service,
    seen: list[Any],
    sleep: Any = None,
) -> Runner[None]:
    return Runner(
        agent,
        model=model,
        fallback_models=fallbacks,
        gate=AutoDenyGate(),
        clock=clock,
        sleep=clock.sleep if sleep is None else sleep,
        seed=20,
        on_transition=lambda before, after: seen.append(after),
    )


def retried(seen: list[Phase[None]]) -> list[tuple[int, int, str]]:
    """Each failed attempt: (attempt, model choice, what its error is about)."""
    return [
        (phase.attempt, phase.model_choice, phase.error.split(" is ")[0])
        for phase in seen
        if isinstance(phase, ModelRetrying)
    ]


async def test_an_open_circuit_fails_the_run_fast_naming_it() -> None:
    """Two 503s open the model's circuit for 60s: the third attempt is not sent, and the
    cool-down is longer than the policy waits, so the run is left to resume, naming it."""
    agent = Agent[None](
        name="a", breaker=CircuitBreaker(failures=2, cool_down=60, meter=metered()[0])
    )
    primary, clock, seen = Service("primary"), Clock(), []
    with pytest.raises(ModelRetriesExhaustedError) as raised:
        await runner(agent, primary, clock, seen=seen).run(None, "Hi.")
    assert primary.requests == 2
    assert len(clock.waits) == 2  # after attempts 1 and 2; attempt 3 found it open
    assert raised.value.error.startswith(
        "the circuit breaker of model:primary@http://primary.test/v1 is open after 2 "
        "failure(s) in a row"
    )
    assert [attempt for attempt, _, _ in retried(seen)] == [1, 2, 3]


async def test_fallback_models_are_asked_in_order_and_every_attempt_is_recorded() -> None:
    """The primary and the first fallback are down: the second answers, at once."""
    primary, first, second = Service("primary"), Service("first"), Service("second", up=True)
    clock, seen = Clock(), []
    result = await runner(Agent[None](name="a"), primary, clock, first, second, seen=seen).run(
        None, "Hi."
    )
    assert isinstance(result.final, Done)
    assert result.final.answer == "Hello from second."
    assert result.history == (
        "Idle",
        "Planning",
        "ModelRetrying",
        "Planning",
        "ModelRetrying",
        "Planning",
        "Responding",
        "Done",
    )
    assert (primary.requests, first.requests, second.requests) == (1, 1, 1)
    assert retried(seen) == [
        (1, 0, "the model at http://primary.test/v1"),
        (1, 1, "the model at http://first.test/v1"),
    ]
    assert clock.waits == []
    assert result.final.spent.model_calls == 3


async def test_when_every_model_is_down_the_round_waits_then_starts_again() -> None:
    """Primary and fallback down, then the primary back: one round, one wait, a second
    round that the primary answers."""
    primary, backup, clock, seen = Service("primary"), Service("backup"), Clock(), []

    async def recover(seconds: float) -> None:
        await Clock.sleep(clock, seconds)
        primary.up = True

    # The service comes back while the run waits.
    run = runner(Agent[None](name="a"), primary, clock, backup, seen=seen, sleep=recover)
    result = await run.run(None, "Hi.")
    assert result.final.answer == "Hello from primary."  # type: ignore[union-attr]
    assert [(attempt, choice) for attempt, choice, _ in retried(seen)] == [(1, 0), (1, 1)]
    assert len(clock.waits) == 1
    assert (primary.requests, backup.requests) == (2, 1)


async def test_an_open_circuit_falls_back_without_calling_and_a_probe_closes_it() -> None:
    """A run opens the primary's circuit; the next run skips it (no request) for the
    fallback; after the cool-down a run probes the primary, which answers and closes it."""
    meter, reader = metered()
    agent = Agent[None](
        name="a",
        breaker=CircuitBreaker(failures=1, cool_down=30, meter=meter),
        model_retry=RetryPolicy(max_attempts=1, retry_on=(ModelUnavailableError,)),
    )
    primary, backup, clock = Service("primary"), Service("backup", up=True), Clock()
    first: list[Any] = []
    await runner(agent, primary, clock, backup, seen=first).run(None, "Hi.")
    assert (primary.requests, backup.requests) == (1, 1)

    clock.now = 10.0
    second: list[Any] = []
    result = await runner(agent, primary, clock, backup, seen=second).run(None, "Hi.")
    assert result.final.answer == "Hello from backup."  # type: ignore[union-attr]
    assert primary.requests == 1  # not called: its circuit is open
    assert retried(second) == [
        (1, 0, "the circuit breaker of model:primary@http://primary.test/v1")
    ]

    clock.now = 31.0
    primary.up = True
    third: list[Any] = []
    result = await runner(agent, primary, clock, backup, seen=third).run(None, "Hi.")
    assert result.final.answer == "Hello from primary."  # type: ignore[union-attr]
    assert retried(third) == []
    assert (primary.requests, backup.requests) == (2, 2)
    circuit = "model:primary@http://primary.test/v1"
    assert changes(reader) == {
        (circuit, "open"): 1,
        (circuit, "half_open"): 1,
        (circuit, "closed"): 1,
    }


# --- a tool's circuit -------------------------------------------------------------------


class Lookup(BaseModel):
    city: str


def weather_tool(outcomes: list[str]) -> Any:
    """A read tool that fails (503) or answers, in the order of ``outcomes``; then answers."""

    @read_tool(retry=RetryPolicy(max_attempts=4, retry_on=(ToolError,)))
    async def weather(args: Lookup) -> str:
        """Today's weather."""
        outcomes.append("called")
        if outcomes.count("called") <= failing[0]:
            raise ToolError("503 from the weather service", status=503)
        return "sunny"

    failing = [0]
    return weather, failing


async def test_a_tools_open_circuit_fails_the_call_fast_naming_it() -> None:
    """Two failures in a row open the tool's circuit: the third attempt is not run, and the
    run fails with a reason that names the circuit."""
    calls: list[str] = []
    weather, failing = weather_tool(calls)
    failing[0] = 10
    agent = Agent[None](
        name="a",
        tools=[weather],
        breaker=CircuitBreaker(failures=2, cool_down=60, meter=metered()[0]),
    )
    clock = Clock()
    model = ScriptedModel([tool_call("weather", {"city": "Oslo"})])
    result = await Runner(
        agent, model=model, gate=AutoDenyGate(), clock=clock, sleep=clock.sleep, seed=20
    ).run(None, "Weather?")
    assert isinstance(result.final, Failed)
    assert len(calls) == 2
    assert result.history[-6:] == (
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Failed",
    )
    assert result.final.reason.startswith(
        "the circuit breaker of tool:weather is open after 2 failure(s) in a row"
    )


async def test_a_tools_circuit_closes_after_a_successful_probe() -> None:
    """Open after one failure; after the cool-down the next run's call is the probe, which
    answers and closes the circuit."""
    meter, reader = metered()
    calls: list[str] = []
    weather, failing = weather_tool(calls)
    failing[0] = 1
    agent = Agent[None](
        name="a", tools=[weather], breaker=CircuitBreaker(failures=1, cool_down=5, meter=meter)
    )
    clock = Clock()

    def run() -> Runner[None]:
        model = ScriptedModel([tool_call("weather", {"city": "Oslo"}), reply("Sunny.")])
        return Runner(
            agent, model=model, gate=AutoDenyGate(), clock=clock, sleep=clock.sleep, seed=20
        )

    first = await run().run(None, "Weather?")
    assert isinstance(first.final, Failed)  # the retry found the circuit open
    assert len(calls) == 1
    clock.now += 5
    second = await run().run(None, "Weather?")
    assert isinstance(second.final, Done)
    assert len(calls) == 2
    assert changes(reader) == {
        ("tool:weather", "open"): 1,
        ("tool:weather", "half_open"): 1,
        ("tool:weather", "closed"): 1,
    }
