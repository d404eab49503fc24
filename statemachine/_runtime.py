"""What a run needs that is not part of its state: the runtime passed to every ``advance``.

It holds the model, the approval gate, the clock, the side-effect ledger, and the run's
approval book (the approvals its gate or a person gave in this run). It is never
checkpointed. A Runner builds one per drive; a unit test may build one by hand.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from datetime import date
from types import CodeType, CoroutineType
from typing import TYPE_CHECKING, TypeVar, final

import anyio
import attrs

from ._approval import (
    Approval,
    ApprovalGate,
    ApprovalRequest,
    Approve,
    Denial,
    Pending,
    _ApprovalBook,
)
from ._budget import Budget
from ._errors import SetupError
from ._fast import _deadline
from ._ledger import EffectLedger
from ._model import Model
from ._tools import AM

if TYPE_CHECKING:
    from opentelemetry import metrics

    from ._events import _EventSink

__all__ = ["Runtime", "_runs_through", "_within"]

T = TypeVar("T")


@final
@attrs.frozen(kw_only=True)
class Runtime:
    """What a run needs that is not part of its state: model, gate, clock.

    It is passed to every ``advance`` and never checkpointed. ``clock`` returns
    seconds (monotonic); ``sleep`` waits (tests pass one that only records).
    ``ledger`` records every write call's intent and result (the runner passes its
    checkpointer); ``None``: write calls are not recorded and never replayed.
    ``fallback_models`` are asked, in order, when ``model`` is unavailable or its
    circuit breaker is open (see ``ModelRetrying``). ``events`` is where the run's
    events go while someone iterates them (``Runner.events``); ``None``: nobody
    listens, and no model is asked to stream. ``deps`` are the run's dependencies
    (``Runner.run(..., deps=...)``), handed to the tools in their ``RunContext``; a
    phase subclass reads them with :meth:`deps_as`.
    """

    run_id: str
    model: Model
    gate: ApprovalGate
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    rng: random.Random = attrs.field(factory=random.Random)
    today: Callable[[], date] = date.today
    # The validation-fallback counter; None: the global OpenTelemetry meter's.
    fallbacks: metrics.Counter | None = None
    ledger: EffectLedger | None = None
    fallback_models: tuple[Model, ...] = ()
    events: _EventSink | None = None
    deps: object = None
    # A default given as ``default=`` (not the ``@started.default`` decorator), so
    # that pyright, which reads attrs through dataclass_transform, sees it too.
    started: float = attrs.field(default=attrs.Factory(lambda rt: rt.clock(), takes_self=True))
    # The approvals this runtime made, and what each let run (trusted; never saved). A
    # runtime built by hand also accepts statemachine.testing.hand_approval's; a Runner
    # gives its runtime a book that does not.
    _approvals: _ApprovalBook = attrs.field(
        init=False, factory=lambda: _ApprovalBook(hand=True), eq=False, repr=False
    )

    async def decide(self, request: ApprovalRequest[AM]) -> Approval[AM] | Denial | Pending:
        """Ask the gate about ``request``; a yes comes back as the :class:`Approval` made
        from it and recorded for this run. A yes given for another request is a denial."""
        if request.run_id != self.run_id:
            raise SetupError(
                f"the approval request is for run {request.run_id!r}; this runtime runs "
                f"{self.run_id!r}"
            )
        decision: object = await self.gate.decide(request)
        if isinstance(decision, Approve):
            misfit = decision.misfit(request)
            if misfit is not None:
                return Denial(
                    reason=f"the approval given was for another call ({misfit}), so this "
                    "call stays unapproved",
                    denied_by=decision.by,
                )
            return self._approvals.grant(request, decision)
        if isinstance(decision, Denial | Pending):
            return decision
        raise SetupError(
            f"the approval gate answered {type(decision).__name__}; a gate answers "
            "Approve(by=...), Denial(reason=...) or Pending(): the runtime makes the Approval"
        )

    def deps_as(self, kind: type[T]) -> T:
        """The run's dependencies, which must be a ``kind`` (else :class:`SetupError`)."""
        if not isinstance(self.deps, kind):
            raise SetupError(
                f"run {self.run_id!r} was given dependencies of type "
                f"{type(self.deps).__qualname__}, not {kind.__qualname__}: pass "
                f"deps={kind.__qualname__}(...) to the run (Runner.run, Runner.resume)"
            )
        return self.deps

    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self.clock() - self.started

    def remaining(self, budget: Budget) -> float | None:
        """Seconds left before the run's wall-clock budget ends, ``None`` if unlimited."""
        return budget.remaining_seconds(self.elapsed())

    def model_of(self, choice: int) -> Model:
        """The model a phase's ``model_choice`` names: 0 ``model``, n its n-th fallback."""
        return self.model if choice == 0 else self.fallback_models[choice - 1]


async def _within(call: Awaitable[T], seconds: float | None) -> T:
    """Await ``call``; one still running ``seconds`` from now is cancelled (``TimeoutError``).

    What ``anyio.fail_after(seconds)`` does, without its two generator-based context
    managers around the cancel scope (they cost more than a fast tool call). A
    coroutine whose code never waits (no ``await``, ``async for`` or ``async with``)
    runs to its end in one step, where no deadline can stop it: it is awaited without
    the scope, which would change nothing but cost about 9 us.
    """
    if seconds is None or (type(call) is CoroutineType and _runs_through(call.cr_code)):
        return await call
    # Within anyio's cancel scope, its deadline served by one timer per event loop.
    return await _deadline._within(call, seconds)


# The instructions at which a coroutine may give control back to the event loop; every
# await, async for and async with compiles to some of them in the coroutine's own code.
_WAITS = frozenset(
    {
        "BEFORE_ASYNC_WITH",
        "END_ASYNC_FOR",
        "GET_AITER",
        "GET_ANEXT",
        "GET_AWAITABLE",
        "SEND",
        "YIELD_FROM",
        "YIELD_VALUE",
    }
)


# _never_waits's answers by the code object's id, the code held beside its answer (so
# that the id is no other code's while the entry lives): a look-up by identity (a cache
# keyed by the code object would hash its name, bytecode, constants and names at every
# call). The only cache of those answers; cleared when full.
_NEVER_WAITS: dict[int, tuple[CodeType, bool]] = {}
_NEVER_WAITS_MAX = 1024


def _runs_through(code: CodeType) -> bool:
    """``_never_waits(code)``, found by the code object's identity once it was asked."""
    known = _NEVER_WAITS.get(id(code))
    if known is not None and known[0] is code:
        return known[1]
    answer = _never_waits(code)
    if len(_NEVER_WAITS) >= _NEVER_WAITS_MAX:
        _NEVER_WAITS.clear()
    _NEVER_WAITS[id(code)] = (code, answer)
    return answer


def _never_waits(code: CodeType) -> bool:
    """Whether a coroutine of ``code`` runs to its end without ever waiting: none of its
    instructions can suspend it. Read once per code object (a tool's function), through
    :func:`_runs_through`'s cache."""
    import dis  # here: only a tool call under a deadline needs it

    return not any(instruction.opname in _WAITS for instruction in dis.get_instructions(code))
