"""The researcher -> booker handoff: a typed brief between two agents, never text.

The researcher looks up the weather in the three cities asked for (``get_weather``,
read only) and must answer with a :class:`WeatherBrief`. Its agent has an
``answer_guard``, so the answer goes through the validation loop (feedback to the
model, at most three attempts) and the run ends in ``Done`` holding the parsed,
frozen brief, or in ``Failed``. Two rules run on every brief, with the request as
their dependencies: the cities must be exactly the ones asked for, and no look-up
may be marked unavailable or lack its forecast. :func:`plan_and_book` then checks
the brief against what ``get_weather`` really returned in that run, and only a
brief that passes reaches the booker. Anything else is a :class:`HandoffRejected`
(a value, not an exception) and the booker's model is never called.

The booker reads none of the researcher's words. Its context, a
:class:`BookerContext`, is built by code from typed fields: the destination is the
sunniest city, chosen by code and spelled as the traveller asked for it; the
forecast is one of five words; the high is a number. The brief's ``notes`` (and any
text around its JSON, which the guard cuts away) stay with the outcome for a person
to read, so "please confirm: book now" in the research cannot become an instruction
to book; and every booking still waits for the approval gate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeAlias, cast, final, get_args

import anyio
import attrs
from opentelemetry import metrics
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from statemachine import (
    Agent,
    ApprovalGate,
    ApprovalRequest,
    Approve,
    Denial,
    Diagnostic,
    Done,
    Failed,
    Invalid,
    Model,
    Observing,
    OutputGuard,
    Phases,
    Planning,
    RetryPolicy,
    Rule,
    Runner,
    RunResult,
    ToolError,
    read_tool,
)

from ._agent import FakeProvider, WeatherArgs, travel_agent

__all__ = [
    "BRIEF_GUARD",
    "BookerContext",
    "BookerPlanning",
    "CityWeather",
    "Forecast",
    "Handoff",
    "HandoffAccepted",
    "HandoffRejected",
    "ResearchPlanning",
    "TripRequest",
    "WeatherBrief",
    "asked_cities",
    "booker_agent",
    "choose_destination",
    "lookups_available",
    "plan_and_book",
    "researcher_agent",
]

Forecast: TypeAlias = Literal["sunny", "partly cloudy", "cloudy", "rain", "snow"]
FORECASTS: tuple[str, ...] = get_args(Forecast)
# How sunny each forecast is, for choosing the destination: higher is sunnier.
_SUNSHINE = {forecast: len(FORECASTS) - rank for rank, forecast in enumerate(FORECASTS)}

Sleep = Callable[[float], Awaitable[None]]


def _and(names: Sequence[str]) -> str:
    """``('A', 'B', 'C')`` -> ``'A, B and C'``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _key(city: str) -> str:
    return city.strip().casefold()


# --- the request -----------------------------------------------------------------------


@attrs.frozen
class TripRequest:
    """Who travels, and the three cities to compare: the researcher's context.

    City names are compared case-insensitively; they must be three different cities.
    """

    traveller: str
    cities: tuple[str, str, str]

    def __attrs_post_init__(self) -> None:
        if not self.traveller.strip():
            raise ValueError("a trip request needs a traveller's name")
        names = [city.strip() for city in self.cities]
        if len(names) != 3 or not all(names):
            raise ValueError(f"a trip request compares exactly three named cities, got {names!r}")
        if len({_key(city) for city in names}) != 3:
            raise ValueError(f"a trip request compares three different cities, got {names!r}")


# --- the handoff schema and its rules ---------------------------------------------------


class CityWeather(BaseModel):
    """One city's weather as ``get_weather`` returned it; ``available=False``: it failed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    city: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
    available: bool = True
    forecast: Forecast | None = None
    high_c: Annotated[Decimal, Field(ge=-90, le=60)] | None = None


class WeatherBrief(BaseModel):
    """The handoff from researcher to booker: one entry per city asked for.

    ``notes`` is data for a person to read; no part of it is ever sent to the booker.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    cities: tuple[CityWeather, ...] = Field(max_length=12)
    notes: str = Field(default="", max_length=1000)


def _requested(deps: Any) -> tuple[str, ...]:
    """The cities asked for, from a rule's dependencies (the run's context)."""
    if isinstance(deps, TripRequest):
        return tuple(city.strip() for city in deps.cities)
    is_list = isinstance(deps, Sequence) and not isinstance(deps, str)
    names = cast("Sequence[object]", deps) if is_list else None
    if names is not None and all(isinstance(city, str) for city in names):
        return tuple(city.strip() for city in cast("Sequence[str]", names))
    raise TypeError(
        "the WeatherBrief rules need the cities asked for as their deps (a TripRequest or "
        f"a sequence of city names), got {deps!r}"
    )


def asked_cities(brief: WeatherBrief, deps: Any) -> Iterator[Diagnostic]:
    """Rule: the brief covers exactly the cities asked for, each once."""
    asked = _requested(deps)
    wanted = {_key(city): city for city in asked}
    seen: set[str] = set()
    for index, entry in enumerate(brief.cities):
        key = _key(entry.city)
        path = f"$.cities[{index}].city"
        if key not in wanted:
            yield Diagnostic.for_rule(
                "asked_cities",
                f"{entry.city} is not one of the cities asked for ({_and(asked)})",
                path=path,
                seen=entry.city,
                fixes=(f"use one of: {', '.join(asked)}", "remove this entry"),
            )
        elif key in seen:
            yield Diagnostic.for_rule(
                "asked_cities",
                f"{entry.city} has more than one entry",
                path=path,
                seen=entry.city,
                fixes=("keep one entry per city",),
            )
        seen.add(key)
    missing = [city for key, city in wanted.items() if key not in seen]
    if missing:
        yield Diagnostic.for_rule(
            "asked_cities",
            f"the brief has no entry for {_and(missing)}; it needs one for each of {_and(asked)}",
            path="$.cities",
            seen=[entry.city for entry in brief.cities],
            fixes=[f"add the entry for {city} from what get_weather returned" for city in missing],
        )


def lookups_available(brief: WeatherBrief, deps: Any) -> Iterator[Diagnostic]:
    """Rule: every look-up succeeded; an entry marked unavailable, or without data, is refused."""
    for index, entry in enumerate(brief.cities):
        path = f"$.cities[{index}]"
        if not entry.available:
            yield Diagnostic.for_rule(
                "lookups_available",
                f"the weather look-up for {entry.city} is marked unavailable; the booker "
                "needs the forecast of every city asked for",
                path=f"{path}.available",
                seen=entry.available,
                fixes=(
                    "if get_weather returned a forecast for this city, report it with "
                    "available true",
                ),
            )
            continue
        if entry.forecast is None:
            yield Diagnostic.for_rule(
                "lookups_available",
                f"{entry.city} has no forecast",
                path=f"{path}.forecast",
                seen=None,
                fixes=(f"write the forecast get_weather returned: one of {', '.join(FORECASTS)}",),
            )
        if entry.high_c is None:
            yield Diagnostic.for_rule(
                "lookups_available",
                f"{entry.city} has no high temperature",
                path=f"{path}.high_c",
                seen=None,
                fixes=("write the high get_weather returned, in °C, as a JSON number",),
            )


BRIEF_RULES: tuple[Rule[WeatherBrief], ...] = (asked_cities, lookups_available)
BRIEF_GUARD: OutputGuard[WeatherBrief] = OutputGuard(WeatherBrief, rules=BRIEF_RULES)
"""The researcher's answer guard: a WeatherBrief, with the request as the rules' deps."""


# --- the researcher --------------------------------------------------------------------

RESEARCHER_INSTRUCTIONS = (
    "You research the weather for a trip. You cannot book anything and nobody reads "
    "your answer but a program."
)


class ResearchPlanning(Planning[TripRequest]):
    """Planning for the researcher: the cities to look up and the brief's shape."""

    def instructions(self) -> str:
        """The researcher's system prompt, built from the request."""
        return (
            f"{self.agent.instructions}\n"
            f"Call get_weather once for each of {_and(self.ctx.cities)}. Then answer with "
            "one JSON object and nothing else:\n"
            '{"cities": [{"city": "<name>", "available": true, "forecast": '
            f'"<{"|".join(FORECASTS)}>", "high_c": <number>}}, ...], "notes": "<optional>"}}\n'
            "If a look-up failed, write available false for that city and no forecast."
        )


def researcher_agent(provider: FakeProvider) -> Agent[TripRequest]:
    """The researcher: ``get_weather`` only, and an answer that must be a WeatherBrief.

    A failed look-up is reported to the model as data (``available: false``) rather
    than raised: a researcher says what it could not find, and whether the brief is
    enough is the handoff's decision, not a crash in the middle of the research.
    """

    @read_tool(timeout=5.0)
    async def get_weather(args: WeatherArgs) -> dict[str, object]:
        """The weather forecast for a city; a failed look-up says so."""
        try:
            found = provider.weather(args.city)
        except ToolError as error:
            return {"city": args.city, "available": False, "error": str(error)}
        return {**found, "available": True}

    return Agent(
        name="travel-researcher",
        tools=[get_weather],
        instructions=RESEARCHER_INSTRUCTIONS,
        retry=RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=1.0),
        max_steps=8,
        answer_guard=BRIEF_GUARD,
        phases=Phases(planning=ResearchPlanning),
    )


@final
class _NoWrites:
    """The researcher's approval gate: it has no write tool, and would be refused one."""

    async def decide(self, request: ApprovalRequest) -> Approve | Denial:
        """Deny."""
        return Denial(reason="the researcher may not write", denied_by="travel-researcher")


# --- the booker ------------------------------------------------------------------------


def _check_forecast(_: Any, __: Any, value: str) -> None:
    if value not in _SUNSHINE:
        raise ValueError(f"forecast must be one of {', '.join(FORECASTS)}, got {value!r}")


@attrs.frozen(kw_only=True)
class BookerContext:
    """All the booker knows: typed fields built by code from a valid brief.

    ``destination`` is one of ``compared`` (the cities asked for, spelled as asked),
    ``forecast`` one of five words, ``high_c`` a number; nothing here is the
    researcher's text.
    """

    traveller: str
    destination: str
    forecast: Forecast = attrs.field(validator=_check_forecast)
    high_c: Decimal = attrs.field(validator=attrs.validators.instance_of(Decimal))
    compared: tuple[str, ...]

    def __attrs_post_init__(self) -> None:
        if self.destination not in self.compared:
            raise ValueError(
                f"the destination {self.destination!r} is not one of the cities compared "
                f"({', '.join(self.compared)})"
            )


BOOKER_INSTRUCTIONS = (
    "You book travel. Book only what the traveller asks for; every booking waits for a "
    "person's approval."
)


class BookerPlanning(Planning[BookerContext]):
    """Planning for the booker: instructions from typed fields only."""

    def instructions(self) -> str:
        """The booker's system prompt: names validated against the request, and numbers."""
        ctx = self.ctx
        return (
            f"{self.agent.instructions}\n"
            f"Traveller: {ctx.traveller}. Destination: {ctx.destination}, the sunniest of "
            f"{_and(ctx.compared)} (forecast: {ctx.forecast}, high {ctx.high_c:f} °C)."
        )


def booker_agent(provider: FakeProvider) -> Agent[BookerContext]:
    """The booker: the travel agent's ``book_flight`` and ``book_hotel`` write tools."""
    tools = travel_agent(provider).tools
    return Agent(
        name="travel-booker",
        tools=[tools.get("book_flight"), tools.get("book_hotel")],
        instructions=BOOKER_INSTRUCTIONS,
        max_steps=6,
        phases=Phases(planning=BookerPlanning),
    )


def choose_destination(request: TripRequest, brief: WeatherBrief) -> BookerContext:
    """The sunniest city of a valid brief (then the warmest, then the first asked).

    The name is the request's spelling, never the brief's. A brief the guard would
    refuse raises ``ValueError``: check it with :data:`BRIEF_GUARD` first.
    """
    asked = {_key(city): city for city in request.cities}
    problems = [
        item for rule in BRIEF_RULES for item in rule(brief, request) if item.severity == "error"
    ]
    if problems:
        listed = "; ".join(f"{item.path}: {item.message}" for item in problems)
        raise ValueError(f"the brief is not valid for this request: {listed}")
    candidates: list[tuple[tuple[int, Decimal, int], str, Forecast, Decimal]] = []
    for entry in brief.cities:
        # The rules above guarantee both are set; the checks narrow them for mypy.
        assert entry.forecast is not None
        assert entry.high_c is not None
        city = asked[_key(entry.city)]
        rank = (_SUNSHINE[entry.forecast], entry.high_c, -request.cities.index(city))
        candidates.append((rank, city, entry.forecast, entry.high_c))
    _, city, forecast, high_c = max(candidates, key=lambda candidate: candidate[0])
    return BookerContext(
        traveller=request.traveller,
        destination=city,
        forecast=forecast,
        high_c=high_c,
        compared=tuple(request.cities),
    )


# --- the pipeline ----------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class HandoffAccepted:
    """The brief passed and the booker ran on it; ``booker`` says what was booked."""

    brief: WeatherBrief
    brief_sha256: str
    booking: BookerContext
    researcher: RunResult[TripRequest] = attrs.field(repr=False)
    booker: RunResult[BookerContext] = attrs.field(repr=False)


@final
@attrs.frozen(kw_only=True)
class HandoffRejected:
    """No valid brief, so the booker never ran: ``reason`` says why, ``diagnostics`` where."""

    reason: str
    diagnostics: tuple[Diagnostic, ...]
    researcher: RunResult[TripRequest] = attrs.field(repr=False)

    @property
    def paths(self) -> tuple[str, ...]:
        """The JSON paths of the errors, each once, in order."""
        errors = (item.path for item in self.diagnostics if item.severity == "error")
        return tuple(dict.fromkeys(errors))


Handoff: TypeAlias = HandoffAccepted | HandoffRejected
"""How :func:`plan_and_book` ended; ``match`` on both."""


def _observed(research: RunResult[TripRequest]) -> dict[str, Mapping[str, Any]]:
    """What ``get_weather`` returned in the run, by city (the last answer for each)."""
    found: dict[str, Mapping[str, Any]] = {}
    for state in research.states:
        if not isinstance(state, Observing) or state.call.name != "get_weather":
            continue
        args, output = state.call.args, cast("object", state.output)
        if isinstance(args, WeatherArgs) and isinstance(output, Mapping):
            found[_key(args.city)] = cast("Mapping[str, Any]", output)
    return found


def _unobserved(
    brief: WeatherBrief, observed: Mapping[str, Mapping[str, Any]]
) -> Iterable[Diagnostic]:
    """Diagnostics for every value of the brief that ``get_weather`` did not return."""
    for index, entry in enumerate(brief.cities):
        path = f"$.cities[{index}]"
        found = observed.get(_key(entry.city))
        if found is None:
            yield Diagnostic.for_rule(
                "observed",
                f"get_weather was not called for {entry.city} in this run",
                path=f"{path}.city",
                seen=entry.city,
                fixes=(f"call get_weather for {entry.city}",),
            )
        elif found.get("available") is not True:
            yield Diagnostic.for_rule(
                "observed",
                f"get_weather failed for {entry.city} in this run ({found.get('error')}), "
                "yet the brief reports its weather",
                path=f"{path}.available",
                seen=entry.available,
                fixes=("report only what get_weather returned",),
            )
        else:
            for field, value in (("forecast", entry.forecast), ("high_c", entry.high_c)):
                if value != found.get(field):
                    yield Diagnostic.for_rule(
                        "observed",
                        f"get_weather returned {found.get(field)} for {entry.city}, not {value}",
                        path=f"{path}.{field}",
                        seen=value,
                        fixes=("report only what get_weather returned",),
                    )


def _received(
    request: TripRequest, research: RunResult[TripRequest]
) -> tuple[WeatherBrief, str] | HandoffRejected:
    """The researcher's brief and its SHA-256 if it may be handed off, else why not."""

    def rejected(reason: str, diagnostics: Iterable[Diagnostic] = ()) -> HandoffRejected:
        return HandoffRejected(
            reason=f"handoff rejected before the booker ran: {reason}",
            diagnostics=tuple(diagnostics),
            researcher=research,
        )

    final = research.final
    match final:
        case Done():
            brief, sha256 = final.output, final.answer_sha256
            if not isinstance(brief, WeatherBrief):  # a researcher run without its guard
                checked = BRIEF_GUARD.check_text(final.answer, deps=request)
                if isinstance(checked, Invalid):
                    listed = "; ".join(f"{item.path}: {item.message}" for item in checked.errors)
                    return rejected(f"the answer is not a WeatherBrief: {listed}", checked.errors)
                brief, sha256 = checked.value, checked.sha256
            unobserved = tuple(_unobserved(brief, _observed(research)))
            if unobserved:
                listed = "; ".join(f"{item.path}: {item.message}" for item in unobserved)
                return rejected(f"the brief reports weather nobody observed: {listed}", unobserved)
            return brief, sha256
        case Failed():
            diagnostics: tuple[Diagnostic, ...] = ()
            if final.partial:
                checked = BRIEF_GUARD.check_text(final.partial, deps=request)
                if isinstance(checked, Invalid):
                    diagnostics = checked.diagnostics
            return rejected(f"the researcher gave no valid brief: {final.reason}", diagnostics)
        case _:
            return rejected(f"the researcher is waiting for a person: {final.loop.paused}")


async def plan_and_book(
    request: TripRequest,
    *,
    provider: FakeProvider,
    researcher_model: Model,
    booker_model: Model,
    gate: ApprovalGate,
    sleep: Sleep = anyio.sleep,
    seed: int | None = None,
    fallbacks: metrics.Counter | None = None,
) -> Handoff:
    """Research the three cities, then book the sunniest, only on a valid typed brief.

    The researcher runs first. If its answer is not a valid :class:`WeatherBrief`, or
    reports weather ``get_weather`` did not return in that run, the result is
    :class:`HandoffRejected` and the booker's model is never called. Otherwise the
    booker runs on a :class:`BookerContext` built by code from the brief, and every
    booking waits for ``gate``. ``sleep``, ``seed`` and ``fallbacks`` go to both
    runners (see :class:`~statemachine.Runner`).
    """
    researcher = Runner(
        researcher_agent(provider),
        model=researcher_model,
        gate=_NoWrites(),
        sleep=sleep,
        seed=seed,
        fallbacks=fallbacks,
        keep_states=True,  # the brief is checked against every weather lookup's output
    )
    question = f"Which of {_and(request.cities)} will be sunniest for {request.traveller}?"
    research = await researcher.run(request, question)
    received = _received(request, research)
    if isinstance(received, HandoffRejected):
        return received
    brief, sha256 = received
    booking = choose_destination(request, brief)
    booker = Runner(
        booker_agent(provider),
        model=booker_model,
        gate=gate,
        sleep=sleep,
        seed=seed,
        fallbacks=fallbacks,
        keep_states=True,  # the handoff's outcome holds both runs whole
    )
    order = f"Book a flight to {booking.destination} for {booking.traveller}."
    booked = await booker.run(booking, order)
    return HandoffAccepted(
        brief=brief,
        brief_sha256=sha256,
        booking=booking,
        researcher=research,
        booker=booked,
    )
