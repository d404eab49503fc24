"""Helpers and argument models shared by the test modules."""

from __future__ import annotations

import re

from pydantic import BaseModel

from statemachine import Money


def exactly(message: str) -> str:
    """A ``pytest.raises(match=...)`` pattern that matches ``message`` and nothing else."""
    return "^" + re.escape(message) + "$"


class CityArgs(BaseModel):
    """Arguments of a weather-like read tool."""

    city: str


class FlightArgs(BaseModel):
    """Arguments of a booking-like write tool."""

    flight: str
    price: Money
