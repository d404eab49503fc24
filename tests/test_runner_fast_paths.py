"""The runner's shortcuts do exactly what the long way does.

A tool call that never waits runs without its deadline's cancel scope (``_within``).
With OpenTelemetry's no-op tracer a transition's span is the run's own, not asked of
the tracer each time, and whether log events are wanted is found from the processors
the run's logger was bound with (``_runner._Told``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog
from deadline_support import raises, returns, within_plain
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from pydantic import BaseModel
from structlog.testing import capture_logs

from statemachine import (
    Agent,
    ApprovalRequest,
    Pending,
    Runner,
    _observe,
    _phases,
    _runner,
    _runtime,
    read_tool,
    write_tool,
)
from statemachine.testing import ScriptedGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


async def _calls_sync_code() -> list[int]:
    def inner() -> list[int]:
        return [number * 2 for number in range(3)]

    return inner()


async def _waits() -> str:
    await anyio.lowlevel.checkpoint()
    return "waited"


async def _waits_past() -> str:
    await anyio.sleep(1)
    return "never"


class _Context:
    async def __aenter__(self) -> None:
        await anyio.lowlevel.checkpoint()

    async def __aexit__(self, *exc: object) -> None:
        return None


async def _enters_async_with() -> str:
    async with _Context():
        return "entered"


class _Numbers:
    def __init__(self) -> None:
        self.left = 2

    def __aiter__(self) -> _Numbers:
        return self

    async def __anext__(self) -> int:
        await anyio.lowlevel.checkpoint()
        self.left -= 1
        if self.left < 0:
            raise StopAsyncIteration
        return self.left


async def _iterates() -> list[int]:
    return [number async for number in _Numbers()]


async def _loops() -> int:
    total = 0
    async for number in _Numbers():
        total += number
    return total


async def _awaits_in_a_comprehension() -> list[str]:
    return [await _waits() for _ in range(2)]


class _Awaitable:
    def __await__(self) -> Any:
        yield from anyio.lowlevel.checkpoint().__await__()
        return "awaited"


_NEVER_WAIT = [returns, raises, _calls_sync_code]
_MAY_WAIT = [_waits, _waits_past, _enters_async_with, _iterates, _loops, _awaits_in_a_comprehension]


@pytest.mark.parametrize("function", _NEVER_WAIT, ids=lambda f: f.__name__)
def test_a_coroutine_without_a_wait_is_read_as_never_waiting(function: Callable[[], Any]) -> None:
    assert _runtime._never_waits(function.__code__)


@pytest.mark.parametrize("function", _MAY_WAIT, ids=lambda f: f.__name__)
def test_every_way_a_coroutine_can_wait_is_read_as_waiting(function: Callable[[], Any]) -> None:
    """await, async with, async for, an async comprehension, an await in a comprehension."""
    assert not _runtime._never_waits(function.__code__)


_CASES: list[tuple[Callable[[], Any], float | None]] = [
    (make, seconds)
    for make in (*_NEVER_WAIT, *_MAY_WAIT, _Awaitable)
    for seconds in (None, 5.0, 0.02, 0.0, -1.0)
]


@pytest.mark.parametrize(
    ("make", "seconds"), _CASES, ids=[f"{make.__name__}-{seconds}" for make, seconds in _CASES]
)
async def test_a_call_ends_as_it_did_wholly_within_the_cancel_scope(
    make: Callable[[], Any], seconds: float | None
) -> None:
    """Its value, its error or the deadline's ``TimeoutError``, the same either way,
    whatever the deadline (ahead, passed, none)."""

    async def ended(within: Any) -> tuple[str, object]:
        try:
            return "value", await within(make(), seconds)
        except Exception as error:
            return type(error).__name__, str(error)

    assert await ended(_runtime._within) == await ended(within_plain)


@pytest.mark.parametrize("make", [returns, _waits_past], ids=lambda f: f.__name__)
async def test_a_call_in_a_cancelled_run_ends_as_before(make: Callable[[], Any]) -> None:
    """Within a scope already cancelled (``Runner.stop``), a call that never waits ends
    with its value either way, and one that waits is cancelled either way."""
    outcomes: list[tuple[object, bool]] = []
    for within in (_runtime._within, within_plain):
        value: object = None
        with anyio.CancelScope() as outer:
            outer.cancel()
            value = await within(make(), 5.0)
        outcomes.append((value, outer.cancelled_caught))
    assert outcomes[0] == outcomes[1]


# --- the transition's span and log event -------------------------------------------------


class _WhereArgs(BaseModel):
    city: str


_TOLD = _runner._Told


def _told_plain(
    tracer: trace.Tracer, run_span: trace.Span, meter: _observe.Instruments
) -> _runner._Told:
    """A ``_Told`` that asks the tracer for every transition's span and records every
    transition on the instruments, as before."""
    told = _TOLD(tracer, run_span, meter)
    told.untraced = None
    told.metered = True
    return told


async def _observed_run(
    tracer: trace.Tracer | None, caller: trace.SpanContext | None = None
) -> tuple[Any, ...]:
    """A two-call run: the span current in each tool call (``"caller"``: the caller's
    span), the span current after the run, and the events a capture saw."""
    seen: list[trace.Span] = []

    @read_tool
    async def where(args: _WhereArgs) -> str:
        """Note the current span."""
        seen.append(trace.get_current_span())
        return args.city

    model = ScriptedModel(
        [tool_call("where", {"city": "Oslo"}), tool_call("where", {"city": "Rome"}), reply("Ok.")]
    )
    runner = Runner(
        Agent[None](name="a", tools=[where]), model=model, gate=ScriptedGate([]), tracer=tracer
    )
    with capture_logs() as events:
        result = await runner.run(None, "Where?")
    contexts = [span.get_span_context() for span in seen]
    return (
        result.history,
        ["caller" if c == caller else (c.trace_id, c.span_id, c.is_valid) for c in contexts],
        [type(span) for span in seen],
        trace.get_current_span().get_span_context().is_valid,
        [{k: v for k, v in event.items() if k != "run_id"} for event in events],
    )


@pytest.mark.parametrize("tracer", [None, trace.NoOpTracer()], ids=["global", "no-op"])
@pytest.mark.parametrize("caller", [False, True], ids=["no caller span", "in a caller's span"])
async def test_an_untraced_run_is_seen_as_a_traced_one_was(
    tracer: trace.Tracer | None, caller: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The span current inside each transition (none, or the caller's as a non-recording
    span), the events captured and the span current after the run are the same with the
    no-op tracer's span taken from the run as with the tracer asked each time."""

    async def observed() -> tuple[Any, ...]:
        if not caller:
            return await _observed_run(tracer)
        with TracerProvider().get_tracer("caller").start_as_current_span("caller") as span:
            return await _observed_run(tracer, span.get_span_context())

    fast = await observed()
    monkeypatch.setattr(_runner, "_Told", _told_plain)
    plain = await observed()
    assert fast == plain
    assert len(fast[4]) == len(fast[0]) - 1  # one event per transition
    if caller:  # the run's span, and each transition's, is the caller's, not recorded
        assert fast[1] == ["caller", "caller"]


def test_only_the_no_op_tracer_is_taken_for_untraced() -> None:
    span = trace.INVALID_SPAN
    meter = _observe.default_instruments()
    assert _runner._Told(trace.NoOpTracer(), span, meter).untraced is span
    assert _runner._Told(TracerProvider().get_tracer("t"), span, meter).untraced is None
    proxy = trace.ProxyTracerProvider().get_tracer("t")
    unset = type(trace.get_tracer_provider()) is trace.ProxyTracerProvider
    assert (_runner._Told(proxy, span, meter).untraced is span) == unset


def test_only_instruments_that_record_nothing_are_quiet() -> None:
    """The no-op meter's, and the global meter's while no provider is set; a meter of
    an SDK provider records."""
    assert _observe.Instruments(metrics.NoOpMeter("m")).quiet()
    assert not _observe.Instruments(MeterProvider().get_meter("m")).quiet()
    unset = type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"
    assert _observe.default_instruments().quiet() == unset
    assert _observe.Instruments(metrics.get_meter("m")).quiet() == unset


def test_events_are_wanted_while_the_bound_processors_capture() -> None:
    """A capture entered after the run started is seen (it changes the processors' list
    in place); nothing is wanted below INFO without one."""
    told = _runner._Told(trace.NoOpTracer(), trace.INVALID_SPAN, _observe.default_instruments())
    assert not told.events_wanted()
    with capture_logs():
        assert told.events_wanted()
    assert not told.events_wanted()
    assert structlog.get_config()["processors"] is told._processors


class _FlightArgs(BaseModel):
    flight: str


@write_tool
async def _book(args: _FlightArgs) -> str:
    """Book a flight."""
    return args.flight


class _DeskGate:
    """Every request waits for a person."""

    async def decide(self, request: ApprovalRequest) -> Pending:
        return Pending(reason="sent to the desk")


async def test_quiet_instruments_still_count_the_approvals_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the no-op meter a run that waits for an approval is counted in the gauge's
    tally as when every transition is recorded (a provider set later reads it)."""

    async def tally() -> dict[Any, Any]:
        agent = Agent[None](name="desk", tools=[_book])
        model = ScriptedModel([tool_call("_book", {"flight": "TP1"})])
        runner = Runner(agent, model=model, gate=_DeskGate(), meter=metrics.NoOpMeter("m"))
        assert (await runner.run(None, "Book it")).status == "paused"
        return {source: dict(counts) for source, counts in runner._metrics._waiting.items()}

    fast = await tally()
    monkeypatch.setattr(_runner, "_Told", _told_plain)
    assert fast == await tally() == {None: {("desk", "_book"): 1}}


# --- the context a transition attaches -----------------------------------------------------


def test_within_makes_the_context_set_span_in_context_makes_once_per_context() -> None:
    """``within(current)`` is ``set_span_in_context(span, current)``: the same values;
    made again only for another current context object."""
    span = trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
    told = _runner._Told(trace.NoOpTracer(), span, _observe.default_instruments())
    first = otel_context.set_value("key", 1)
    made = told.within(first)
    assert made == trace.set_span_in_context(span, first)
    assert told.within(first) is made
    second = otel_context.set_value("key", 2, first)
    again = told.within(second)
    assert again is not made
    assert again == trace.set_span_in_context(span, second)
    assert told.within(first) == made


async def _seen_in_tools(contexts_change: bool) -> list[tuple[Any, ...]]:
    """The span and the value of a context key that each tool call of a run sees, with an
    ``on_transition`` that (when ``contexts_change``) leaves a new context attached each
    time, so the current context differs from one transition to the next."""
    seen: list[tuple[Any, ...]] = []

    @read_tool
    async def where(args: _WhereArgs) -> str:
        """Note the current span and key."""
        seen.append((trace.get_current_span(), otel_context.get_value("count")))
        return args.city

    counted = [0]

    def on_transition(before: Any, after: Any) -> None:
        if contexts_change:
            counted[0] += 1
            otel_context.attach(otel_context.set_value("count", counted[0]))

    turns = [tool_call("where", {"city": c}) for c in ("Oslo", "Rome", "Paris")] + [reply("Ok.")]
    runner = Runner(
        Agent[None](name="a", tools=[where]),
        model=ScriptedModel(turns),
        gate=ScriptedGate([]),
        tracer=trace.NoOpTracer(),
        on_transition=on_transition,
    )
    # In a caller's span: the run's span is then a span of its own, attached each time.
    with TracerProvider().get_tracer("caller").start_as_current_span("caller") as caller:
        await runner.run(None, "Where?")
    ours = caller.get_span_context()
    return [(type(span), span.get_span_context() == ours, count) for span, count in seen]


@pytest.mark.parametrize("contexts_change", [False, True])
async def test_tools_see_the_same_context_with_the_context_made_once(
    contexts_change: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = await _seen_in_tools(contexts_change)

    def within_plain(self: _observe._Told, current: Any) -> Any:
        return trace.set_span_in_context(self.untraced, current)  # type: ignore[arg-type]

    monkeypatch.setattr(_observe._Told, "within", within_plain)
    plain = await _seen_in_tools(contexts_change)
    assert fast == plain
    assert [count for _, _, count in fast] == ([2, 5, 8] if contexts_change else [None] * 3)
    assert all(kind is trace.NonRecordingSpan and caller for kind, caller, _ in fast)


_PHASE_KINDS = [
    _phases.Planning,
    _phases.AwaitApproval,
    _phases.ToolCalling,
    _phases.Observing,
    _phases.Retrying,
    _phases.ModelRetrying,
    _phases.Failed,
    _phases.Done,
]


@pytest.mark.parametrize("before_kind", _PHASE_KINDS)
@pytest.mark.parametrize("after_kind", _PHASE_KINDS)
def test_waits_counts_only_transitions_from_or_to_an_approval(
    before_kind: type[Any], after_kind: type[Any]
) -> None:
    """The runner calls ``Instruments.waits`` only when one of the two phases is an
    ``AwaitApproval``: for any other pair (both marked waiting, as a subclass could make
    them) it counts nothing, so skipping the call changes nothing."""

    class _Call:
        name = "_book"

    class _Agent:
        name = "desk"

    def waiting(kind: type[Any]) -> Any:
        phase = object.__new__(kind)
        for field, value in (("waiting", True), ("call", _Call()), ("agent", _Agent())):
            with contextlib.suppress(AttributeError):  # a field the kind does not have
                object.__setattr__(phase, field, value)
        return phase

    instruments = _observe.Instruments(metrics.NoOpMeter("m"))
    instruments._wait(None, "desk", "_book", 1)  # something to take away
    instruments.waits(waiting(before_kind), waiting(after_kind))
    counted = dict(instruments._waiting[None])
    if _phases.AwaitApproval not in (before_kind, after_kind):
        assert counted == {("desk", "_book"): 1}


def test_the_current_context_is_read_as_get_current_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_Told.current`` (the default runtime context's own ``ContextVar.get``) gives
    what ``opentelemetry.context.get_current`` gives, outside and inside an attached
    context; with another runtime context, or ``get_current`` replaced, it is
    ``get_current`` itself."""
    told = _observe._Told(trace.NoOpTracer(), trace.INVALID_SPAN, _observe.default_instruments())
    assert told.current is not otel_context.get_current
    assert told.current() is otel_context.get_current()
    token = otel_context.attach(otel_context.set_value("key", 1))
    try:
        assert told.current() is otel_context.get_current()
        assert told.current().get("key") == 1
    finally:
        otel_context.detach(token)
    assert told.current() is otel_context.get_current()

    class _Elsewhere(type(otel_context._RUNTIME_CONTEXT)):  # type: ignore[misc]  # pyright: ignore[reportPrivateUsage, reportUntypedBaseClass]
        """Another runtime context class (as OTEL_PYTHON_CONTEXT could name)."""

    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", _Elsewhere())
    assert _observe._current_context_reader() is otel_context.get_current  # pyright: ignore[reportPrivateUsage]
    monkeypatch.undo()

    def get_current() -> Any:
        return otel_context.Context()

    monkeypatch.setattr(otel_context, "get_current", get_current)
    assert _observe._current_context_reader() is get_current  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("caller", [False, True], ids=["no span current", "a caller's span"])
def test_what_a_transition_attaches_is_decided_as_before(caller: bool) -> None:
    """``see(current)`` leaves in ``attaching`` what the runner attached before: nothing
    when the run's span is the span current in ``current``, else ``within(current)``;
    asked again for another context, it answers for that one."""
    recording = TracerProvider().get_tracer("caller").start_span("caller")
    contexts = [
        otel_context.Context(),
        trace.set_span_in_context(recording),
        trace.set_span_in_context(trace.INVALID_SPAN),
        otel_context.set_value("key", 1),
    ]
    run_span = recording if caller else trace.INVALID_SPAN
    told = _observe._Told(trace.NoOpTracer(), run_span, _observe.default_instruments())
    for current in contexts + contexts[::-1]:
        told.see(current)
        assert told.seen is current
        if run_span is trace.get_current_span(current):
            assert told.attaching is None
        else:
            assert told.attaching == trace.set_span_in_context(run_span, current)
    recording.end()


# What may change the answer of events_wanted between two transitions: the library
# logger's level, the root's, logging.disable, the logger's ``disabled`` (dictConfig
# sets it), a structlog capture; and whether the logger's level cache was filled.
_LEVELS = st.sampled_from([logging.NOTSET, logging.DEBUG, logging.INFO, logging.WARNING])
_LOG_CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just("level"), _LEVELS),
        st.tuples(st.just("root"), _LEVELS),
        st.tuples(st.just("disable"), _LEVELS),
        st.tuples(st.just("disabled"), st.booleans()),
        st.tuples(st.just("capture"), st.booleans()),
        st.tuples(st.just("ask"), st.just(0)),
    ),
    max_size=12,
)


def _events_wanted_plain(told: _observe._Told) -> bool:
    """``events_wanted`` as it was: the logger asked through ``isEnabledFor``."""
    if logging.getLogger("statemachine").isEnabledFor(logging.INFO):
        return True
    processors = told._processors
    capture = told._capture
    return capture is not None and bool(processors) and isinstance(processors[-1], capture)


@settings(max_examples=200, deadline=None)
@given(changes=_LOG_CHANGES)
def test_events_wanted_answers_as_the_logger_and_the_capture_do(
    changes: list[tuple[str, Any]],
) -> None:
    """After any sequence of level changes, ``logging.disable``, ``disabled``, captures
    and reads, ``events_wanted`` answers as the logger's ``isEnabledFor`` (and a capture)
    would."""
    logger, root = logging.getLogger("statemachine"), logging.getLogger()
    kept = (logger.level, root.level, logger.disabled, logging.root.manager.disable)
    told = _observe._Told(trace.NoOpTracer(), trace.INVALID_SPAN, _observe.default_instruments())
    try:
        with contextlib.ExitStack() as captures:
            for change, value in changes:
                if change == "level":
                    logger.setLevel(value)
                elif change == "root":
                    root.setLevel(value)
                elif change == "disable":
                    logging.disable(value)
                elif change == "disabled":
                    logger.disabled = value
                elif change == "capture" and value:
                    captures.enter_context(capture_logs())
                elif change == "capture":
                    captures.close()
                else:
                    logger.isEnabledFor(logging.INFO)  # fills the cache
                assert told.events_wanted() == _events_wanted_plain(told)
                assert told.events_wanted() == _events_wanted_plain(told)
    finally:
        logger.setLevel(kept[0])
        root.setLevel(kept[1])
        logger.disabled = kept[2]
        logging.disable(kept[3])


def test_another_logger_class_is_asked() -> None:
    """A logger of another class, or with its own ``isEnabledFor``, is asked itself."""

    class Listening(logging.Logger):
        def isEnabledFor(self, level: int) -> bool:
            return True

    logger = logging.getLogger("statemachine")
    instruments = _observe.default_instruments()
    assert not _observe._Told(trace.NoOpTracer(), trace.INVALID_SPAN, instruments).events_wanted()
    logger.__class__ = Listening
    try:
        told = _observe._Told(trace.NoOpTracer(), trace.INVALID_SPAN, instruments)
        assert told.events_wanted()
    finally:
        logger.__class__ = logging.Logger
    logger.isEnabledFor = lambda level: True  # type: ignore[method-assign]
    try:
        told = _observe._Told(trace.NoOpTracer(), trace.INVALID_SPAN, instruments)
        assert told.events_wanted()
    finally:
        del logger.isEnabledFor
