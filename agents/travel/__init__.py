"""The travel agent: weather look-ups (read) and flight and hotel bookings (write).

``python -m agents.travel`` replays the three failures of a ``while True`` agent
(prompt flip, flaky API, budget) and shows each one handled by the typed phases.
"""

from ._agent import (
    BookingArgs,
    Charge,
    FakeProvider,
    FlightArgs,
    HotelArgs,
    TripContext,
    TripPlanning,
    WeatherArgs,
    travel_agent,
)
from ._scenarios import (
    Outcome,
    budget_stops_before_spending,
    flaky_weather,
    prompt_flip,
    weather_down,
)

__all__ = (
    "BookingArgs",
    "Charge",
    "FakeProvider",
    "FlightArgs",
    "HotelArgs",
    "Outcome",
    "TripContext",
    "TripPlanning",
    "WeatherArgs",
    "budget_stops_before_spending",
    "flaky_weather",
    "prompt_flip",
    "travel_agent",
    "weather_down",
)
