"""Metrics: transitions, retries, suppressions, fallbacks, approvals waiting, time per phase."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support import FakeClock, FlightArgs

from agents.travel import FakeProvider, travel_agent
from agents.travel._scenarios import ASK, FLIGHT, TRIP
from statemachine import (
    Agent,
    ApprovalRequest,
    Failed,
    ModelReply,
    ModelRequest,
    Pending,
    Runner,
    SQLiteCheckpointer,
    write_tool,
)
from statemachine.testing import AutoDenyGate, ScriptedGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

AGENT = {"statemachine.agent": "travel"}
MODEL_SECONDS = 2.0


class Metrics:
    """A private meter provider and what its reader has collected, by instrument."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter = MeterProvider(metric_readers=[self.reader]).get_meter("statemachine")

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, value) of each point; a histogram's value is (sum, count)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        value = (point.sum, point.count) if hasattr(point, "count") else point.value
                        found.append((dict(point.attributes or {}), value))
        return found

    def by(self, name: str, key: str) -> dict[Any, Any]:
        """Each point's value keyed by one attribute."""
        return {attributes[key]: value for attributes, value in self.points(name)}


class SlowModel:
    """A scripted model whose every call takes MODEL_SECONDS on the fake clock."""

    def __init__(self, turns: list[ModelReply], clock: FakeClock) -> None:
        self.scripted = ScriptedModel(turns)
        self.clock = clock
        self.constrained = False

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.clock.advance(MODEL_SECONDS)
        return await self.scripted.complete(request)


class DeskGate:
    """The travel desk answers later: every request is Pending."""

    async def decide(self, request: ApprovalRequest) -> Pending:
        return Pending(reason="sent to the travel desk")


async def test_a_travel_run_is_counted_exactly() -> None:
    """A 503 then a retry, an exact duplicate suppressed, an approval wait, then the booking."""
    seen = Metrics()
    clock = FakeClock()
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        clock.advance(seconds)

    weather = tool_call("get_weather", {"city": "Lisbon"})
    model = SlowModel([weather, weather, tool_call("book_flight", FLIGHT), reply("Booked.")], clock)
    runner = Runner(
        travel_agent(FakeProvider(weather_failures=1)),
        model=model,
        gate=DeskGate(),
        clock=clock,
        sleep=sleep,
        seed=7,
        meter=seen.meter,
    )
    paused = await runner.run(TRIP, ASK)
    assert paused.status == "paused"
    assert seen.points("statemachine.approvals.waiting") == [
        ({**AGENT, "statemachine.tool": "book_flight"}, 1)
    ]

    done = await runner.drive(paused.final, run_id=paused.run_id, gate=ScriptedGate([True]))
    assert done.ok
    assert paused.trace() + done.trace().removeprefix("AwaitApproval") == (
        "Idle -> Planning -> ToolCalling -> Retrying -> ToolCalling -> Observing -> Planning"
        " -[suppress: exact]-> Planning -> AwaitApproval -> AwaitApproval -> ToolCalling"
        " -> Observing -> Planning -> Responding -> Done"
    )
    transitions = {
        (attributes["statemachine.from"], attributes["statemachine.to"]): value
        for attributes, value in seen.points("statemachine.transitions")
    }
    assert transitions == {
        ("Idle", "Planning"): 1,
        ("Planning", "ToolCalling"): 1,
        ("ToolCalling", "Retrying"): 1,
        ("Retrying", "ToolCalling"): 1,
        ("ToolCalling", "Observing"): 2,
        ("Observing", "Planning"): 2,
        ("Planning", "Planning"): 1,
        ("Planning", "AwaitApproval"): 1,
        ("AwaitApproval", "AwaitApproval"): 1,
        ("AwaitApproval", "ToolCalling"): 1,
        ("Planning", "Responding"): 1,
        ("Responding", "Done"): 1,
    }
    assert all(
        a["statemachine.agent"] == "travel" for a, _ in seen.points("statemachine.transitions")
    )
    assert seen.points("statemachine.retries") == [
        ({**AGENT, "statemachine.tool": "get_weather"}, 1)
    ]
    assert seen.points("statemachine.suppressions") == [
        ({**AGENT, "statemachine.tier": "exact"}, 1)
    ]
    # Up when the run began to wait, down when the decision let it go on.
    assert seen.points("statemachine.approvals.waiting") == [
        ({**AGENT, "statemachine.tool": "book_flight"}, 0)
    ]
    # Only the model calls (in Planning) and the backoff (in Retrying) took time.
    (delay,) = delays
    assert seen.by("statemachine.phase.duration", "statemachine.phase") == {
        "Idle": (0.0, 1),
        "Planning": (4 * MODEL_SECONDS, 4),
        "ToolCalling": (0.0, 3),
        "Retrying": (pytest.approx(delay), 1),
        "Observing": (0.0, 2),
        "AwaitApproval": (0.0, 2),
        "Responding": (0.0, 1),
    }


async def test_the_share_of_time_in_retrying_is_one_division() -> None:
    """Sum of the phase histogram for Retrying over its sum for every phase: the backoff share."""
    seen = Metrics()
    clock = FakeClock()
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        clock.advance(seconds)

    model = SlowModel([tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny.")], clock)
    runner = Runner(
        travel_agent(FakeProvider(weather_failures=2)),
        model=model,
        gate=AutoDenyGate(),
        clock=clock,
        sleep=sleep,
        seed=7,
        meter=seen.meter,
    )
    result = await runner.run(TRIP, ASK)
    assert result.ok
    sums = [total for _, (total, _) in seen.points("statemachine.phase.duration")]
    (retrying,) = [
        total
        for attributes, (total, _) in seen.points("statemachine.phase.duration")
        if attributes["statemachine.phase"] == "Retrying"
    ]
    backoff = sum(delays)
    assert len(delays) == 2
    assert retrying / sum(sums) == pytest.approx(backoff / (backoff + 2 * MODEL_SECONDS))
    assert seen.points("statemachine.retries") == [
        ({**AGENT, "statemachine.tool": "get_weather"}, 2)
    ]


async def test_validation_fallbacks_count_on_the_runners_meter() -> None:
    """The existing fallback counter keeps its name and attributes, on the meter given."""
    seen = Metrics()
    long = "x" * 4001
    runner = Runner(
        Agent[None](name="a"),
        model=ScriptedModel([reply(long)] * 3),
        gate=AutoDenyGate(),
        meter=seen.meter,
    )
    result = await runner.run(None, "Help me.")
    assert isinstance(result.final, Failed)
    assert seen.points("statemachine.validation.fallbacks") == [
        ({"statemachine.schema": "CustomerResponse", "statemachine.stop": "attempts"}, 1)
    ]


async def test_a_phase_that_raises_records_its_time_but_no_transition() -> None:
    """The failing phase still counts in the time histogram; no transition is counted from it."""
    seen = Metrics()
    runner = Runner(
        travel_agent(FakeProvider()),
        model=ScriptedModel([]),
        gate=AutoDenyGate(),
        meter=seen.meter,
    )
    with pytest.raises(Exception, match="scripted model"):
        await runner.run(TRIP, ASK)
    counts = {
        phase: count
        for phase, (_, count) in seen.by(
            "statemachine.phase.duration", "statemachine.phase"
        ).items()
    }
    assert counts == {"Idle": 1, "Planning": 1}
    assert [
        (a["statemachine.from"], a["statemachine.to"], v)
        for a, v in seen.points("statemachine.transitions")
    ] == [("Idle", "Planning", 1)]


class CountingMeter:
    """A meter that counts how often each instrument is created."""

    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self.created: list[str] = []

    def __getattr__(self, method: str) -> Any:
        def create(name: str, *args: Any, **kwargs: Any) -> Any:
            self.created.append(name)
            return getattr(self.meter, method)(name, *args, **kwargs)

        return create


async def test_instruments_are_created_once_per_runner_not_per_transition() -> None:
    """Two runs of many transitions each: every instrument was created exactly once."""
    meter = CountingMeter(Metrics().meter)
    model = ScriptedModel([tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny.")] * 2)
    runner = Runner(travel_agent(FakeProvider()), model=model, gate=AutoDenyGate(), meter=meter)
    await runner.run(TRIP, ASK)
    await runner.run(TRIP, ASK)
    assert sorted(meter.created) == [
        "statemachine.approvals.waiting",
        "statemachine.phase.duration",
        "statemachine.retries",
        "statemachine.suppressions",
        "statemachine.transitions",
        "statemachine.validation.fallbacks",
    ]


@write_tool
async def book(args: FlightArgs) -> dict[str, str]:
    """Book a flight."""
    return {"booked": args.flight}


async def test_the_approvals_waiting_gauge_is_read_from_the_store(tmp_path: Any) -> None:
    """Two runners (as two processes would) on one store count a waiting run once, and an
    abort made elsewhere lowers the gauge at the next reading (issue 18)."""
    agent = Agent[None](name="desk", tools=[book])
    first, second = Metrics(), Metrics()
    key = {"statemachine.agent": "desk", "statemachine.tool": "book"}
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as one, SQLiteCheckpointer(path) as other:
        asks = tool_call("book", {"flight": "TP123", "price": "100.00"})
        waiting = Runner(
            agent, model=ScriptedModel([asks]), gate=DeskGate(), checkpointer=one, meter=first.meter
        )
        paused = await waiting.run(None, "Book it", run_id="w1")
        assert paused.status == "paused"
        assert first.points("statemachine.approvals.waiting") == [(key, 1)]
        elsewhere = Runner(
            agent,
            model=ScriptedModel([reply("Hello.")]),
            gate=DeskGate(),
            checkpointer=other,
            meter=second.meter,
        )
        await elsewhere.run(None, "Hi", run_id="r2")
        assert second.points("statemachine.approvals.waiting") == [(key, 1)]
        # Twice in one process: still one run waiting.
        await waiting.count_waiting()
        assert first.points("statemachine.approvals.waiting") == [(key, 1)]
        await other.set_status("w1", "aborted")  # an operator, from anywhere
        await waiting.count_waiting()
        assert first.points("statemachine.approvals.waiting") == [(key, 0)]


async def _until(holds: Any) -> None:
    """Wait (at most 10 s) until ``holds()``: the worker polls every 10 ms."""
    for _ in range(1000):
        if holds():
            return
        await anyio.sleep(0.01)
    raise AssertionError("not within 10 s")


async def test_an_idle_worker_reads_the_approvals_waiting_gauge_from_the_store(
    tmp_path: Any,
) -> None:
    """A decision or an abort made elsewhere shows in an idle worker's gauge (issue 18)."""
    from statemachine._worker import Worker

    agent = Agent[None](name="desk", tools=[book])
    seen = Metrics()
    key = {"statemachine.agent": "desk", "statemachine.tool": "book"}
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        asks = tool_call("book", {"flight": "TP123", "price": "100.00"})
        starting = Runner(agent, model=ScriptedModel([asks]), gate=DeskGate(), checkpointer=store)
        assert (await starting.run(None, "Book it", run_id="w1")).status == "paused"
        serving = Runner(
            agent, model=ScriptedModel([]), gate=DeskGate(), checkpointer=store, meter=seen.meter
        )
        worker = Worker(store, [serving], exit_when_idle=False, poll=timedelta(milliseconds=10))
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run)
            await _until(lambda: seen.points("statemachine.approvals.waiting") == [(key, 1)])
            worker.stop()
        await store.set_status("w1", "aborted")
        again = Worker(store, [serving], poll=timedelta(milliseconds=10))
        async with anyio.create_task_group() as group:
            group.start_soon(again.run)
            await _until(lambda: seen.points("statemachine.approvals.waiting") == [(key, 0)])
            again.stop()
