"""statemachine._reserve: reserve -> commit / release keeps parallel work within the budget."""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from support import exactly

from statemachine import (
    Budget,
    BudgetExceededError,
    BudgetMeter,
    EstimateExceededError,
    Reservation,
    ReservationSettledError,
    Spend,
    StatemachineError,
)

if TYPE_CHECKING:
    from conftest import FakeClock

Kind = Literal["tokens", "cost", "tool_calls"]
KINDS: tuple[Kind, ...] = ("tokens", "cost", "tool_calls")


def total(meter: BudgetMeter) -> Spend:
    """Committed plus reserved, read in that order.

    Spend only grows and a commit moves an amount from reserved to spent, so reading
    spent first can undercount a concurrent commit but never count it twice.
    """
    spent = meter.spent
    reserved = meter.reserved
    return spent.add(tokens=reserved.tokens, cost=reserved.cost, tool_calls=reserved.tool_calls)


def over(budget: Budget, spend: Spend) -> list[str]:
    """The limits of ``budget`` that ``spend`` is above."""
    crossed = []
    if budget.tokens is not None and spend.tokens > budget.tokens:
        crossed.append("tokens")
    if budget.cost is not None and spend.cost > budget.cost:
        crossed.append("cost")
    if budget.tool_calls is not None and spend.tool_calls > budget.tool_calls:
        crossed.append("tool_calls")
    return crossed


# --- reserving --------------------------------------------------------------------------


def test_a_reservation_holds_its_estimate_until_it_is_settled() -> None:
    """A reservation counts in ``reserved`` and not in ``spent``, and carries its estimate."""
    meter = BudgetMeter(Budget(tokens=100))
    reservation = meter.reserve(tokens=60, cost=Decimal("0.25"), tool_calls=1, purpose="search 1")
    estimate = Spend(tokens=60, cost=Decimal("0.25"), tool_calls=1)
    assert reservation.estimate == estimate
    assert reservation.purpose == "search 1"
    assert reservation.is_open
    assert meter.reserved == estimate
    assert meter.spent == Spend()


def test_open_reservations_count_against_the_next_one() -> None:
    """With 60 of 100 tokens reserved, 50 more is refused by the token budget and 40 fits."""
    meter = BudgetMeter(Budget(tokens=100))
    meter.reserve(tokens=60, purpose="search 1")
    assert meter.try_reserve(tokens=50, purpose="search 2") is None
    assert meter.refusal(tokens=50, purpose="search 2") == (
        "token budget: 0 of 100 tokens spent and 60 reserved, no room for search 2 (50 tokens)"
    )
    assert meter.refusal(tokens=40) is None
    assert meter.try_reserve(tokens=40) is not None
    assert meter.reserved == Spend(tokens=100)


def test_reserve_raises_a_budget_error_that_names_the_budget_and_what_to_do() -> None:
    """``reserve`` refuses with BudgetExceededError, a RuntimeError carrying the budget's name."""
    meter = BudgetMeter(Budget(tokens=100))
    meter.reserve(tokens=60)
    message = (
        "token budget: 0 of 100 tokens spent and 60 reserved, no room for search 2 (50 tokens). "
        "Reserve less, wait for open reservations to be committed or released, "
        "or raise Budget.tokens."
    )
    with pytest.raises(BudgetExceededError, match=exactly(message)) as raised:
        meter.reserve(tokens=50, purpose="search 2")
    assert isinstance(raised.value, RuntimeError)
    assert isinstance(raised.value, StatemachineError)
    assert raised.value.budget == "tokens"
    assert raised.value.reason == (
        "token budget: 0 of 100 tokens spent and 60 reserved, no room for search 2 (50 tokens)"
    )
    assert meter.reserved == Spend(tokens=60)


def test_the_cost_refusal_shows_spent_reserved_and_the_total() -> None:
    """$0.40 spent and $0.50 reserved of $1.00: $0.20 more is refused with the sums in words."""
    meter = BudgetMeter(Budget(cost=Decimal("1.00")), Spend(cost=Decimal("0.40")))
    meter.reserve(cost=Decimal("0.50"))
    assert meter.refusal(cost=Decimal("0.20"), purpose="search 2") == (
        "cost budget: search 2 would bring the run's cost to $1.10 of $1.00 allowed "
        "($0.40 spent, $0.50 reserved)"
    )
    assert meter.try_reserve(cost=Decimal("0.10")) is not None


def test_the_tool_call_refusal_counts_made_and_reserved_calls() -> None:
    """2 calls made and 1 reserved of 3: one more is refused by the tool-call budget."""
    meter = BudgetMeter(Budget(tool_calls=3), Spend(tool_calls=2))
    meter.reserve(tool_calls=1)
    assert meter.refusal(tool_calls=1) == (
        "tool-call budget: this reservation would make 4 tool calls (2 made, 1 reserved), 3 allowed"
    )
    with pytest.raises(BudgetExceededError) as raised:
        meter.reserve(tool_calls=1)
    assert raised.value.budget == "tool_calls"


def test_an_estimate_may_use_a_budget_up_to_exactly_its_limit() -> None:
    """A limit is crossed only above it: estimates summing to each limit exactly all fit."""
    budget = Budget(tokens=10, cost=Decimal("1.00"), tool_calls=2)
    meter = BudgetMeter(budget)
    meter.reserve(tokens=4, cost=Decimal("0.30"), tool_calls=1)
    meter.reserve(tokens=6, cost=Decimal("0.70"), tool_calls=1)
    assert meter.reserved == Spend(tokens=10, cost=Decimal("1.00"), tool_calls=2)
    assert meter.try_reserve(tokens=1) is None
    assert meter.try_reserve(cost=Decimal("0.01")) is None
    assert meter.try_reserve(tool_calls=1) is None


def test_an_unlimited_budget_admits_any_estimate() -> None:
    """With no limits, every reservation fits."""
    meter = BudgetMeter(Budget())
    reservation = meter.reserve(tokens=10**9, cost=Decimal("1e6"), tool_calls=10**6)
    assert reservation.is_open


# --- commit and release -----------------------------------------------------------------


def test_commit_records_the_actual_and_gives_back_the_rest() -> None:
    """Reserving 60 tokens and committing 25 leaves 75 of 100 free; commit returns the total."""
    meter = BudgetMeter(Budget(tokens=100), Spend(tokens=5, model_calls=2))
    reservation = meter.reserve(tokens=60, cost=Decimal("0.50"), tool_calls=1)
    after = reservation.commit(tokens=20, cost=Decimal("0.125"), tool_calls=1)
    assert after == Spend(tokens=25, cost=Decimal("0.125"), tool_calls=1, model_calls=2)
    assert meter.spent == after
    assert meter.reserved == Spend()
    assert not reservation.is_open
    assert meter.try_reserve(tokens=76) is None
    assert meter.try_reserve(tokens=75) is not None


def test_committing_more_than_the_estimate_is_refused_and_records_nothing() -> None:
    """51 tokens against an estimate of 50 raises EstimateExceededError; spend is unchanged."""
    meter = BudgetMeter(Budget(tokens=100))
    reservation = meter.reserve(tokens=50, purpose="search 1")
    message = (
        "commit refused: search 1 used 51 tokens but reserved only 50 tokens; nothing was "
        "recorded and the reservation is still open. The estimate is the ceiling: reserve "
        "the worst case, then commit the actual use."
    )
    with pytest.raises(EstimateExceededError, match=exactly(message)) as raised:
        reservation.commit(tokens=51)
    assert isinstance(raised.value, ValueError)
    assert (raised.value.budget, raised.value.estimate, raised.value.actual) == ("tokens", 50, 51)
    assert meter.spent == Spend()
    assert meter.reserved == Spend(tokens=50)
    assert reservation.is_open
    assert reservation.commit(tokens=50) == Spend(tokens=50)


def test_the_estimate_is_the_ceiling_for_cost_and_tool_calls_too() -> None:
    """A commit above the estimate in cost or in tool calls is refused with its own words."""
    meter = BudgetMeter(Budget())
    reservation = meter.reserve(cost=Decimal("1.00"), tool_calls=1)
    with pytest.raises(
        EstimateExceededError,
        match=exactly(
            "commit refused: this reservation used $1.01 but reserved only $1.00; nothing was "
            "recorded and the reservation is still open. The estimate is the ceiling: reserve "
            "the worst case, then commit the actual use."
        ),
    ):
        reservation.commit(cost=Decimal("1.01"))
    with pytest.raises(
        EstimateExceededError,
        match=r"^commit refused: this reservation used 2 tool calls but reserved only 1 tool "
        r"call; nothing was recorded",
    ):
        reservation.commit(tool_calls=2)
    assert meter.spent == Spend()
    assert meter.reserved == Spend(cost=Decimal("1.00"), tool_calls=1)


def test_a_second_commit_or_release_is_refused() -> None:
    """A reservation settles once: commit then commit, commit then release, release then commit."""
    meter = BudgetMeter(Budget(tokens=100))
    committed = meter.reserve(tokens=10, purpose="search 1")
    committed.commit(tokens=10)
    with pytest.raises(
        ReservationSettledError,
        match=exactly(
            "the reservation for search 1 was already committed; commit() refused. Commit or "
            "release a reservation exactly once, and reserve again for new work."
        ),
    ) as raised:
        committed.commit(tokens=10)
    assert isinstance(raised.value, RuntimeError)
    assert (raised.value.first, raised.value.attempted) == ("committed", "commit")
    with pytest.raises(
        ReservationSettledError,
        match=r"^the reservation for search 1 was already committed; release\(\) refused\.",
    ):
        committed.release()
    released = meter.reserve(tokens=10)
    released.release()
    with pytest.raises(
        ReservationSettledError,
        match=r"^this reservation was already released; commit\(\) refused\.",
    ):
        released.commit(tokens=1)
    with pytest.raises(
        ReservationSettledError,
        match=r"^this reservation was already released; release\(\) refused\.",
    ):
        released.release()
    assert meter.spent == Spend(tokens=10)
    assert meter.reserved == Spend()


def test_release_gives_the_whole_estimate_back() -> None:
    """After a release nothing is spent or reserved and the full budget can be reserved again."""
    budget = Budget(tokens=100, cost=Decimal("2"), tool_calls=3)
    meter = BudgetMeter(budget)
    reservation = meter.reserve(tokens=100, cost=Decimal("2"), tool_calls=3)
    assert meter.try_reserve(tool_calls=1) is None
    reservation.release()
    assert not reservation.is_open
    assert meter.spent == Spend()
    assert meter.reserved == Spend()
    assert meter.try_reserve(tokens=100, cost=Decimal("2"), tool_calls=3) is not None


# --- context managers -------------------------------------------------------------------


def test_the_sync_context_manager_releases_on_an_exception() -> None:
    """A ``with`` block that raises before committing gives the reservation back."""
    meter = BudgetMeter(Budget(tokens=100))
    held = meter.reserve(tokens=40)

    def failing_search() -> None:
        with held:
            raise RuntimeError("search failed")

    with pytest.raises(RuntimeError, match="search failed"):
        failing_search()
    assert not held.is_open
    assert meter.reserved == Spend()
    assert meter.spent == Spend()


def test_a_committed_reservation_is_left_alone_on_exit() -> None:
    """Leaving a ``with`` block after commit neither releases again nor raises."""
    meter = BudgetMeter(Budget(tokens=100))
    with meter.reserve(tokens=40) as held:
        held.commit(tokens=30)
    assert meter.spent == Spend(tokens=30)
    assert meter.reserved == Spend()


@pytest.mark.anyio
async def test_the_async_context_manager_releases_on_an_exception() -> None:
    """An ``async with`` block that raises before committing gives the reservation back."""
    meter = BudgetMeter(Budget(tokens=100))
    held = meter.reserve(tokens=40, purpose="search 1")

    async def failing_search() -> None:
        async with held:
            await anyio.lowlevel.checkpoint()
            raise RuntimeError("search failed")

    with pytest.raises(RuntimeError, match="search failed"):
        await failing_search()
    assert not held.is_open
    assert meter.reserved == Spend()
    assert meter.spent == Spend()


@pytest.mark.anyio
async def test_a_cancelled_worker_releases_its_reservation() -> None:
    """Cancelling a task group while a worker holds a reservation brings reserved back to zero."""
    meter = BudgetMeter(Budget(tokens=100, tool_calls=5))
    reached_the_end: list[bool] = []
    all_holding = anyio.Event()

    async def worker() -> None:
        async with meter.reserve(tokens=30, tool_calls=1, purpose="slow search"):
            if meter.reserved.tool_calls == 3:
                all_holding.set()
            await anyio.sleep_forever()
        reached_the_end.append(True)

    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            for _ in range(3):
                group.start_soon(worker)
            await all_holding.wait()
            assert meter.reserved == Spend(tokens=90, tool_calls=3)
            group.cancel_scope.cancel()
    assert meter.reserved == Spend()
    assert meter.spent == Spend()
    assert reached_the_end == []


# --- the wall clock ---------------------------------------------------------------------


def test_the_wall_clock_budget_stops_new_reservations_but_not_commits(
    fake_clock: FakeClock,
) -> None:
    """At 60 s of a 60 s budget nothing more may be reserved; work already running commits."""
    meter = BudgetMeter(Budget(wall_clock=60), clock=fake_clock)
    fake_clock.advance(30)
    running = meter.reserve(tokens=10, purpose="search 1")
    fake_clock.advance(30)
    assert meter.try_reserve(purpose="search 2") is None
    assert meter.refusal(purpose="search 2") == (
        "wall-clock budget exhausted: 60.00s of 60s used before search 2"
    )
    with pytest.raises(
        BudgetExceededError,
        match=exactly(
            "wall-clock budget exhausted: 60.00s of 60s used before search 2. Start no new "
            "work: finish with what the run has, or allow more time."
        ),
    ) as raised:
        meter.reserve(purpose="search 2")
    assert raised.value.budget == "wall_clock"
    assert running.commit(tokens=10) == Spend(tokens=10)


def test_a_resumed_run_keeps_its_elapsed_time(fake_clock: FakeClock) -> None:
    """``started`` before now counts the time already used: 50 s of 60 s leaves 10 s."""
    fake_clock.advance(100)
    meter = BudgetMeter(Budget(wall_clock=60), clock=fake_clock, started=50)
    assert meter.try_reserve() is not None
    fake_clock.advance(9.5)
    assert meter.try_reserve() is not None
    fake_clock.advance(0.5)
    assert meter.refusal() == (
        "wall-clock budget exhausted: 60.00s of 60s used before this reservation"
    )


# --- bad input --------------------------------------------------------------------------


FLOAT_MESSAGE = (
    "money must be exact, but got the float 0.5; pass Decimal('0.5') or the string '0.5' "
    "(read JSON with statemachine's loads, which keeps numbers exact)"
)


def test_a_float_cost_is_refused_when_reserving_and_committing() -> None:
    """Money is never a float: reserve, try_reserve, refusal and commit all refuse 0.5."""
    meter = BudgetMeter(Budget(cost=Decimal("10")))
    bad: Any = 0.5
    for attempt in (meter.reserve, meter.try_reserve, meter.refusal):
        with pytest.raises(ValueError, match=exactly(FLOAT_MESSAGE)):
            attempt(cost=bad)
    reservation = meter.reserve(cost=Decimal("1"))
    with pytest.raises(ValueError, match=exactly(FLOAT_MESSAGE)):
        reservation.commit(cost=bad)
    assert meter.reserved == Spend(cost=Decimal("1"))
    assert meter.spent == Spend()
    assert reservation.commit(cost=Decimal("0.5")) == Spend(cost=Decimal("0.5"))


@pytest.mark.parametrize(
    ("amounts", "message"),
    [
        ({"tokens": -1}, "tokens must not be negative, got -1"),
        ({"tool_calls": -2}, "tool_calls must not be negative, got -2"),
        ({"cost": Decimal("-0.01")}, "cost must not be negative, got -0.01"),
        ({"tokens": 1.5}, "tokens must be a whole number, got 1.5"),
        ({"tool_calls": True}, "tool_calls must be a whole number, got True"),
    ],
)
def test_negative_or_fractional_amounts_are_refused(amounts: dict[str, Any], message: str) -> None:
    """A negative amount would hand back room it never held; counts are whole numbers."""
    meter = BudgetMeter(Budget())
    with pytest.raises(ValueError, match=exactly(message)):
        meter.try_reserve(**amounts)
    reservation = meter.reserve(tokens=5, cost=Decimal(1), tool_calls=5)
    with pytest.raises(ValueError, match=exactly(message)):
        reservation.commit(**amounts)
    assert reservation.is_open


def test_only_a_meter_makes_a_reservation() -> None:
    """Reservation has no public constructor: room is held only through a meter."""
    with pytest.raises(
        TypeError,
        match=exactly(
            "Reservation has no public constructor; get one from BudgetMeter.reserve() "
            "or BudgetMeter.try_reserve()"
        ),
    ):
        Reservation()


# --- the proof: many concurrent searches against a budget of N --------------------------


@dataclass
class Plan:
    """What one search task does, drawn ahead from the seeded RNG so a run is reproducible."""

    style: Literal["try", "raise", "with"]
    before: int  # checkpoints before reserving
    during: int  # checkpoints between reserving and settling
    outcome: Literal["commit", "release", "fail"]
    actual: Spend


@dataclass
class Tally:
    """What the searches of one run did, as they saw it."""

    admitted: int = 0
    ran: int = 0
    refused: int = 0
    committed: Spend = field(default_factory=Spend)
    problems: list[str] = field(default_factory=list)


def search_budget(binding: Kind, n: int, tasks: int, estimate: Spend) -> Budget:
    """A budget with room for exactly ``n`` estimates of the ``binding`` kind.

    The other two limits are set, so they are checked too, but wide enough for every task.
    """
    wide = tasks + 1
    return Budget(
        tokens=estimate.tokens * (n if binding == "tokens" else wide),
        cost=estimate.cost * (n if binding == "cost" else wide),
        tool_calls=estimate.tool_calls * (n if binding == "tool_calls" else wide),
    )


def draw_plans(rng: random.Random, tasks: int, estimate: Spend, *, full: bool) -> list[Plan]:
    """Per-task styles, checkpoint counts and outcomes; ``full`` commits every whole estimate."""
    plans = []
    for _ in range(tasks):
        if full:
            outcome: Literal["commit", "release", "fail"] = "commit"
            actual = estimate
        else:
            outcome = rng.choice(("commit", "commit", "commit", "release", "fail"))
            actual = Spend(
                tokens=rng.randint(0, estimate.tokens),
                cost=estimate.cost * rng.randint(0, 100) / 100,
                tool_calls=rng.randint(0, estimate.tool_calls),
            )
        plans.append(
            Plan(
                style=rng.choice(("try", "raise", "with")),
                before=rng.randint(0, 6),
                during=rng.randint(0, 6),
                outcome=outcome,
                actual=actual,
            )
        )
    return plans


async def run_searches(
    meter: BudgetMeter, binding: Kind, estimate: Spend, plans: list[Plan]
) -> Tally:
    """Start one task per plan in a task group; each reserves, waits, then settles."""
    budget = meter.budget
    tally = Tally()
    amounts: dict[str, Any] = {
        "tokens": estimate.tokens,
        "cost": estimate.cost,
        "tool_calls": estimate.tool_calls,
    }

    def check(when: str) -> None:
        crossed = over(budget, total(meter))
        if crossed:
            tally.problems.append(f"spent + reserved above {crossed} {when}")

    def refused(reason: str | None) -> None:
        tally.refused += 1
        # No await since the meter said no, so this is the state it judged.
        if not over(budget, total(meter).add(**amounts)):
            tally.problems.append(f"refused with room left: {reason}")

    async def settle(reservation: Reservation, plan: Plan) -> None:
        tally.admitted += 1
        check("after reserving")
        for _ in range(plan.during):
            await anyio.lowlevel.checkpoint()
        if plan.outcome == "fail":
            raise LookupError("search failed")
        if plan.outcome == "release":
            reservation.release()
            return
        actual = plan.actual
        reservation.commit(tokens=actual.tokens, cost=actual.cost, tool_calls=actual.tool_calls)
        tally.ran += 1
        tally.committed = tally.committed.add(
            tokens=actual.tokens, cost=actual.cost, tool_calls=actual.tool_calls
        )
        check("after committing")

    async def search(i: int, plan: Plan) -> None:
        for _ in range(plan.before):
            await anyio.lowlevel.checkpoint()
        purpose = f"search {i}"
        try:
            if plan.style == "try":
                reservation = meter.try_reserve(**amounts, purpose=purpose)
                if reservation is None:
                    refused(meter.refusal(**amounts, purpose=purpose))
                    return
                try:
                    await settle(reservation, plan)
                finally:
                    if reservation.is_open:
                        reservation.release()
            else:
                try:
                    reservation = meter.reserve(**amounts, purpose=purpose)
                except BudgetExceededError as error:
                    if error.budget != binding:
                        tally.problems.append(f"refused by {error.budget}, not {binding}")
                    refused(error.reason)
                    return
                if plan.style == "with":
                    async with reservation:
                        await settle(reservation, plan)
                else:
                    try:
                        await settle(reservation, plan)
                    finally:
                        if reservation.is_open:
                            reservation.release()
        except LookupError:
            pass

    async with anyio.create_task_group() as group:
        for i, plan in enumerate(plans):
            group.start_soon(search, i, plan)
    return tally


def draw_estimate(rng: random.Random) -> Spend:
    """One search's worst case: some tokens, some cents, one to three tool calls."""
    return Spend(
        tokens=rng.randint(1, 500),
        cost=Decimal(rng.randint(1, 10_000)) / 100,
        tool_calls=rng.randint(1, 3),
    )


@pytest.mark.anyio
@pytest.mark.parametrize("binding", KINDS)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 20), tasks=st.integers(50, 200))
async def test_exactly_n_searches_run_when_each_commits_its_estimate(
    binding: Kind, seed: int, n: int, tasks: int
) -> None:
    """Many concurrent searches against a budget of N whole estimates: exactly N run, none over."""
    rng = random.Random(seed)
    estimate = draw_estimate(rng)
    meter = BudgetMeter(search_budget(binding, n, tasks, estimate))
    plans = draw_plans(rng, tasks, estimate, full=True)
    tally = await run_searches(meter, binding, estimate, plans)
    assert tally.problems == []
    assert tally.ran == n
    assert tally.refused == tasks - n
    assert meter.spent == Spend(
        tokens=estimate.tokens * n, cost=estimate.cost * n, tool_calls=estimate.tool_calls * n
    )
    assert meter.reserved == Spend()


@pytest.mark.anyio
@pytest.mark.parametrize("binding", KINDS)
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 20), tasks=st.integers(50, 200))
async def test_concurrent_searches_with_partial_commits_and_failures_never_overspend(
    binding: Kind, seed: int, n: int, tasks: int
) -> None:
    """With random actuals, releases and failures, spent + reserved stays within every limit."""
    rng = random.Random(seed)
    estimate = draw_estimate(rng)
    budget = search_budget(binding, n, tasks, estimate)
    meter = BudgetMeter(budget)
    plans = draw_plans(rng, tasks, estimate, full=False)
    tally = await run_searches(meter, binding, estimate, plans)
    assert tally.problems == []
    # A refusal needs N estimates held or spent, so at least N searches were let in.
    assert tally.admitted >= n
    assert tally.admitted + tally.refused == tasks
    assert meter.spent == tally.committed
    assert over(budget, meter.spent) == []
    assert meter.reserved == Spend()


# --- threads ----------------------------------------------------------------------------


@pytest.fixture
def busy_switching() -> Any:
    """Make threads switch as often as the interpreter allows, for more interleavings."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("busy_switching")
@pytest.mark.parametrize("binding", KINDS)
def test_threads_reserving_at_once_run_exactly_n_searches(binding: Kind) -> None:
    """Eight threads racing for a budget of N estimates commit exactly N and never overspend."""
    rng = random.Random(f"threads-{binding}")
    estimate = draw_estimate(rng)
    n, threads, attempts = 13, 8, 40
    budget = search_budget(binding, n, threads * attempts, estimate)
    meter = BudgetMeter(budget)
    start = threading.Barrier(threads)
    ran: list[int] = []
    problems: list[str] = []

    def worker(index: int) -> None:
        start.wait()
        for attempt in range(attempts):
            reservation = meter.try_reserve(
                tokens=estimate.tokens,
                cost=estimate.cost,
                tool_calls=estimate.tool_calls,
                purpose=f"search {index}.{attempt}",
            )
            if reservation is None:
                continue
            if over(budget, total(meter)):
                problems.append("over after reserving")
            time.sleep(0)
            reservation.commit(
                tokens=estimate.tokens, cost=estimate.cost, tool_calls=estimate.tool_calls
            )
            ran.append(index)
            if over(budget, total(meter)):
                problems.append("over after committing")

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=10)
    assert problems == []
    assert len(ran) == n
    assert meter.spent == Spend(
        tokens=estimate.tokens * n, cost=estimate.cost * n, tool_calls=estimate.tool_calls * n
    )
    assert meter.reserved == Spend()


@pytest.mark.usefixtures("busy_switching")
def test_two_threads_settling_one_reservation_settle_it_once() -> None:
    """When two threads commit the same reservation at once, one wins and the other is refused."""
    meter = BudgetMeter(Budget())
    rounds = 100
    wins: list[str] = []
    refusals: list[str] = []

    def settle(how: str, reservation: Reservation, start: threading.Barrier) -> None:
        start.wait()
        try:
            if how == "commit":
                reservation.commit(tokens=1)
            else:
                reservation.release()
        except ReservationSettledError:
            refusals.append(how)
        else:
            wins.append(how)

    for _ in range(rounds):
        reservation = meter.reserve(tokens=1)
        start = threading.Barrier(2)
        pair = [
            threading.Thread(target=settle, args=(how, reservation, start))
            for how in ("commit", "release")
        ]
        for thread in pair:
            thread.start()
        for thread in pair:
            thread.join(timeout=10)
    assert len(wins) == rounds
    assert len(refusals) == rounds
    assert meter.spent == Spend(tokens=wins.count("commit"))
    assert meter.reserved == Spend()


# --- any sequence of operations ---------------------------------------------------------


def limit_or_none(limits: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A limit, or no limit of that kind."""
    return st.none() | limits


CENTS = st.integers(0, 500).map(lambda cents: Decimal(cents) / 100)


class MeterOperations(RuleBasedStateMachine):
    """Reserve, try, commit, over-commit and release in any order, against a simple model."""

    def __init__(self) -> None:
        super().__init__()
        self.budget = Budget()
        self.meter = BudgetMeter(self.budget)
        self.open: list[Reservation] = []
        self.commits = Spend()
        self.reserved = Spend()

    @initialize(
        tokens=limit_or_none(st.integers(0, 300)),
        cost=limit_or_none(st.integers(0, 1500).map(lambda cents: Decimal(cents) / 100)),
        tool_calls=limit_or_none(st.integers(0, 8)),
        already=st.integers(0, 50),
    )
    def start(
        self, tokens: int | None, cost: Decimal | None, tool_calls: int | None, already: int
    ) -> None:
        self.budget = Budget(tokens=tokens, cost=cost, tool_calls=tool_calls)
        self.commits = Spend(tokens=already)
        self.meter = BudgetMeter(self.budget, self.commits)

    def first_crossed(self, estimate: Spend) -> str | None:
        """The limit the model says this estimate would cross, in the meter's order."""
        after = self.commits.add(
            tokens=self.reserved.tokens + estimate.tokens,
            cost=self.reserved.cost + estimate.cost,
            tool_calls=self.reserved.tool_calls + estimate.tool_calls,
        )
        crossed = over(self.budget, after)
        for kind in ("tool_calls", "tokens", "cost"):
            if kind in crossed:
                return kind
        return None

    def held(self, reservation: Reservation) -> None:
        self.open.append(reservation)
        estimate = reservation.estimate
        self.reserved = self.reserved.add(
            tokens=estimate.tokens, cost=estimate.cost, tool_calls=estimate.tool_calls
        )

    def settled(self, reservation: Reservation) -> None:
        self.open.remove(reservation)
        estimate = reservation.estimate
        self.reserved = self.reserved.add(
            tokens=-estimate.tokens, cost=-estimate.cost, tool_calls=-estimate.tool_calls
        )

    @rule(tokens=st.integers(0, 120), cost=CENTS, tool_calls=st.integers(0, 3))
    def try_reserve(self, tokens: int, cost: Decimal, tool_calls: int) -> None:
        crossed = self.first_crossed(Spend(tokens=tokens, cost=cost, tool_calls=tool_calls))
        reservation = self.meter.try_reserve(tokens=tokens, cost=cost, tool_calls=tool_calls)
        assert (reservation is None) == (crossed is not None)
        if reservation is not None:
            self.held(reservation)

    @rule(tokens=st.integers(0, 120), cost=CENTS, tool_calls=st.integers(0, 3))
    def reserve(self, tokens: int, cost: Decimal, tool_calls: int) -> None:
        crossed = self.first_crossed(Spend(tokens=tokens, cost=cost, tool_calls=tool_calls))
        if crossed is not None:
            with pytest.raises(BudgetExceededError) as raised:
                self.meter.reserve(tokens=tokens, cost=cost, tool_calls=tool_calls)
            assert raised.value.budget == crossed
        else:
            self.held(self.meter.reserve(tokens=tokens, cost=cost, tool_calls=tool_calls))

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        reservation = data.draw(st.sampled_from(self.open))
        estimate = reservation.estimate
        tokens = data.draw(st.integers(0, estimate.tokens))
        cost = estimate.cost * data.draw(st.integers(0, 4)) / 4
        tool_calls = data.draw(st.integers(0, estimate.tool_calls))
        after = reservation.commit(tokens=tokens, cost=cost, tool_calls=tool_calls)
        self.settled(reservation)
        self.commits = self.commits.add(tokens=tokens, cost=cost, tool_calls=tool_calls)
        assert after == self.commits

    @precondition(lambda self: self.open)
    @rule(data=st.data(), kind=st.sampled_from(KINDS))
    def commit_too_much(self, data: st.DataObject, kind: Kind) -> None:
        reservation = data.draw(st.sampled_from(self.open))
        estimate = reservation.estimate
        too_much: dict[Kind, dict[str, Any]] = {
            "tokens": {"tokens": estimate.tokens + 1},
            "cost": {"cost": estimate.cost + Decimal("0.01")},
            "tool_calls": {"tool_calls": estimate.tool_calls + 1},
        }
        with pytest.raises(EstimateExceededError):
            reservation.commit(**too_much[kind])
        assert reservation.is_open

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        reservation = data.draw(st.sampled_from(self.open))
        reservation.release()
        self.settled(reservation)

    @invariant()
    def spent_is_the_sum_of_commits_and_reserved_the_sum_of_open_estimates(self) -> None:
        assert self.meter.spent == self.commits
        assert self.meter.reserved == self.reserved

    @invariant()
    def spent_plus_reserved_stays_within_every_limit(self) -> None:
        # The meter may start above a limit (a resumed run); it never adds to that.
        if not over(self.meter.budget, self.commits):
            assert over(self.meter.budget, total(self.meter)) == []


TestMeterOperations = MeterOperations.TestCase
TestMeterOperations.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
