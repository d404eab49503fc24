"""Reservations: parallel work reserves its worst case, commits the actual, releases the rest.

A ``BudgetMeter`` holds one run's committed spend and the sum of its open
reservations. An estimate is admitted only when the committed spend, every open
reservation and the estimate together stay within each limit of the ``Budget`` (the
rule of ``Budget.refuse``: a limit is crossed when the total would be *above* it), so
workers that reserve before they start can never overspend, however they interleave.
Each ``Reservation`` is settled exactly once: ``commit`` records what the work actually
used (at most the estimate; the rest goes back) and ``release`` gives the whole
estimate back when the work did not happen. Used as a context manager, a reservation
left open is released on exit, also on an exception or a cancellation.

Check-and-reserve, commit and release are each one critical section under a
``threading.Lock`` with no ``await`` inside, so they are atomic for the tasks of one
event loop and for threads alike. The wall-clock budget stops new reservations; it
never refuses a commit, because that work has already been done. Money is summed
exactly (``_money``), whatever the ambient ``decimal`` context: a thousand
reservations of ``4E-28`` are ``4E-25``, and a full budget admits nothing more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from decimal import Decimal
from types import TracebackType
from typing import Literal, Self, final

from ._budget import Budget, Spend
from ._errors import BudgetExceededError, EstimateExceededError, ReservationSettledError
from ._money import money_difference, money_sum, to_money

__all__ = ["BudgetMeter", "Reservation"]

_Limit = Literal["tokens", "cost", "tool_calls", "wall_clock"]
_Outcome = Literal["committed", "released"]
# Made once, unchecked (nothing to check): the meter of a run that spent nothing.
_NOTHING_SPENT = Spend.model_construct()


@final
class BudgetMeter:
    """One run's budget, shared by parallel workers: committed spend plus open reservations.

    ``spent`` is what the run had used before this meter (a resumed run passes its
    checkpointed ``Spend``); ``started`` is the ``clock`` reading at which the run's
    wall-clock budget began (default: now), so a resumed run keeps its elapsed time.
    """

    __slots__ = (
        "_budget",
        "_clock",
        "_lock",
        "_reserved_cost",
        "_reserved_tokens",
        "_reserved_tool_calls",
        "_spent",
        "_started",
    )

    def __init__(
        self,
        budget: Budget,
        spent: Spend = _NOTHING_SPENT,
        *,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ) -> None:
        self._budget = budget
        self._clock = clock
        self._started = clock() if started is None else started
        self._lock = threading.Lock()
        self._spent = spent
        self._reserved_tokens = 0
        self._reserved_cost = Decimal(0)
        self._reserved_tool_calls = 0

    @property
    def budget(self) -> Budget:
        """The limits this meter enforces."""
        return self._budget

    @property
    def spent(self) -> Spend:
        """Committed spend so far, including the ``spent`` the meter started with."""
        with self._lock:
            return self._spent

    @property
    def reserved(self) -> Spend:
        """The sum of the open reservations' estimates."""
        with self._lock:
            return self._reserved_spend()

    def refusal(
        self,
        *,
        tokens: int = 0,
        cost: Decimal = Decimal(0),
        tool_calls: int = 0,
        purpose: str = "",
    ) -> str | None:
        """Why a reservation of these amounts would not fit now, naming the budget; or ``None``.

        Raises ``ValueError`` for a negative amount or a float cost.
        """
        estimate = _estimate(tokens, cost, tool_calls)
        with self._lock:
            refused = self._refuse(estimate, purpose)
        return None if refused is None else refused[1]

    def try_reserve(
        self,
        *,
        tokens: int = 0,
        cost: Decimal = Decimal(0),
        tool_calls: int = 0,
        purpose: str = "",
    ) -> Reservation | None:
        """Reserve these amounts, or return ``None`` when they do not fit in what is left.

        A worker reserves its worst case before it starts. ``None`` is the answer to
        "no room" (a budget would be crossed, or the wall-clock budget is used up); bad
        input (a negative amount, a float cost) still raises ``ValueError``.
        """
        estimate = _estimate(tokens, cost, tool_calls)
        with self._lock:
            if self._refuse(estimate, purpose) is not None:
                return None
            return self._hold(estimate, purpose)

    def reserve(
        self,
        *,
        tokens: int = 0,
        cost: Decimal = Decimal(0),
        tool_calls: int = 0,
        purpose: str = "",
    ) -> Reservation:
        """Reserve these amounts, or raise ``BudgetExceededError`` naming the budget in the way.

        The reservation is also a context manager (``async with meter.reserve(...) as
        r:``) that releases it on exit unless it was committed or released.
        """
        estimate = _estimate(tokens, cost, tool_calls)
        with self._lock:
            refused = self._refuse(estimate, purpose)
            if refused is None:
                return self._hold(estimate, purpose)
        limit, reason = refused
        raise BudgetExceededError(reason, budget=limit)

    # --- under the lock -----------------------------------------------------------------

    def _reserved_spend(self) -> Spend:
        return Spend.model_construct(
            tokens=self._reserved_tokens,
            cost=self._reserved_cost,
            tool_calls=self._reserved_tool_calls,
        )

    def _refuse(self, estimate: Spend, purpose: str) -> tuple[_Limit, str] | None:
        budget, spent = self._budget, self._spent
        what = purpose or "this reservation"
        if budget.wall_clock is not None:
            elapsed = self._clock() - self._started
            if elapsed >= budget.wall_clock:
                return "wall_clock", (
                    f"wall-clock budget exhausted: {elapsed:.2f}s of {budget.wall_clock:g}s "
                    f"used before {what}"
                )
        if budget.tool_calls is not None:
            total = spent.tool_calls + self._reserved_tool_calls + estimate.tool_calls
            if total > budget.tool_calls:
                return "tool_calls", (
                    f"tool-call budget: {what} would make {total} tool calls "
                    f"({spent.tool_calls} made, {self._reserved_tool_calls} reserved), "
                    f"{budget.tool_calls} allowed"
                )
        if budget.tokens is not None:
            total = spent.tokens + self._reserved_tokens + estimate.tokens
            if total > budget.tokens:
                return "tokens", (
                    f"token budget: {spent.tokens} of {budget.tokens} tokens spent and "
                    f"{self._reserved_tokens} reserved, no room for {what} "
                    f"({estimate.tokens} tokens)"
                )
        if budget.cost is not None:
            cost = money_sum(spent.cost, self._reserved_cost, estimate.cost)
            if cost > budget.cost:
                return "cost", (
                    f"cost budget: {what} would bring the run's cost to ${cost} of "
                    f"${budget.cost} allowed (${spent.cost} spent, "
                    f"${self._reserved_cost} reserved)"
                )
        return None

    def _hold(self, estimate: Spend, purpose: str) -> Reservation:
        # Money first: were its sum ever to raise, nothing would have changed yet.
        self._reserved_cost = money_sum(self._reserved_cost, estimate.cost)
        self._reserved_tokens += estimate.tokens
        self._reserved_tool_calls += estimate.tool_calls
        return Reservation._open(self, estimate, purpose)

    def _settle(self, reservation: Reservation, actual: Spend | None, attempt: str) -> Spend:
        """Commit ``actual`` (or release, when ``None``) atomically; the total spend after."""
        with self._lock:
            if reservation._outcome is not None:
                raise ReservationSettledError(
                    reservation._purpose, first=reservation._outcome, attempted=attempt
                )
            estimate = reservation._estimate
            if actual is not None:
                _check_within(reservation._purpose, estimate, actual)
            self._reserved_cost = money_difference(self._reserved_cost, estimate.cost)
            self._reserved_tokens -= estimate.tokens
            self._reserved_tool_calls -= estimate.tool_calls
            if actual is None:
                reservation._outcome = "released"
            else:
                self._spent = self._spent.add(
                    tokens=actual.tokens, cost=actual.cost, tool_calls=actual.tool_calls
                )
                reservation._outcome = "committed"
            return self._spent

    def _release_if_open(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation._outcome is None:
                self._reserved_cost = money_difference(
                    self._reserved_cost, reservation._estimate.cost
                )
                self._reserved_tokens -= reservation._estimate.tokens
                self._reserved_tool_calls -= reservation._estimate.tool_calls
                reservation._outcome = "released"


@final
class Reservation:
    """Room held in a ``BudgetMeter`` for one piece of work; settle it exactly once.

    Only a meter makes one (``BudgetMeter.reserve`` / ``try_reserve``). As a sync or
    async context manager it releases itself on exit if it is still open.
    """

    __slots__ = ("_estimate", "_meter", "_outcome", "_purpose")

    _estimate: Spend
    _meter: BudgetMeter
    _outcome: _Outcome | None
    _purpose: str

    def __init__(self) -> None:
        raise TypeError(
            "Reservation has no public constructor; get one from BudgetMeter.reserve() "
            "or BudgetMeter.try_reserve()"
        )

    @classmethod
    def _open(cls, meter: BudgetMeter, estimate: Spend, purpose: str) -> Reservation:
        self = object.__new__(cls)
        self._meter = meter
        self._estimate = estimate
        self._purpose = purpose
        self._outcome = None
        return self

    @property
    def estimate(self) -> Spend:
        """The amounts reserved: the most this work may commit."""
        return self._estimate

    @property
    def purpose(self) -> str:
        """What the work is, as given to ``reserve``; used in messages."""
        return self._purpose

    @property
    def is_open(self) -> bool:
        """Whether it is neither committed nor released yet."""
        with self._meter._lock:
            return self._outcome is None

    def commit(self, *, tokens: int = 0, cost: Decimal = Decimal(0), tool_calls: int = 0) -> Spend:
        """Record the work's actual use, give back the rest, and return the meter's total spend.

        The actual may be less than the estimate but not more: the estimate is the
        ceiling, so a worker reserves its worst case. Above it, ``EstimateExceededError``
        is raised, nothing is recorded and the reservation stays open. A second
        commit or release raises ``ReservationSettledError``; a negative amount or a
        float cost raises ``ValueError``.
        """
        actual = _estimate(tokens, cost, tool_calls)
        return self._meter._settle(self, actual, "commit")

    def release(self) -> None:
        """Give back the whole estimate: the work did not happen.

        A second commit or release raises ``ReservationSettledError``.
        """
        self._meter._settle(self, None, "release")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._meter._release_if_open(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # No await here: the release must happen even inside a cancelled scope.
        self._meter._release_if_open(self)

    def __repr__(self) -> str:
        state = self._outcome or "open"
        estimate = self._estimate
        return (
            f"<Reservation {self._purpose!r} {state}: tokens={estimate.tokens} "
            f"cost={estimate.cost} tool_calls={estimate.tool_calls}>"
        )


def _estimate(tokens: int, cost: Decimal, tool_calls: int) -> Spend:
    """The amounts as a ``Spend``, checked: whole non-negative counts, exact money."""
    money = to_money(cost)
    if money < 0:
        raise ValueError(f"cost must not be negative, got {money}")
    return Spend.model_construct(
        tokens=_count("tokens", tokens), cost=money, tool_calls=_count("tool_calls", tool_calls)
    )


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must not be negative, got {value}")
    return value


def _check_within(purpose: str, estimate: Spend, actual: Spend) -> None:
    over: tuple[_Limit, int | Decimal, int | Decimal] | None = None
    if actual.tool_calls > estimate.tool_calls:
        over = ("tool_calls", estimate.tool_calls, actual.tool_calls)
    elif actual.tokens > estimate.tokens:
        over = ("tokens", estimate.tokens, actual.tokens)
    elif actual.cost > estimate.cost:
        over = ("cost", estimate.cost, actual.cost)
    if over is not None:
        limit, reserved, used = over
        raise EstimateExceededError(purpose, budget=limit, estimate=reserved, actual=used)
