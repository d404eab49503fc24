"""The loop governor's checks with 10 and with 10,000 prior actions.

Exact and canonical checks are dictionary look-ups, semantic and convergence
checks look at bounded windows, and cycle detection at the last few calls: the
cost per check should not grow with the length of the run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from decimal import Decimal

from pydantic import BaseModel

from statemachine import ActionRecord, Budget, LoopGovernor, LoopState, Spend, read_tool

SIZES = (10, 10_000)
REPEATS = 200


class SearchArgs(BaseModel):
    query: str


@read_tool
async def search(args: SearchArgs) -> str:
    return args.query


def history(governor: LoopGovernor, size: int) -> LoopState:
    """A loop state with ``size`` settled searches; one in ten failed."""
    loop = LoopState()
    for n in range(size):
        call = search.call({"query": f"prior query number {n} about topic {n % 97}"})
        action = governor.action(call, f'{{"query": "q{n}"}}', f"call-{n}")
        loop = loop.record(action)
        result = f"result {n}: text about topic {n % 97}"
        if n % 10 == 0:
            loop = loop.settle(action.call_id, "failed", result)
        else:
            loop = loop.settle(action.call_id, "ok", result)
    for n in range(governor.evidence_window):
        loop = loop._evolve(evidence=(*loop.evidence, f"evidence {n} about topic {n}"))
    return loop


def timed(check: Callable[[], object]) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        check()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def measure(governor: LoopGovernor, loop: LoopState, size: int) -> dict[str, float]:
    """Median microseconds of each check against ``loop``."""
    budget = Budget(cost=Decimal("100"))
    fresh = governor.action(search.call({"query": "a new question"}), "{}", "call-new")
    last = size - 1
    repeat = governor.action(
        search.call({"query": f"prior query number {last} about topic {last % 97}"}),
        f'{{"query": "q{last}"}}',
        "call-repeat",
    )

    def before(action: ActionRecord) -> Callable[[], object]:
        return lambda: governor.before_action(
            loop, action, spent=Spend(), budget=budget, elapsed=0.0, price=Decimal(0)
        )

    def begin() -> object:
        return governor.begin_step(
            loop,
            ctx=None,
            spent=Spend(),
            budget=budget,
            elapsed=0.0,
            max_steps=50,
            max_tool_iterations=None,
        )

    return {
        "before_action, new call (all tiers)": timed(before(fresh)),
        "before_action, exact duplicate": timed(before(repeat)),
        "gain (convergence)": timed(lambda: governor.gain(loop, "a brand new result text")),
        "begin_step": timed(begin),
    }


def main() -> None:
    governor = LoopGovernor()
    print(f"loop governor, median of {REPEATS} checks (microseconds)")
    print(f"  {'check':34s}" + "".join(f"{size:>12,d} prior" for size in SIZES))
    rows: dict[str, list[float]] = {}
    for size in SIZES:
        for name, value in measure(governor, history(governor, size), size).items():
            rows.setdefault(name, []).append(value)
    for name, values in rows.items():
        print(f"  {name:34s}" + "".join(f"{value:18.1f}" for value in values))


if __name__ == "__main__":
    main()
