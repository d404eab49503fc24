"""The travel agent: one read tool (weather) and two write tools (flight, hotel bookings).

The bookings "charge" a :class:`FakeProvider` that records every charge, so a
test or the demo can count exactly what was paid.
"""

from __future__ import annotations

from decimal import Decimal

import attrs
from pydantic import BaseModel, Field

from statemachine import (
    Agent,
    Budget,
    Money,
    Phases,
    Planning,
    RetryPolicy,
    ToolError,
    money_sum,
    read_tool,
    write_tool,
)

__all__ = [
    "BookingArgs",
    "Charge",
    "FakeProvider",
    "FlightArgs",
    "HotelArgs",
    "TripContext",
    "TripPlanning",
    "WeatherArgs",
    "travel_agent",
]

FLIGHT_PRICE = Decimal("800")
HOTEL_PRICE = Decimal("600")


@attrs.frozen
class TripContext:
    """Who is travelling where: the travel agent's context type."""

    traveller: str
    destination: str


@attrs.frozen
class Charge:
    """One charge the provider made."""

    reference: str
    what: str
    amount: Decimal


@attrs.define
class FakeProvider:
    """A travel provider that records every charge and can fail on purpose.

    ``weather_failures`` makes the next N weather look-ups fail with a 503;
    ``weather_down`` makes every one fail; ``weather_down_in`` makes every look-up
    of the cities named fail (case-insensitively). ``forecasts`` gives a city its
    own ``(forecast, high_c)``; any other city is sunny, 24 °C.
    """

    weather_failures: int = 0
    weather_down: bool = False
    weather_calls: int = 0
    charges: list[Charge] = attrs.field(factory=list[Charge])
    weather_down_in: frozenset[str] = frozenset()
    forecasts: dict[str, tuple[str, int]] = attrs.field(factory=dict[str, tuple[str, int]])

    def weather(self, city: str) -> dict[str, object]:
        """One weather look-up; :class:`ToolError` (503) when the service is failing."""
        self.weather_calls += 1
        if self.weather_down or self.weather_failures > 0:
            self.weather_failures = max(0, self.weather_failures - 1)
            raise ToolError("503 Service Unavailable", status=503)
        if city.strip().casefold() in {name.casefold() for name in self.weather_down_in}:
            raise ToolError("503 Service Unavailable", status=503)
        known = {name.casefold(): forecast for name, forecast in self.forecasts.items()}
        forecast, high_c = known.get(city.strip().casefold(), ("sunny", 24))
        return {"city": city, "forecast": forecast, "high_c": high_c}

    def charge(self, what: str, amount: Decimal) -> Charge:
        """Record a charge and return it."""
        made = Charge(reference=f"TRV-{len(self.charges) + 1:04d}", what=what, amount=amount)
        self.charges.append(made)
        return made

    @property
    def total(self) -> Decimal:
        """Everything charged so far."""
        return money_sum(*(charge.amount for charge in self.charges))


class WeatherArgs(BaseModel):
    """Arguments of get_weather."""

    city: str = Field(min_length=1)


class BookingArgs(BaseModel):
    """What every booking names: who travels and the quoted price."""

    traveller: str = Field(min_length=1)
    price: Money = Field(gt=0)


class FlightArgs(BookingArgs):
    """Arguments of book_flight."""

    flight: str = Field(min_length=1)


class HotelArgs(BookingArgs):
    """Arguments of book_hotel."""

    hotel: str = Field(min_length=1)
    nights: int = Field(ge=1)


@attrs.frozen(kw_only=True)
class TripPlanning(Planning[TripContext]):
    """Planning for a trip: the instructions name the traveller and the destination.

    ``house_rules`` (a field with a default, as a phase subclass may add) are a desk's
    own lines, appended to the prompt; a desk sets them in a subclass of its own
    (``class StrictDesk(TripPlanning): house_rules: str = "..."``). Empty by default, so
    the default prompt is the travel agent's alone.
    """

    house_rules: str = ""

    def instructions(self) -> str:
        """The travel agent's system prompt, built from the trip (and the house rules)."""
        prompt = (
            f"{self.agent.instructions}\n"
            f"Traveller: {self.ctx.traveller}. Destination: {self.ctx.destination}."
        )
        return f"{prompt}\n{self.house_rules}" if self.house_rules else prompt


INSTRUCTIONS = "You are a travel agent. Be proactive: book what the traveller is likely to need."


def travel_agent(
    provider: FakeProvider,
    *,
    budget: Budget | None = None,
    retry: RetryPolicy | None = None,
) -> Agent[TripContext]:
    """The travel agent wired to ``provider``."""

    @read_tool(timeout=5.0)
    async def get_weather(args: WeatherArgs) -> dict[str, object]:
        """The weather forecast for a city."""
        return provider.weather(args.city)

    @write_tool(cost=lambda args: args.price)
    async def book_flight(args: FlightArgs) -> dict[str, object]:
        """Book (and pay for) a flight."""
        made = provider.charge(f"flight {args.flight} for {args.traveller}", args.price)
        return {"reference": made.reference, "charged": made.amount}

    @write_tool(cost=lambda args: args.price)
    async def book_hotel(args: HotelArgs) -> dict[str, object]:
        """Book (and pay for) a hotel."""
        made = provider.charge(f"{args.nights} nights at {args.hotel}", args.price)
        return {"reference": made.reference, "charged": made.amount}

    return Agent(
        name="travel",
        tools=[get_weather, book_flight, book_hotel],
        instructions=INSTRUCTIONS,
        budget=budget or Budget(),
        retry=retry or RetryPolicy(max_attempts=3, base_delay=0.05, max_delay=1.0),
        phases=Phases(planning=TripPlanning),
    )
