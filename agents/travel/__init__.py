"""The travel agent: weather look-ups (read) and flight and hotel bookings (write).

``python -m agents.travel`` replays the three failures of a ``while True`` agent
(prompt flip, flaky API, budget) and shows each one handled by the typed phases,
then the researcher -> booker handoff (:func:`plan_and_book`): a typed
:class:`WeatherBrief`, never text, refused before the booker runs when it is not valid.
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
from ._handoff import (
    BRIEF_GUARD,
    BookerContext,
    CityWeather,
    Handoff,
    HandoffAccepted,
    HandoffRejected,
    TripRequest,
    WeatherBrief,
    booker_agent,
    choose_destination,
    plan_and_book,
    researcher_agent,
)
from ._scenarios import (
    HandoffOutcome,
    Outcome,
    budget_stops_before_spending,
    flaky_weather,
    handoff,
    prompt_flip,
    weather_down,
)

__all__ = (
    "BRIEF_GUARD",
    "BookerContext",
    "BookingArgs",
    "Charge",
    "CityWeather",
    "FakeProvider",
    "FlightArgs",
    "Handoff",
    "HandoffAccepted",
    "HandoffOutcome",
    "HandoffRejected",
    "HotelArgs",
    "Outcome",
    "TripContext",
    "TripPlanning",
    "TripRequest",
    "WeatherArgs",
    "WeatherBrief",
    "booker_agent",
    "budget_stops_before_spending",
    "choose_destination",
    "flaky_weather",
    "handoff",
    "plan_and_book",
    "prompt_flip",
    "researcher_agent",
    "travel_agent",
    "weather_down",
)
