"""Metrics, logging set-up and a terminal progress line (capture for tests: ``_capture``);
what a runner's transitions are told to (``_Told``: the span, the instruments and the
log event, each skipped as a whole when nothing takes it) and the keys they say.

The library uses the OpenTelemetry *API* only: instruments are created on the meter
the runner is given (default: the global meter provider's), and nothing is recorded
anywhere until the application installs an SDK. The instruments (attribute names all
start with ``statemachine.``):

- ``statemachine.transitions`` (counter): ``agent``, ``from``, ``to``
- ``statemachine.retries`` (counter): ``agent``, ``tool``
- ``statemachine.suppressions`` (counter): ``agent``, ``tier``
- ``statemachine.validation.fallbacks`` (counter): ``schema``, ``stop``
- ``statemachine.approvals.waiting`` (gauge): ``agent``, ``tool``: the runs waiting for a
  person's approval. With a checkpointer it is read from the store (at the end of
  every drive, and by a worker when it is idle), so it counts every process's runs
  once and falls when a run is aborted or decided anywhere; without one, it counts
  this process's runs as they begin and stop waiting.
- ``statemachine.phase.duration`` (histogram, seconds): ``agent``, ``phase``
"""

from __future__ import annotations

import functools
import json
import sys
import types
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO, final

from ._events import RunFinished, TextDelta, TransitionEvent
from ._governor import Verdict
from ._guard import FALLBACK_COUNTER
from ._json import dumps
from ._phases import (
    Active,
    AwaitApproval,
    Done,
    Failed,
    ModelRetrying,
    Phase,
    Retrying,
    ToolCalling,
)

if TYPE_CHECKING:
    import logging

    from opentelemetry import metrics, trace
    from opentelemetry.context import Context

    from ._runtime import Runtime

__all__ = [
    "APPROVALS_WAITING",
    "PHASE_DURATION",
    "RETRIES",
    "SUPPRESSIONS",
    "TRANSITIONS",
    "Instruments",
    "ProgressLine",
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

    __slots__ = (
        "_meter",
        "_waiting",
        "fallbacks",
        "phase_time",
        "retries",
        "suppressions",
        "transitions",
        "waiting",
    )

    def __init__(self, meter: metrics.Meter) -> None:
        self._meter = meter
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
        # The runs waiting, by where they were counted (a store, or None: this process's
        # own runs without one) and by (agent, tool); a key once seen stays, at 0.
        self._waiting: dict[str | None, Counter[tuple[str, str]]] = {}
        self.waiting = meter.create_observable_gauge(
            APPROVALS_WAITING,
            callbacks=[self._observe_waiting],
            unit="1",
            description="runs waiting for a person's approval",
        )
        self.phase_time = meter.create_histogram(
            PHASE_DURATION, unit="s", description="time a phase took to advance"
        )

    def transition(
        self, before: Phase[Any], after: Phase[Any], seconds: float, *, count_waits: bool = True
    ) -> None:
        """Record one transition that took ``seconds`` in ``before``.

        ``count_waits``: the approvals waiting are counted here (a runner without a
        store); with one they are read from it (:meth:`waiting_in`).
        """
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
        if count_waits:
            self.waits(before, after)

    def waits(self, before: Phase[Any], after: Phase[Any]) -> None:
        """Count the approvals waiting that one transition began or ended (a runner
        without a store), as :meth:`transition` does: the gauge reads the count whenever
        a meter provider collects, so it is kept while nothing is recorded too."""
        if isinstance(before, AwaitApproval) and before.waiting:
            self._wait(None, before.agent.name, before.call.name, -1)
        if isinstance(after, AwaitApproval) and after.waiting:
            self._wait(None, before.agent.name, after.call.name, 1)

    def quiet(self) -> bool:
        """Whether what :meth:`transition` records goes nowhere now: the instruments were
        made on OpenTelemetry's no-op meter, or on the global meter while no meter
        provider is set (its instruments are proxies that drop every measurement until
        one is). A runner reads it once per run: a provider set during a run is recorded
        to from its next run.
        """
        from opentelemetry import metrics

        meter = self._meter
        if isinstance(meter, metrics.NoOpMeter):
            return True
        # The API's proxies are private classes: read by name, and any other meter (a
        # later API's proxy included) is taken as one that records.
        return _named(meter, "_ProxyMeter") and _named(
            metrics.get_meter_provider(), "_ProxyMeterProvider"
        )

    def _wait(self, source: str | None, agent: str, tool: str, change: int) -> None:
        counts = self._waiting.setdefault(source, Counter())
        counts[agent, tool] = max(0, counts[agent, tool] + change)

    def waiting_in(self, source: str, waiting: Mapping[tuple[str, str], int]) -> None:
        """The runs waiting for an approval in the store ``source`` names, by (agent, tool),
        as just read from it: they replace what was read from it before."""
        before = self._waiting.get(source, Counter())
        self._waiting[source] = Counter(
            {key: waiting.get(key, 0) for key in before.keys() | waiting.keys()}
        )

    def _observe_waiting(self, options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation

        total: Counter[tuple[str, str]] = Counter()
        keys: set[tuple[str, str]] = set()
        for counts in list(self._waiting.values()):
            total.update(counts)
            keys.update(counts)
        return [
            Observation(total[key], {_AGENT: key[0], "statemachine.tool": key[1]})
            for key in sorted(keys)
        ]

    def failed(self, before: Phase[Any], seconds: float) -> None:
        """Record the time a phase spent before it raised."""
        self.phase_time.record(
            seconds, {_AGENT: before.agent.name, "statemachine.phase": before.kind}
        )


def _named(thing: object, name: str) -> bool:
    """Whether ``thing`` is of OpenTelemetry's metrics API class ``name``."""
    kind = type(thing)
    return kind.__name__ == name and kind.__module__.startswith("opentelemetry.metrics")


@functools.cache
def default_instruments() -> Instruments:
    """The instruments on the global meter provider's meter, created once per process.

    Shared by every runner given no meter: before an SDK is installed, each instrument
    created on the global provider is a proxy it keeps forever, so one set per runner
    would grow without end. opentelemetry is imported here, on first use, not by
    ``import statemachine``.
    """
    from opentelemetry import metrics

    return Instruments(metrics.get_meter("statemachine"))


# --- what a runner's transition is told to ---------------------------------------------


@final
class _Told:
    """Who hears of one drive's transitions, found out once at its start.

    ``untraced``: the run's span when the runner's tracer is OpenTelemetry's no-op one (a
    ``NoOpTracer``, or the global tracer while no provider is set): that tracer's span
    for each transition is the run's span itself, a span that records nothing, so it is
    not asked for one (a provider set while a run goes on is used from the next run).
    ``None``: each transition asks the tracer for its span. ``metered``: whether the
    runner's instruments record anything (``Instruments.quiet``); when not, a transition
    only counts the approvals waiting that the gauge reads.
    """

    __slots__ = (
        "_capture",
        "_in",
        "_levels",
        "_logger",
        "_out",
        "_plain",
        "_processors",
        "attaching",
        "current",
        "metered",
        "seen",
        "untraced",
    )

    def __init__(self, tracer: trace.Tracer, run_span: trace.Span, meter: Instruments) -> None:
        import logging

        from opentelemetry import trace

        # The standard library's logger the runner's events end at.
        self._logger = logging.getLogger("statemachine")
        quiet = type(tracer) is trace.NoOpTracer or (
            type(tracer) is trace.ProxyTracer
            and type(trace.get_tracer_provider()) is trace.ProxyTracerProvider
        )
        self.untraced = run_span if quiet else None
        self.metered = not meter.quiet()
        # LogCapture is defined in structlog.testing (which structlog imports): not
        # imported, nothing captures. The processors are the list the run's logger was
        # bound with (capture_logs changes that very list in place).
        testing = sys.modules.get("structlog.testing")
        self._capture: type[Any] | None = None if testing is None else testing.LogCapture
        self._processors: list[Any] = sys.modules["structlog"].get_config()["processors"]
        # What the runner's loop reads in place of the two questions (``_levels_of``,
        # ``_plain_of``), found out once per drive.
        self._levels = _levels_of(self._logger)
        processors = self._processors
        self._plain = (
            None
            if self._capture is None or type(processors) is not list or not processors
            else _plain_of(type(processors[-1]), self._capture)
        )
        # The last context ``within`` was asked about, and the one it made from it.
        self._out: Context | None = None
        self._in: Context | None = None
        self.current = _current_context_reader()
        # The current context ``see`` was last given, and what a transition attaches then.
        self.seen: object = None
        self.attaching: Context | None = None

    def within(self, current: Context) -> Context:
        """``set_span_in_context(self.untraced, current)``: the context to attach for one
        transition, made from ``current``. A context is not changed once made (a new one
        is made for each change), so the one made from the very same ``current`` object
        as the last time is given again: a run whose current context stays the same
        between transitions makes one, not one (a dict and its copy) per transition.
        """
        made = self._in
        if made is None or current is not self._out:
            from opentelemetry import trace

            span = self.untraced
            if span is None:
                raise TypeError("within() is for untraced runs")
            made = trace.set_span_in_context(span, current)
            self._in, self._out = made, current
        return made

    def see(self, current: Context) -> None:
        """Note what a transition attaches while ``current`` is the current context:
        nothing when the run's span is current in it already (the no-op tracer gives back
        that very span), else ``within(current)``. ``attaching`` holds the answer and
        ``seen`` the context it is for: a context is not changed once made, so the answer
        for the very same object is the same, and the runner asks again only for another.
        """
        from opentelemetry import trace

        self.attaching = (
            None if self.untraced is trace.get_current_span(current) else self.within(current)
        )
        self.seen = current

    def events_wanted(self) -> bool:
        """Whether a transition's log event goes anywhere, checked before it is built.

        The event ends at the standard library's ``statemachine`` logger, so it is wanted
        when that logger takes INFO (``configure_logging`` sets it; so does a root logger
        at INFO), or while structlog captures events (``structlog.testing.capture_logs``,
        ``statemachine.testing.capture``). Otherwise structlog's processors would render
        a line per transition only for the logger to drop it.

        The runner's own loop (``Runner._steps``) asks the same in its frame, reading the
        logger's cached answer (``_levels``) and the last processor's class (``_plain``) in
        place: a change here is a change there (tests/test_fast_runner4.py,
        tests/test_fast_runner5.py).
        """
        if self._logger.isEnabledFor(_INFO):
            return True
        processors = self._processors
        return (
            self._capture is not None
            and bool(processors)
            and (isinstance(processors[-1], self._capture))
        )


def _levels_of(logger: object) -> dict[int, object]:
    """The dict ``logging.Logger.isEnabledFor`` answers from (the logger's ``_cache``, its
    answer by level), for a logger exactly of ``logging.Logger`` whose class holds the
    standard library's ``isEnabledFor`` and which has none of its own; for any other, a
    new empty dict, where no answer is ever found. Asked once per drive, as
    ``Runner._own_advance`` is.

    The loop reads the INFO answer there: exactly ``False`` is ``isEnabledFor``'s answer
    too (it answers ``False`` for a disabled logger as well, so ``disabled`` need not be
    read), and anything else (``True``, or no answer yet) asks ``isEnabledFor``. The
    standard library clears every logger's cache in place (the very dict) when a level
    changes (``setLevel``, ``logging.disable``), so a change made during a run is read at
    the next transition, as ``isEnabledFor`` reads it.
    """
    import logging

    kind = logging.Logger
    own: object = getattr(logger, "__dict__", None) if type(logger) is kind else None
    asks = vars(kind).get("isEnabledFor")
    code = asks.__code__ if type(asks) is types.FunctionType else None
    if (
        type(own) is not dict
        or "isEnabledFor" in own
        or code is None
        or code.co_name != "isEnabledFor"
        or not code.co_filename.replace("\\", "/").endswith("logging/__init__.py")
        or any("isEnabledFor" in vars(base) or "_cache" in vars(base) for base in kind.__mro__[1:])
        or "_cache" in vars(kind)
    ):
        return {}
    cache = own.get("_cache")
    return cache if type(cache) is dict else {}


def _plain_of(kind: type[Any], capture: type[Any]) -> type[Any] | None:
    """``kind``, when ``isinstance(obj, capture)`` is ``False`` for every object of exactly
    that class; else ``None``. So it is when ``capture``'s metaclass is ``type`` itself (no
    ``__instancecheck__`` of its own), ``kind`` is not a subclass of it, and an object of
    ``kind`` answers ``__class__`` with its own class (what ``isinstance`` asks when the
    type does not match): no class in ``kind``'s MRO but ``object`` names ``__class__``
    or ``__getattribute__``. Asked once per drive: the loop asks ``isinstance`` only of a
    last processor of another class."""
    if (
        type(capture) is not type
        or type(kind) is not type
        or issubclass(kind, capture)
        or any(
            "__class__" in vars(base) or "__getattribute__" in vars(base)
            for base in kind.__mro__
            if base is not object
        )
    ):
        return None
    return kind


def _current_context_reader() -> Callable[[], Context]:
    """What reads OpenTelemetry's current context: its default runtime context's own
    ``ContextVar.get`` (in C), which is what ``opentelemetry.context.get_current`` calls
    through two Python functions; ``get_current`` itself for any other runtime context
    (``OTEL_PYTHON_CONTEXT``) or one whose ``get_current`` was replaced."""
    from opentelemetry import context
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime: object = getattr(context, "_RUNTIME_CONTEXT", None)
    if (
        type(runtime) is ContextVarsRuntimeContext
        and "get_current" not in vars(runtime)
        and _shipped(ContextVarsRuntimeContext.get_current, "contextvars_context.py")
        and _shipped(context.get_current, "__init__.py")
    ):
        reader: Callable[[], Context] = runtime._current_context.get
        return reader
    return context.get_current


def _shipped(function: object, file: str) -> bool:
    """Whether ``function`` is OpenTelemetry's ``get_current`` as its package defines it
    in ``file`` (not one put in its place)."""
    code = getattr(function, "__code__", None)
    return (
        code is not None
        and code.co_name == "get_current"
        and code.co_filename.replace("\\", "/").endswith("opentelemetry/context/" + file)
    )


def transition_keys(rt: Runtime, before: Phase[Any], after: Phase[Any]) -> dict[str, Any]:
    """What a span and a log event say about one transition (plain values only)."""
    keys: dict[str, Any] = {
        "run_id": rt.run_id,
        "agent": before.agent.name,
        "from": before.kind,
        "to": after.kind,
        "step": after.step,
    }
    call = getattr(after, "call", None) or getattr(before, "call", None)
    if call is not None:
        keys["tool"] = call.name
        keys["effect"] = call.tool.effect
    attempt = getattr(after, "attempt", None)
    if isinstance(attempt, int):
        keys["attempt"] = attempt
    if isinstance(after, ModelRetrying):
        keys["model_choice"] = after.model_choice
        keys["error"] = after.error
    said = [f"{v.verdict}: {v.check}" for v in after.loop.verdicts if v.step == before.step]
    if said:
        keys["verdict"] = "; ".join(said)
    for budget, left in before.agent.budget.left(after.spent).items():
        keys[f"budget_left.{budget}"] = left
    if isinstance(after, Failed):
        keys["reason"] = after.reason
    return keys


# --- logging ----------------------------------------------------------------------------


# logging.INFO, written out: the standard library's logging is imported by
# configure_logging (and by a runner), not by ``import statemachine``.
_INFO = 20


@functools.cache
def _handler_class() -> type[logging.StreamHandler[TextIO]]:
    """The class of the handler configure_logging puts on the ``statemachine`` logger.

    Made once, on first use; configure_logging finds its own handler by this class
    and replaces it.
    """
    import logging

    class _Handler(logging.StreamHandler[TextIO]):
        """The handler configure_logging puts on the ``statemachine`` logger."""

    return _Handler


def _json_dumps(event: Any, **_: Any) -> str:
    """One event as JSON, amounts as exact numbers; anything else unusual as its ``str``."""
    try:
        return dumps(event)
    except (TypeError, ValueError):
        return json.dumps(event, default=str)


def configure_logging(*, json: bool, stream: TextIO | None = None, level: int = _INFO) -> None:
    """Print structlog events, the library's included: JSON lines, or readable console lines.

    ``json=True`` is for production (one JSON object per line, with a UTC timestamp,
    amounts as exact numbers); ``json=False`` is readable text for a terminal (the
    demos use it). Events below ``level`` are dropped before they are rendered.
    Output goes to ``stream`` (default: standard error). This configures structlog
    globally and gives the standard library's ``statemachine`` logger its own handler
    (replaced, not added, when called again) that does not pass records on to the
    root logger.
    """
    import logging

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
    handler_class = _handler_class()
    for old in [h for h in library.handlers if isinstance(h, handler_class)]:
        library.removeHandler(old)
    handler = handler_class(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    library.addHandler(handler)
    library.setLevel(level)
    library.propagate = False


# --- progress line ----------------------------------------------------------------------


@final
class ProgressLine:
    """Shows a run's current phase on one terminal line: an ``on_transition`` callback,
    or a reader of ``Runner.events`` (:meth:`show`), which also shows the model's text.

    After every transition the line is rewritten in place (a carriage return, no
    new line); it is erased when the run ends or waits for a person, and by
    ``clear()`` or leaving a ``with`` block. When ``stream`` (default: standard
    output) is not a terminal it writes nothing at all, so piped output and logs
    stay clean.
    """

    __slots__ = ("_label", "_live", "_stream", "_text", "_width")

    def __init__(self, stream: TextIO | None = None, *, label: str = "") -> None:
        self._stream = sys.stdout if stream is None else stream
        self._live = self._stream.isatty()
        self._label = label
        self._width = 0
        self._text = ""

    def __call__(self, before: Phase[Any], after: Phase[Any]) -> None:
        """Show ``after`` as the current phase, or erase the line if the run stopped there."""
        self._text = ""
        if not self._live:
            return
        if isinstance(after, Done | Failed) or _waits(after):
            self.clear()
            return
        call = getattr(after, "call", None)
        doing = f" {call.name}" if call is not None else ""
        self._write(f"{self._label}step {after.step}: {after.kind}{doing}")

    def show(self, event: TransitionEvent[Any] | TextDelta | RunFinished[Any]) -> None:
        """Show one event of ``Runner.events``: a transition as ``__call__`` does, the
        end of the text the model is writing after its step, and nothing at the end.

        ``async for event in events: line.show(event)``
        """
        if isinstance(event, TransitionEvent):
            self(event.state, event.state)
        elif isinstance(event, TextDelta):
            self._text += event.text
            if self._live:
                # The text's end, on one line: the line is as wide as the terminal.
                said = " ".join(self._text.split())
                self._write(f"{self._label}step {event.step}: {said}", tail=True)
        else:
            self._text = ""
            self.clear()

    def _write(self, text: str, *, tail: bool = False) -> None:
        """Rewrite the line with ``text``, cut to the terminal's width (``tail``: its end
        kept, after an ellipsis)."""
        import shutil  # here: only a progress line on a terminal needs it

        room = max(shutil.get_terminal_size().columns - 1, 1)
        if len(text) > room:
            text = "..." + text[len(text) - room + 3 :] if tail and room > 3 else text[:room]
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
    return isinstance(state, Active) and bool(state.waiting_for)
