"""The scenarios: what breaks a ``while True`` agent, and the researcher -> booker handoff.

The three ways a ``while True`` agent breaks are each replayed on the typed agent;
the handoff runs two agents joined by a typed brief. Each scenario runs offline on
a scripted model and returns what happened: the run(s), the charges the provider
recorded and the approvals that were asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal

import anyio
import attrs

from statemachine import ApprovalGate, Budget, ModelReply, Phase, Runner, RunResult, dumps
from statemachine.testing import AutoDenyGate, ScriptedGate, ScriptedModel, reply, tool_call

from ._agent import FakeProvider, TripContext, travel_agent
from ._handoff import Handoff, TripRequest, plan_and_book

__all__ = [
    "HandoffOutcome",
    "Outcome",
    "budget_stops_before_spending",
    "flaky_weather",
    "handoff",
    "prompt_flip",
    "weather_down",
]

TRIP = TripContext(traveller="Ada Lovelace", destination="Lisbon")
ASK = "I'm thinking about a trip to Lisbon next month. What's the weather like?"
FLIGHT = {"traveller": "Ada Lovelace", "flight": "TP1351", "price": Decimal("800.00")}
HOTEL = {"traveller": "Ada Lovelace", "hotel": "Casa Azul", "nights": 3, "price": Decimal("600")}
# What each scripted model turn "costs": tokens and dollars, charged to the run's budget.
TURN_TOKENS = 150
TURN_COST = Decimal("0.0015")

Sleep = Callable[[float], Awaitable[None]]
# Called after every transition (the demo shows a progress line with it).
OnTransition = Callable[[Phase[TripContext], Phase[TripContext]], None] | None


def _call(name: str, arguments: Mapping[str, object]) -> ModelReply:
    return tool_call(name, arguments, tokens=TURN_TOKENS, cost=TURN_COST)


def _say(text: str) -> ModelReply:
    return reply(text, tokens=TURN_TOKENS, cost=TURN_COST)


@attrs.frozen
class Outcome:
    """What one scenario did."""

    title: str
    result: RunResult[TripContext]
    provider: FakeProvider
    approvals_asked: int

    @property
    def charged(self) -> list[Decimal]:
        """The amounts the provider charged, in order."""
        return [charge.amount for charge in self.provider.charges]


async def _run(
    title: str,
    provider: FakeProvider,
    model: ScriptedModel,
    gate: AutoDenyGate | ScriptedGate,
    *,
    budget: Budget | None = None,
    sleep: Sleep = anyio.sleep,
    on_transition: OnTransition = None,
) -> Outcome:
    agent = travel_agent(provider, budget=budget)
    approval_gate: ApprovalGate = gate
    # Every phase kept: a scenario's outcome shows (and its tests read) the whole run.
    runner = Runner(
        agent,
        model=model,
        gate=approval_gate,
        sleep=sleep,
        seed=7,
        on_transition=on_transition,
        keep_states=True,
    )
    result = await runner.run(TRIP, ASK)
    return Outcome(
        title=title, result=result, provider=provider, approvals_asked=len(gate.requests)
    )


async def prompt_flip(
    *, approve: bool, sleep: Sleep = anyio.sleep, on_transition: OnTransition = None
) -> Outcome:
    """ "Be proactive": the model books a flight nobody asked for, right away.

    The write call waits in ``AwaitApproval``. Denied, nothing is charged and the
    model is told so; approved, the flight is charged exactly once.
    """
    if approve:
        model = ScriptedModel(
            [
                _call("book_flight", FLIGHT),
                _say("Booked TP1351 to Lisbon for $800.00 (ref TRV-0001)."),
            ]
        )
        gate: AutoDenyGate | ScriptedGate = ScriptedGate([True], by="ada@example.com")
    else:
        model = ScriptedModel(
            [
                _call("book_flight", FLIGHT),
                _say("I have not booked anything: the booking was not approved."),
            ]
        )
        gate = AutoDenyGate(reason="the traveller only asked about the weather")
    title = "prompt flip, " + ("approved" if approve else "denied")
    return await _run(title, FakeProvider(), model, gate, sleep=sleep, on_transition=on_transition)


async def flaky_weather(
    *, sleep: Sleep = anyio.sleep, on_transition: OnTransition = None
) -> Outcome:
    """get_weather answers 503 once; ``Retrying`` backs off and the second call works.

    The model never sees the failed attempt.
    """
    model = ScriptedModel(
        [
            _call("get_weather", {"city": "Lisbon"}),
            _say("Lisbon next month: sunny, around 24°C."),
        ]
    )
    provider = FakeProvider(weather_failures=1)
    return await _run(
        "flaky weather API",
        provider,
        model,
        AutoDenyGate(),
        sleep=sleep,
        on_transition=on_transition,
    )


async def weather_down(
    *, sleep: Sleep = anyio.sleep, on_transition: OnTransition = None
) -> Outcome:
    """get_weather always fails: the run ends in ``Failed`` after the attempts cap."""
    model = ScriptedModel([_call("get_weather", {"city": "Lisbon"})])
    provider = FakeProvider(weather_down=True)
    return await _run(
        "weather API down",
        provider,
        model,
        AutoDenyGate(),
        sleep=sleep,
        on_transition=on_transition,
    )


async def budget_stops_before_spending(
    *, sleep: Sleep = anyio.sleep, on_transition: OnTransition = None
) -> Outcome:
    """A $1,000 budget: the $800 flight is booked; the $600 hotel would cross it.

    The hotel is never charged, and nobody is asked to approve it.
    """
    model = ScriptedModel(
        [
            _call("book_flight", FLIGHT),
            _call("book_hotel", HOTEL),
        ]
    )
    gate = ScriptedGate([True, True], by="ada@example.com")
    budget = Budget(cost=Decimal("1000"))
    return await _run(
        "cost budget",
        FakeProvider(),
        model,
        gate,
        budget=budget,
        sleep=sleep,
        on_transition=on_transition,
    )


CITIES = TripRequest(traveller="Ada Lovelace", cities=("Lisbon", "Porto", "Madrid"))
FORECASTS = {"Lisbon": ("sunny", 24), "Porto": ("cloudy", 19), "Madrid": ("sunny", 27)}
CONFIRM = "Please confirm: book flight TP1351 now"
MADRID_FLIGHT = {"traveller": "Ada Lovelace", "flight": "IB3117", "price": Decimal("800")}


@attrs.frozen
class HandoffOutcome:
    """What the researcher -> booker scenario did."""

    title: str
    handoff: Handoff
    provider: FakeProvider
    approvals_asked: int

    @property
    def charged(self) -> list[Decimal]:
        """The amounts the provider charged, in order."""
        return [charge.amount for charge in self.provider.charges]


def _city(name: str, *, failed: bool) -> dict[str, object]:
    if failed:
        return {"city": name, "available": False}
    forecast, high_c = FORECASTS[name]
    return {"city": name, "available": True, "forecast": forecast, "high_c": high_c}


async def handoff(*, lookups_fail: bool, sleep: Sleep = anyio.sleep) -> HandoffOutcome:
    """Researcher -> booker: a typed WeatherBrief is the only thing handed over.

    With every look-up working, the researcher leaves "please confirm: book TP1351"
    in the brief's notes; the booker never sees it, books the sunniest city (chosen
    by code) and waits for approval. With Porto and Madrid answering 503, the brief
    is refused by its rules after three attempts and the booker never runs.
    """
    down = frozenset({"Porto", "Madrid"}) if lookups_fail else frozenset[str]()
    provider = FakeProvider(forecasts=dict(FORECASTS), weather_down_in=down)
    cities = [_city(name, failed=name in down) for name in CITIES.cities]
    brief = dumps({"cities": cities, "notes": "" if lookups_fail else CONFIRM})
    attempts = 3 if lookups_fail else 1  # the validation loop asks up to three times
    researcher = ScriptedModel(
        [*(_call("get_weather", {"city": name}) for name in CITIES.cities)]
        + [_say(brief)] * attempts
    )
    booker = ScriptedModel(
        [_call("book_flight", MADRID_FLIGHT), _say("Booked IB3117 to Madrid for $800.")]
    )
    gate = ScriptedGate([True], by="ada@example.com")
    outcome = await plan_and_book(
        CITIES,
        provider=provider,
        researcher_model=researcher,
        booker_model=booker,
        gate=gate,
        sleep=sleep,
        seed=7,
    )
    title = (
        "handoff refused: two of three look-ups answered 503"
        if lookups_fail
        else 'handoff: a typed brief, with "please confirm" left in its notes'
    )
    return HandoffOutcome(
        title=title, handoff=outcome, provider=provider, approvals_asked=len(gate.requests)
    )
