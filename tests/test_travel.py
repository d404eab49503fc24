"""The travel agent's three scenarios: what was charged, and the exact state sequence."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from decimal import Decimal
from functools import partial
from typing import Any

import anyio
from support import RecordingSleep

from agents.travel import (
    Outcome,
    budget_stops_before_spending,
    flaky_weather,
    prompt_flip,
    weather_down,
)
from statemachine import Done, Failed


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
