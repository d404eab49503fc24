"""Measurements beside the side-by-side loop (run in the project's venv).

- the loop governor's checks with 10 and 10,000 prior actions (``governor.py``);
- reserve/commit throughput of ``BudgetMeter`` with 1,000 concurrent tasks;
- resume latency of a run with 1,000 and 10,000 checkpoints in SQLite;
- mypy's time over ``typing_tests`` (a cold cache, then a warm one).

The tracing overhead (OpenTelemetry SDK on and off) is measured by ``run.py`` with the
other in-memory loops (``ours`` against ``ours-otel``), interleaved with them.

``python bench/extras.py [--quick] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import governor
from _common import Cap, CapReachedError
from loops import CappedModel, _agent

from statemachine import (
    Budget,
    BudgetMeter,
    LoopGovernor,
    ModelReply,
    ModelRequest,
    Runner,
    SQLiteCheckpointer,
    load_phase,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply

ROOT = Path(__file__).resolve().parent.parent


def governor_checks(repeats: int) -> dict[str, dict[str, float]]:
    """Median microseconds of each governor check, by number of prior actions."""
    governor.REPEATS = repeats
    rules = LoopGovernor()
    rows: dict[str, dict[str, float]] = {}
    for size in governor.SIZES:
        measured = governor.measure(rules, governor.history(rules, size), size)
        for name, value in measured.items():
            rows.setdefault(name, {})[str(size)] = value
    return rows


def reserve_commit(tasks: int, rounds: int) -> dict[str, float]:
    """Reserve -> commit pairs per second with ``tasks`` concurrent tasks (median of rounds).

    Each task reserves its estimate, yields to the event loop once (the work), and
    commits less than it reserved. ``tasks_only_per_s`` is the same tasks without the
    meter, the cost of the event loop itself.
    """

    async def with_meter() -> float:
        meter = BudgetMeter(Budget(cost=Decimal("1000000"), tool_calls=10**9))

        async def work() -> None:
            with meter.reserve(cost=Decimal("0.02"), tool_calls=1, purpose="search") as held:
                await anyio.lowlevel.checkpoint()
                held.commit(cost=Decimal("0.01"), tool_calls=1)

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(work)
        elapsed = time.perf_counter() - started
        if meter.spent.tool_calls != tasks or meter.reserved.tool_calls != 0:
            raise RuntimeError(f"the meter lost count: {meter.spent} / {meter.reserved}")
        return elapsed

    async def without_meter() -> float:
        async def work() -> None:
            await anyio.lowlevel.checkpoint()

        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(tasks):
                group.start_soon(work)
        return time.perf_counter() - started

    metered: list[float] = []
    bare: list[float] = []
    for _ in range(rounds):  # interleaved
        metered.append(anyio.run(with_meter))
        bare.append(anyio.run(without_meter))
    return {
        "tasks": tasks,
        "pairs_per_s": tasks / statistics.median(metered),
        "tasks_only_per_s": tasks / statistics.median(bare),
        "us_per_pair_over_tasks_only": (statistics.median(metered) - statistics.median(bare))
        / tasks
        * 1e6,
    }


class _StoppingModel:
    """The precomputed tool calls, one per call, then a raise (as ``CappedModel`` does at
    its cap): the run stops in the ``Planning`` that asked, its last checkpoint."""

    def __init__(self, calls: int) -> None:
        self.turns = CappedModel(calls, Cap(None))
        self.left = calls

    async def complete(self, request: ModelRequest) -> ModelReply:
        if self.left == 0:
            raise CapReachedError
        self.left -= 1
        return await self.turns.complete(request)


async def _build_run(checkpointer: SQLiteCheckpointer, run_id: str, size: int) -> None:
    """Run a real run of about ``size`` checkpoints in ``checkpointer`` (as
    ``loops.ours_sqlite`` does: every transition saved, snapshots and deltas as a real run
    writes them), stopped in a ``Planning`` (which a resume runs again)."""
    runner = Runner(
        _agent(),
        model=_StoppingModel(size // 3),
        gate=AutoDenyGate(),
        checkpointer=checkpointer,
    )
    try:
        await runner.run(None, "go", run_id=run_id)
    except CapReachedError:
        return
    raise RuntimeError("the built run finished instead of stopping at its cap")


def resume_latency(sizes: tuple[int, ...], repeats: int) -> dict[str, dict[str, float]]:
    """Per run size: the load (one snapshot and its deltas), the load plus decoding the
    phase, and a whole ``Runner.resume`` (load, then the two transitions left: the model
    answers at once), of a real run stopped in a ``Planning``; and how many deltas (and
    bytes of them) the load replays after the last snapshot."""
    out: dict[str, dict[str, float]] = {}

    async def measure(size: int, folder: str) -> dict[str, float]:
        agent = _agent()
        async with SQLiteCheckpointer(os.path.join(folder, f"resume-{size}.sqlite3")) as store:
            built = time.perf_counter()
            await _build_run(store, "bench", size)
            built = time.perf_counter() - built
            loads: list[float] = []
            decoded: list[float] = []
            for _ in range(repeats):
                started = time.perf_counter()
                _, document = await store.load("bench")
                loads.append(time.perf_counter() - started)
                load_phase(document, agents={agent.name: agent}, run_id="bench")
                decoded.append(time.perf_counter() - started)
            entries = await store.history("bench")
            last = max(n for n, entry in enumerate(entries) if entry.snapshot)
            runner = Runner(
                agent,
                model=ScriptedModel([reply("done")]),
                gate=AutoDenyGate(),
                checkpointer=store,
            )
            started = time.perf_counter()
            result = await runner.resume("bench")
            resumed = time.perf_counter() - started
            if not result.ok:
                raise RuntimeError(f"the resumed run did not finish: {result.final!r}")
        return {
            "checkpoints": len(entries),
            "last_snapshot_bytes": entries[last].size,
            # What a load replays after the snapshot.
            "deltas_replayed": len(entries) - last - 1,
            "delta_bytes_replayed": sum(entry.size for entry in entries[last + 1 :]),
            "last_phase": float(entries[-1].phase == "Planning"),
            "load_ms": statistics.median(loads) * 1e3,
            "load_and_decode_ms": statistics.median(decoded) * 1e3,
            "resume_to_done_ms": resumed * 1e3,
            "build_s": built,
        }

    with tempfile.TemporaryDirectory(prefix="bench-resume-") as folder:
        for size in sizes:
            out[str(size)] = anyio.run(measure, size, folder)
    return out


def mypy_time() -> dict[str, float]:
    """Wall seconds of ``mypy --strict typing_tests``: a cold cache, then the same again."""
    mypy = str(Path(sys.executable).with_name("mypy"))
    with tempfile.TemporaryDirectory(prefix="bench-mypy-") as cache:
        times: list[float] = []
        clean = True
        for _ in range(2):
            started = time.perf_counter()
            done = subprocess.run(
                [mypy, "--strict", "--cache-dir", cache, "typing_tests"],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            times.append(time.perf_counter() - started)
            clean = clean and done.returncode == 0
        files = len(list((ROOT / "typing_tests").glob("*.py")))
    return {
        "files": files,
        "cold_s": times[0],
        "warm_s": times[1],
        "clean": float(clean),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    quick: bool = args.quick
    results: dict[str, Any] = {
        "governor_us": governor_checks(20 if quick else 200),
        # The semantic tier with the embedding model (issue 22): not a governor_us row, so
        # that the model's own milliseconds are not read as the governor's check.
        "governor_embedding_us": governor.embedding_checks(5 if quick else 50),
        # after_action when every result brings new tokens: not a governor_us row either
        # (those keep the method); what a run with varied results pays.
        "governor_varied_us": governor.varied_checks(20 if quick else 200),
        "reserve_commit": reserve_commit(1000, 2 if quick else 7),
        "resume": resume_latency((100, 1000) if quick else (1000, 10_000), 2 if quick else 5),
        "mypy_typing_tests": {} if quick else mypy_time(),
    }
    if args.json:
        sys.stdout.write(json.dumps(results) + "\n")
    else:
        sys.stdout.write(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
