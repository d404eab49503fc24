"""``CircuitBreaker``: a service that keeps failing is left alone for a while.

Configured on the agent (``Agent(breaker=CircuitBreaker(failures=5, cool_down=30))``),
it keeps one circuit per model and per tool (``model:<name>``, ``tool:<name>``), in
this process's memory, shared by every run of the agents that hold it:

- **closed**: calls go through; ``failures`` failures in a row open it;
- **open**: no call goes through for ``cool_down`` seconds; the caller fails fast with
  a :class:`CircuitOpenError` that names the circuit (a model call falls back to the
  next model, or ``ModelRetrying`` waits out the cool-down, or leaves the run to resume);
- **half-open**: after the cool-down one call goes through as a probe; its success
  closes the circuit, its failure opens it for another cool-down. Other calls wait
  while the probe is out.

Time is the run's clock (``Runtime.clock``: ``time.monotonic`` unless a test injects
one). Each change of state adds 1 to the ``statemachine.breaker.changes`` counter
(attributes ``circuit`` and ``state``) of ``meter`` (default: the global
OpenTelemetry meter's); :meth:`CircuitBreaker.state` reads a circuit's state.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs

from ._errors import CircuitOpenError, SetupError, ToolError

if TYPE_CHECKING:
    from opentelemetry import metrics

__all__ = ["BREAKER_CHANGES", "CircuitBreaker", "_settle_tool", "_tool_refused", "model_circuit"]

BREAKER_CHANGES: Final = "statemachine.breaker.changes"

State = Literal["closed", "open", "half_open"]


def _positive_count(_: object, __: object, value: int) -> None:
    if value < 1:
        raise SetupError(
            f"failures must be at least 1 (the failures in a row that open it), got {value}"
        )


def _cool_down(_: object, __: object, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise SetupError(f"cool_down must be zero or more seconds, got {value}")


def model_circuit(model: object) -> str:
    """The circuit of ``model``: its endpoint and name when it has them, else its class."""
    base_url, name = getattr(model, "base_url", None), getattr(model, "model", None)
    if isinstance(base_url, str) and isinstance(name, str):
        return f"model:{name}@{base_url}"
    return f"model:{type(model).__module__}.{type(model).__qualname__}"


@attrs.define
class _Circuit:
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False


@final
@attrs.frozen(kw_only=True)
class CircuitBreaker:
    """After ``failures`` failures in a row a circuit opens for ``cool_down`` seconds."""

    failures: int = attrs.field(default=5, validator=_positive_count)
    cool_down: float = attrs.field(default=30.0, validator=_cool_down)
    meter: metrics.Meter | None = attrs.field(default=None, eq=False, repr=False)
    # The circuits of this process (not configuration: never compared, never copied).
    _circuits: dict[str, _Circuit] = attrs.field(init=False, factory=dict, eq=False, repr=False)
    _lock: Any = attrs.field(init=False, factory=threading.Lock, eq=False, repr=False)
    _counter: list[Any] = attrs.field(init=False, factory=list, eq=False, repr=False)

    def state(self, circuit: str, now: float) -> State:
        """``closed``, ``open`` or ``half_open`` (the cool-down is over, or a probe is out)."""
        with self._lock:
            held = self._circuits.get(circuit)
            if held is None or held.opened_at is None:
                return "closed"
            if held.probing or now - held.opened_at >= self.cool_down:
                return "half_open"
            return "open"

    def check(self, circuit: str, now: float) -> None:
        """Let one call through ``circuit`` now, or raise :class:`CircuitOpenError`.

        After the cool-down the first call through is the probe; until it is settled
        (:meth:`succeeded` or :meth:`failed`), no other call goes through.
        """
        with self._lock:
            held = self._circuits.get(circuit)
            if held is None or held.opened_at is None:
                return
            left = self.cool_down - (now - held.opened_at)
            failures = held.failures
            probe = left <= 0 and not held.probing
            if probe:
                held.probing = True
        if probe:
            self._changed(circuit, "half_open")
            return
        raise CircuitOpenError(circuit, failures=failures, retry_in=max(left, 0.0))

    def succeeded(self, circuit: str) -> None:
        """A call through ``circuit`` succeeded: it is closed, its count of failures 0."""
        with self._lock:
            held = self._circuits.pop(circuit, None)
        if held is not None and held.opened_at is not None:
            self._changed(circuit, "closed")

    def release(self, circuit: str) -> None:
        """A call through ``circuit`` ended without an outcome (cut short): if it was the
        probe, the next call may probe instead."""
        with self._lock:
            held = self._circuits.get(circuit)
            if held is not None:
                held.probing = False

    def failed(self, circuit: str, now: float) -> None:
        """A call through ``circuit`` failed; the ``failures``-th in a row, or a probe's,
        opens it from ``now``."""
        with self._lock:
            held = self._circuits.setdefault(circuit, _Circuit())
            held.failures += 1
            opens = held.probing or (held.opened_at is None and held.failures >= self.failures)
            if opens:
                held.opened_at, held.probing = now, False
        if opens:
            self._changed(circuit, "open")

    def _changed(self, circuit: str, state: State) -> None:
        if not self._counter:
            meter = self.meter
            if meter is None:
                from opentelemetry import metrics

                meter = metrics.get_meter("statemachine")
            self._counter.append(
                meter.create_counter(
                    BREAKER_CHANGES, unit="1", description="circuit breakers changing state"
                )
            )
        self._counter[0].add(1, {"statemachine.circuit": circuit, "statemachine.state": state})


def _tool_refused(breaker: CircuitBreaker | None, tool: str, now: float) -> str | None:
    """Why the tool ``tool`` is not called now (its circuit is open), or ``None``."""
    if breaker is None:
        return None
    try:
        breaker.check(f"tool:{tool}", now)
    except CircuitOpenError as error:
        return str(error)
    return None


def _settle_tool(
    breaker: CircuitBreaker | None, tool: str, now: float, error: BaseException | None
) -> None:
    """Count a tool call's outcome on its circuit: ``error`` (``None``: it answered).

    A :class:`ToolError` that says a second attempt cannot help (a card declined) is
    the service answering, not failing; a cancelled call settles nothing.
    """
    if breaker is None:
        return
    circuit = f"tool:{tool}"
    if error is None or (isinstance(error, ToolError) and not error.retryable):
        breaker.succeeded(circuit)
    elif isinstance(error, Exception):
        breaker.failed(circuit, now)
    else:
        breaker.release(circuit)
