"""Span, log and metric capture for tests: :func:`statemachine.testing.capture`.

Apart from ``_observe``, so that ``import statemachine`` does not build these classes;
``statemachine.testing`` imports this module.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, final

import attrs

from ._errors import SetupError

if TYPE_CHECKING:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, Span

__all__ = ["Capture", "CapturedSpan", "MetricPoint", "capture"]


@final
@attrs.frozen(kw_only=True)
class CapturedSpan:
    """A finished span: its name, attributes, its parent's name, and its error if it failed."""

    name: str
    attributes: Mapping[str, Any]
    parent: str | None
    error: str | None = None


@final
@attrs.frozen(kw_only=True)
class MetricPoint:
    """One data point of an instrument: its attributes and value so far.

    For a histogram ``value`` is the sum of what was recorded and ``count`` how many
    values were; for a counter ``count`` is ``None``.
    """

    attributes: Mapping[str, Any]
    value: int | float
    count: int | None = None


@final
class Capture:
    """What happened inside :func:`capture`: spans, structlog events and metrics.

    Pass ``tracer`` and ``meter`` to the runner under test
    (``Runner(..., tracer=seen.tracer, meter=seen.meter)``); no global provider is
    touched. ``events`` are the structlog event dicts, in order.
    """

    __slots__ = ("_names", "_reader", "_started", "events", "meter", "tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        meter: metrics.Meter,
        reader: InMemoryMetricReader,
        started: list[Span],
        events: list[MutableMapping[str, Any]],
    ) -> None:
        self.tracer = tracer
        self.meter = meter
        self.events = events
        self._reader = reader
        self._started = started
        self._names: dict[int, str] = {}

    @property
    def spans(self) -> list[CapturedSpan]:
        """The spans that have ended, in the order they started."""
        ended: list[ReadableSpan] = [span for span in self._started if span.end_time is not None]
        names = {span.context.span_id: span.name for span in self._started if span.context}
        out: list[CapturedSpan] = []
        for span in ended:
            parent = None if span.parent is None else names.get(span.parent.span_id, "?")
            error = None
            if not span.status.is_ok:
                error = span.status.description or "error"
            out.append(
                CapturedSpan(
                    name=span.name,
                    attributes=dict(span.attributes or {}),
                    parent=parent,
                    error=error,
                )
            )
        return out

    @property
    def metrics(self) -> dict[str, tuple[MetricPoint, ...]]:
        """Every instrument recorded to so far, by name, with its points (cumulative)."""
        from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint

        found: dict[str, list[MetricPoint]] = {}
        data = self._reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = found.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        attributes = dict(point.attributes or {})
                        if isinstance(point, HistogramDataPoint):
                            points.append(
                                MetricPoint(
                                    attributes=attributes, value=point.sum, count=point.count
                                )
                            )
                        elif isinstance(point, NumberDataPoint):
                            points.append(MetricPoint(attributes=attributes, value=point.value))
        return {name: tuple(points) for name, points in found.items()}

    def total(self, name: str, where: Mapping[str, Any] | None = None) -> int | float:
        """The sum of instrument ``name``'s values over the points whose attributes match ``where``.

        For a histogram that is the sum of the values recorded. An instrument nothing
        was recorded to totals ``0``.
        """
        wanted = dict(where or {})
        return sum(
            point.value
            for point in self.metrics.get(name, ())
            if all(point.attributes.get(key) == value for key, value in wanted.items())
        )


@contextmanager
def capture() -> Generator[Capture, None, None]:
    """Capture the spans, structlog events and metrics of the code inside the block.

    ``with capture() as seen:`` gives a tracer and a meter (``seen.tracer``,
    ``seen.meter``) to pass to the runner under test; read ``seen.spans``,
    ``seen.events`` and ``seen.metrics`` (or ``seen.total(name, where)``). Nothing
    global in OpenTelemetry is set, so it can be used any number of times in one
    process; structlog's configuration is changed for the block (every event is kept,
    whatever level was configured) and restored after it. Needs ``opentelemetry-sdk``
    (a development dependency: ``pip install opentelemetry-sdk``).
    """
    import structlog
    from structlog.testing import capture_logs

    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    except ImportError as error:
        raise SetupError(
            f"statemachine.testing.capture() needs opentelemetry-sdk, which is not installed "
            f"({error}); install it: pip install opentelemetry-sdk"
        ) from error

    started: list[Span] = []

    class _Recorder(SpanProcessor):
        # Kept at start, so that ``spans`` can list them in the order they started.
        def on_start(self, span: Span, parent_context: Any = None) -> None:
            started.append(span)

    # Not shut down at exit: nothing is buffered, and each capture would add an atexit hook.
    tracer_provider = TracerProvider(shutdown_on_exit=False)
    tracer_provider.add_span_processor(_Recorder())
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    previous_wrapper = structlog.get_config()["wrapper_class"]
    try:
        # Every level reaches the capture, whatever configure_logging() filtered.
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.NOTSET))
        with capture_logs() as events:
            yield Capture(
                tracer_provider.get_tracer("statemachine"),
                meter_provider.get_meter("statemachine"),
                reader,
                started,
                events,
            )
    finally:
        structlog.configure(wrapper_class=previous_wrapper)
