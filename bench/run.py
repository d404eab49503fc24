"""Transition cost in memory, next to its floor (frozen attrs objects returning the next one).

Run with ``make bench``. Prints microseconds per transition (median of interleaved
repeats) and the ratio to the floor. Peers (LangGraph, pydantic-graph, ...) are the
benchmarks issue's work; this is the in-process baseline they will be compared with.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import anyio
import attrs
from pydantic import BaseModel

from statemachine import Agent, Budget, ModelReply, ModelRequest, Runner, ToolRequest, read_tool
from statemachine.testing import AutoDenyGate

CALLS = 1_000
REPEATS = 7


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, object]:
    return {"key": args.key, "value": 42}


class InstantModel:
    """Answers from a precomputed script: CALLS tool calls, then a reply."""

    def __init__(self) -> None:
        self.turn = 0
        # Precomputed: each call asks for another key, so no call is a duplicate.
        self.calls = [
            ModelReply(
                tool_calls=(ToolRequest(name="lookup", arguments=f'{{"key": "k{n}"}}'),),
                finish_reason="tool_calls",
            )
            for n in range(CALLS)
        ]
        self.done = ModelReply(text="done")

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.turn += 1
        return self.calls[self.turn - 1] if self.turn <= CALLS else self.done


def ours() -> tuple[float, int]:
    agent = Agent[None](name="bench", tools=[lookup], budget=Budget(), max_steps=10**9)
    # The plateau check would (rightly) finish this repetitive run early; measure the loop.
    runner = Runner(agent, model=InstantModel(), gate=AutoDenyGate())
    started = time.perf_counter()
    result = anyio.run(runner.run, None, "go")
    elapsed = time.perf_counter() - started
    transitions = len(result.states) - 1
    return elapsed / transitions * 1e6, transitions


@attrs.frozen
class FloorPlanning:
    n: int

    def call(self) -> FloorCalling:
        return FloorCalling(self.n)


@attrs.frozen
class FloorCalling:
    n: int

    def done(self) -> FloorObserving:
        return FloorObserving(self.n)


@attrs.frozen
class FloorObserving:
    n: int

    def observe(self) -> FloorPlanning:
        return FloorPlanning(self.n + 1)


def floor() -> tuple[float, int]:
    state: Any = FloorPlanning(0)
    started = time.perf_counter()
    for _ in range(CALLS):
        state = state.call().done().observe()
    elapsed = time.perf_counter() - started
    return elapsed / (3 * CALLS) * 1e6, 3 * CALLS


def main() -> None:
    runs: dict[str, list[float]] = {"statemachine (full run loop)": [], "attrs floor": []}
    for _ in range(REPEATS):  # interleaved, so drift hits both alike
        runs["statemachine (full run loop)"].append(ours()[0])
        runs["attrs floor"].append(floor()[0])
    medians = {name: statistics.median(values) for name, values in runs.items()}
    base = medians["attrs floor"]
    print(f"{CALLS} tool calls, median of {REPEATS} interleaved runs")
    for name, value in medians.items():
        print(f"  {name:30s} {value:8.2f} us/transition  {value / base:6.1f}x floor")


if __name__ == "__main__":
    main()
