"""Helpers and argument models shared by the test modules."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import BaseModel

from statemachine import Money, RunRecord, SQLiteCheckpointer


def _source_of(name: str) -> ModuleType:
    """The package's module ``name`` run from its ``.py`` file under the name ``name +
    "_source"``, even where an extension built from that file (mypyc's, see setup.py) is
    what ``import`` finds: the reference the compiled module is checked against, and the
    class whose methods a test may replace (a compiled class calls its own)."""
    path = Path(__file__).resolve().parent.parent / "statemachine" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"statemachine.{name}_source", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# statemachine/_grams.py as Python source (statemachine._grams may be its compiled form).
PURE_GRAMS = _source_of("_grams")


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


def fallbacks() -> tuple[Any, InMemoryMetricReader]:
    """A fallback counter on a private meter provider, and the reader that sees it."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("statemachine")
    return meter.create_counter("statemachine.validation.fallbacks"), reader


def counted(reader: InMemoryMetricReader) -> list[tuple[int, dict[str, Any]]]:
    """(value, attributes) of every fallback counter point the reader collected."""
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [
        (point.value, dict(point.attributes or {}))
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "statemachine.validation.fallbacks"
        for point in metric.data.data_points  # type: ignore[union-attr]
    ]


class FakeClock:
    """A monotonic clock that moves only when a test (or a fake model) advances it."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingSleep:
    """A sleep that records the delays asked for instead of waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def written_or_error(write: Any, value: Any) -> tuple[str, str]:
    """``("text", write(value))``, or the error's type name and message: two writers are
    compared on what they write and on how they refuse, whichever way a value goes."""
    try:
        return "text", write(value)
    except Exception as error:
        return type(error).__name__, str(error)


def one_statement_saves(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A list that gets, for each SQLite save that tries the one statement (``_save_next``,
    spied on for the test), whether that statement made it (the file refused none)."""
    made_by: list[bool] = []
    plain: Any = SQLiteCheckpointer._save_next  # pyright: ignore[reportPrivateUsage]

    def counted(self: SQLiteCheckpointer, *args: Any) -> Any:
        made = plain(self, *args)
        made_by.append(type(made) is RunRecord)
        return made

    monkeypatch.setattr(SQLiteCheckpointer, "_save_next", counted)
    return made_by
