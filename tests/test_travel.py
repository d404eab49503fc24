"""The travel agent's three scenarios: what was charged, and the exact state sequence."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from functools import partial
from typing import Any

import anyio
import attrs
from support import RecordingSleep

from agents.travel import (
    FakeProvider,
    Outcome,
    TripContext,
    TripPlanning,
    budget_stops_before_spending,
    flaky_weather,
    prompt_flip,
    travel_agent,
    weather_down,
)
from agents.travel._agent import INSTRUCTIONS
from statemachine import Done, Failed, Phases, Runner
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call


def run(scenario: Callable[..., Awaitable[Outcome]], **kwargs: Any) -> tuple[Outcome, list[float]]:
    sleep = RecordingSleep()
    outcome = anyio.run(partial(scenario, sleep=sleep, **kwargs))
    return outcome, sleep.delays


def all_model_text(outcome: Outcome) -> str:
    return "\n".join(message.content for message in outcome.result.final.transcript)


def test_prompt_flip_denied_charges_nothing_and_the_run_says_so() -> None:
    """A proactive booking is held for approval; denied, nothing is charged."""
    outcome, _ = run(prompt_flip, approve=False)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "Planning",
        "Responding",
        "Done",
    )
    assert outcome.provider.charges == []
    assert outcome.approvals_asked == 1
    final = outcome.result.final
    assert isinstance(final, Done)
    assert "not booked" in final.answer
    # The model was told, in words, that the call did not run.
    told = [m for m in final.transcript if m.role == "tool"]
    assert len(told) == 1
    assert told[0].content.startswith("Not approved: book_flight(")
    assert "nothing was charged" in told[0].content


def test_prompt_flip_approved_charges_exactly_once() -> None:
    """Approved, the flight is charged once, for the exact amount approved."""
    outcome, _ = run(prompt_flip, approve=True)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert outcome.charged == [Decimal("800.00")]
    assert outcome.approvals_asked == 1
    calling = outcome.result.states[3]
    assert calling.kind == "ToolCalling"
    approval = calling.call.approval  # type: ignore[attr-defined]
    assert approval.approved_by == "ada@example.com"
    assert approval.key == calling.call.key  # type: ignore[attr-defined]
    assert outcome.result.final.spent.cost == Decimal("800.00") + 2 * Decimal("0.0015")


def test_flaky_weather_retries_once_and_the_model_never_sees_the_503() -> None:
    """One 503: Retrying backs off, the second call works, the model sees only the result."""
    outcome, delays = run(flaky_weather)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    )
    assert outcome.provider.weather_calls == 2
    assert len(delays) == 1
    assert 0.025 <= delays[0] <= 0.05  # base 0.05 s, jitter 50%
    assert "503" not in all_model_text(outcome)
    assert outcome.provider.charges == []


def test_weather_down_fails_after_the_cap_and_never_calls_more() -> None:
    """A tool that always fails ends in Failed after exactly max_attempts calls."""
    outcome, delays = run(weather_down)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Retrying",
        "Failed",
    )
    assert outcome.provider.weather_calls == 3
    assert len(delays) == 2
    assert delays[1] > delays[0] * 0.9  # backoff grows (jitter aside)
    final = outcome.result.final
    assert isinstance(final, Failed)
    assert final.reason == (
        "get_weather failed 3 time(s), the cap is 3; last error: ToolError: 503 Service Unavailable"
    )


def test_budget_stops_the_hotel_before_spending_or_asking() -> None:
    """With $1,000, the $800 flight is booked and the $600 hotel is never charged or asked."""
    outcome, _ = run(budget_stops_before_spending)
    assert outcome.result.history == (
        "Idle",
        "Planning",
        "AwaitApproval",
        "ToolCalling",
        "Observing",
        "Planning",
        "Failed",
    )
    assert outcome.charged == [Decimal("800.00")]
    assert outcome.approvals_asked == 1
    final = outcome.result.final
    assert isinstance(final, Failed)
    assert final.reason.startswith("cost budget: calling book_hotel would bring the run's cost to")
    assert final.spent.cost <= Decimal("1000")


def test_demo_prints_every_scenario(capsys: Any) -> None:
    """`python -m agents.travel` runs all scenarios and prints their state sequences."""
    from agents.travel.__main__ import main

    anyio.run(main)
    out = capsys.readouterr().out
    assert out.count("states:") == 5
    assert "charged:   nothing" in out
    assert "charged:   $800.00" in out
    assert "charged:    $800.00" in out  # the handoff's $800 flight, with its cents
    # The cost is split into the tool's price and the model's calls; 1 is singular.
    assert out.count("spent:     1 tool call, $800.0030 (tools $800.00, model $0.0030)") == 2
    assert "spent:     0 tool calls, $0.0030 (tools $0.00, model $0.0030)" in out
    assert "1 tool calls" not in out


@attrs.frozen(kw_only=True)
class StrictDesk(TripPlanning):
    """A desk's own planning: the same phase with a field default of its own."""

    house_rules: str = "Never book a hotel without a flight."


def test_a_desk_subclass_with_a_field_default_runs_and_keeps_the_default_prompt() -> None:
    """A phase subclass that adds a defaulted field works through every transition, and the
    travel agent's own prompt is unchanged (its house rules are empty)."""
    trip = TripContext(traveller="Ada", destination="Lisbon")
    prompts: dict[str, str] = {}
    for name, planning in [("default", TripPlanning), ("strict", StrictDesk)]:
        agent = attrs.evolve(travel_agent(FakeProvider()), phases=Phases(planning=planning))
        model = ScriptedModel([tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny.")])
        result = anyio.run(
            lambda agent=agent, model=model: Runner(agent, model=model, gate=AutoDenyGate()).run(
                trip, "Weather?"
            )
        )
        assert isinstance(result.final, Done)
        prompts[name] = model.requests[-1].messages[0].content
    assert prompts["default"] == (f"{INSTRUCTIONS}\nTraveller: Ada. Destination: Lisbon.")
    assert prompts["strict"] == prompts["default"] + "\nNever book a hotel without a flight."
