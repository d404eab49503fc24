"""Metrics, logging set-up, a terminal progress line, and span/log/metric capture for tests.

The library uses the OpenTelemetry *API* only: instruments are created on the meter
the runner is given (default: the global meter provider's), and nothing is recorded
anywhere until the application installs an SDK. The instruments (attribute names all
start with ``statemachine.``):

- ``statemachine.transitions`` (counter): ``agent``, ``from``, ``to``
- ``statemachine.retries`` (counter): ``agent``, ``tool``
- ``statemachine.suppressions`` (counter): ``agent``, ``tier``
- ``statemachine.validation.fallbacks`` (counter): ``schema``, ``stop``
- ``statemachine.approvals.waiting`` (up-down counter): ``agent``, ``tool``
- ``statemachine.phase.duration`` (histogram, seconds): ``agent``, ``phase``
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import sys
from collections.abc import Generator, Mapping, MutableMapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO, final

import attrs
from opentelemetry import metrics, trace

from ._errors import SetupError
from ._governor import Verdict
from ._guard import FALLBACK_COUNTER
from ._json import dumps
from ._phases import AwaitApproval, Done, Failed, Phase, Planning, Retrying, ToolCalling

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, Span

__all__ = [
    "APPROVALS_WAITING",
    "PHASE_DURATION",
    "RETRIES",
    "SUPPRESSIONS",
    "TRANSITIONS",
    "Capture",
    "CapturedSpan",
    "Instruments",
    "MetricPoint",
    "ProgressLine",
    "capture",
    "configure_logging",
    "default_instruments",
]

TRANSITIONS = "statemachine.transitions"
RETRIES = "statemachine.retries"
SUPPRESSIONS = "statemachine.suppressions"
APPROVALS_WAITING = "statemachine.approvals.waiting"
PHASE_DURATION = "statemachine.phase.duration"

_AGENT = "statemachine.agent"


# --- metrics ----------------------------------------------------------------------------


@final
class Instruments:
    """The runner's instruments, created once per runner on one meter.

    ``transition`` is called once per transition, ``failed`` when a phase raises.
    """

    __slots__ = ("fallbacks", "phase_time", "retries", "suppressions", "transitions", "waiting")

    def __init__(self, meter: metrics.Meter) -> None:
        self.transitions = meter.create_counter(
            TRANSITIONS, unit="1", description="transitions from one phase to the next"
        )
        self.retries = meter.create_counter(
            RETRIES, unit="1", description="failed tool calls tried again (Retrying -> ToolCalling)"
        )
        self.suppressions = meter.create_counter(
            SUPPRESSIONS, unit="1", description="actions the governor suppressed, by tier"
        )
        self.fallbacks = meter.create_counter(
            FALLBACK_COUNTER,
            unit="1",
            description="validation loops that ended without a valid reply",
        )
        self.waiting = meter.create_up_down_counter(
            APPROVALS_WAITING, unit="1", description="runs waiting for a person's approval"
        )
        self.phase_time = meter.create_histogram(
            PHASE_DURATION, unit="s", description="time a phase took to advance"
        )

    def transition(self, before: Phase[Any], after: Phase[Any], seconds: float) -> None:
        """Record one transition that took ``seconds`` in ``before``."""
        agent = before.agent.name
        self.phase_time.record(seconds, {_AGENT: agent, "statemachine.phase": before.kind})
        self.transitions.add(
            1, {_AGENT: agent, "statemachine.from": before.kind, "statemachine.to": after.kind}
        )
        if isinstance(before, Retrying) and isinstance(after, ToolCalling):
            self.retries.add(1, {_AGENT: agent, "statemachine.tool": before.call.name})
        # The governor's memory only grows: what this transition added is the tail (none
        # when the new phase carries the very same memory).
        if after.loop is not before.loop:
            for record in after.loop.verdicts[len(before.loop.verdicts) :]:
                if record.verdict is Verdict.SUPPRESS:
                    self.suppressions.add(1, {_AGENT: agent, "statemachine.tier": record.check})
        if isinstance(before, AwaitApproval) and before.waiting:
            self.waiting.add(-1, {_AGENT: agent, "statemachine.tool": before.call.name})
        if isinstance(after, AwaitApproval) and after.waiting:
            self.waiting.add(1, {_AGENT: agent, "statemachine.tool": after.call.name})

    def failed(self, before: Phase[Any], seconds: float) -> None:
        """Record the time a phase spent before it raised."""
        self.phase_time.record(
            seconds, {_AGENT: before.agent.name, "statemachine.phase": before.kind}
        )


@functools.cache
def default_instruments() -> Instruments:
    """The instruments on the global meter provider's meter, created once per process.

    Shared by every runner given no meter: before an SDK is installed, each instrument
    created on the global provider is a proxy it keeps forever, so one set per runner
    would grow without end.
    """
    return Instruments(metrics.get_meter("statemachine"))


# --- logging ----------------------------------------------------------------------------


class _Handler(logging.StreamHandler[TextIO]):
    """The handler configure_logging puts on the ``statemachine`` logger (found and replaced)."""


def _json_dumps(event: Any, **_: Any) -> str:
    """One event as JSON, amounts as exact numbers; anything else unusual as its ``str``."""
    try:
        return dumps(event)
    except (TypeError, ValueError):
        return json.dumps(event, default=str)


def configure_logging(
    *, json: bool, stream: TextIO | None = None, level: int = logging.INFO
) -> None:
    """Print structlog events, the library's included: JSON lines, or readable console lines.

    ``json=True`` is for production (one JSON object per line, with a UTC timestamp,
    amounts as exact numbers); ``json=False`` is readable text for a terminal (the
    demos use it). Events below ``level`` are dropped before they are rendered.
    Output goes to ``stream`` (default: standard error). This configures structlog
    globally and gives the standard library's ``statemachine`` logger its own handler
    (replaced, not added, when called again) that does not pass records on to the
    root logger.
    """
    import structlog  # here: structlog imports asyncio

    out = sys.stderr if stream is None else stream
    renderer: Any
    if json:
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        # Machines read the full UTC time; a person at a terminal needs only the clock.
        structlog.processors.TimeStamper(fmt="iso" if json else "%H:%M:%S", utc=json),
    ]
    if json:
        processors.append(structlog.processors.format_exc_info)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(out),
        # No caching: a logger must see a later configuration (and testing.capture()).
        cache_logger_on_first_use=False,
    )
    # The runner logs through the standard library's "statemachine" logger; structlog
    # has already rendered each line, so the handler prints the message as it is.
    library = logging.getLogger("statemachine")
    for old in [h for h in library.handlers if isinstance(h, _Handler)]:
        library.removeHandler(old)
    handler = _Handler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    library.addHandler(handler)
    library.setLevel(level)
    library.propagate = False


# --- progress line ----------------------------------------------------------------------


@final
class ProgressLine:
    """An ``on_transition`` callback that shows a run's current phase on one terminal line.

    After every transition the line is rewritten in place (a carriage return, no
    new line); it is erased when the run ends or waits for a person, and by
    ``clear()`` or leaving a ``with`` block. When ``stream`` (default: standard
    output) is not a terminal it writes nothing at all, so piped output and logs
    stay clean.
    """

    __slots__ = ("_label", "_live", "_stream", "_width")

    def __init__(self, stream: TextIO | None = None, *, label: str = "") -> None:
        self._stream = sys.stdout if stream is None else stream
        self._live = self._stream.isatty()
        self._label = label
        self._width = 0

    def __call__(self, before: Phase[Any], after: Phase[Any]) -> None:
        """Show ``after`` as the current phase, or erase the line if the run stopped there."""
        if not self._live:
            return
        if isinstance(after, Done | Failed) or _waits(after):
            self.clear()
            return
        call = getattr(after, "call", None)
        doing = f" {call.name}" if call is not None else ""
        text = f"{self._label}step {after.step}: {after.kind}{doing}"
        text = text[: max(shutil.get_terminal_size().columns - 1, 1)]
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        """Erase the line (the cursor goes back to its start)."""
        if self._live and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.clear()


def _waits(state: Phase[Any]) -> bool:
    return (isinstance(state, Planning) and bool(state.loop.paused)) or (
        isinstance(state, AwaitApproval) and bool(state.waiting)
    )


# --- capture for tests ------------------------------------------------------------------


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
