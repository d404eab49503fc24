"""Runs per second with 1, 2 and 4 worker processes, on PostgreSQL and on SQLite.

Each configuration submits the same support requests (instant scripted model; refunds
up to $50 paid by policy, larger ones left waiting for a person, questions answered)
to an empty store, starts the workers with ``--exit-when-idle`` and times from their
start until every run is completed or waiting. Worker start-up (imports, pool) is part
of the time, as it is in production. PostgreSQL runs on a throwaway cluster started
here (the tests' ``pg_cluster`` helper); the machine's core count bounds the speed-up.

    python bench/workers.py [--runs 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pg_cluster import Cluster  # type: ignore[import-not-found]  # noqa: E402

from agents.support import PaymentsService, support_requests, worker_runner  # noqa: E402
from statemachine import (  # noqa: E402
    Checkpointer,
    PostgresCheckpointer,
    RunStatus,
    SQLiteCheckpointer,
)

SETTLED = {RunStatus.COMPLETED, RunStatus.INTERRUPTED}


async def _submit(store: Checkpointer, runs: int) -> None:
    with PaymentsService(":memory:") as unused:
        runner = worker_runner(store, payments=unused)
        for ctx, text in support_requests(runs):
            await runner.submit(ctx, text)


async def _settled(store: Checkpointer) -> bool:
    return all(record.status in SETTLED for record in await store.registry())


def _start(command: list[str], env: dict[str, str], err: Path) -> subprocess.Popen[bytes]:
    # The workers log a line per transition to stderr: kept in a file, read on failure.
    with err.open("wb") as sink:
        return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=sink)


async def one(
    open_store: Callable[[], Any], where: list[str], runs: int, workers: int, folder: Path
) -> tuple[float, float]:
    """Seconds for ``workers`` processes to settle ``runs`` fresh runs: from their start
    (start-up included) and from the first claim to the last run settled (working time)."""
    async with open_store() as store:
        await _submit(store, runs)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["SUPPORT_PAYMENTS_DB"] = str(folder / "payments.sqlite3")
    command = [sys.executable, "-m", "statemachine", "worker", "--agent", "agents.support"]
    command += [*where, "--exit-when-idle", "--poll", "20ms"]
    started = time.perf_counter()
    errs = [folder / f"w{n}.err" for n in range(workers)]
    processes = [_start([*command, "--owner", f"w{n}"], env, errs[n]) for n in range(workers)]
    codes = [await anyio.to_thread.run_sync(process.wait) for process in processes]
    took = time.perf_counter() - started
    for code, err in zip(codes, errs, strict=True):
        if code:
            tail = err.read_text().splitlines()[-15:]
            raise SystemExit(f"{err.stem} exited with {code}:\n" + "\n".join(tail))
    async with open_store() as store:
        if not await _settled(store):
            raise SystemExit("workers exited with runs left unsettled")
        first = min(lease.claimed_at for lease in await store.leases())
        last = max(record.updated_at for record in await store.registry())
    return took, (last - first).total_seconds()


async def bench(runs: int, repeat: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    cluster = Cluster()
    cluster.start()
    try:
        for round_ in range(repeat):
            for workers in (1, 2, 4):  # interleaved: each round measures every configuration
                with tempfile.TemporaryDirectory() as tmp:
                    folder = Path(tmp)
                    dsn = cluster.fresh_dsn(f"b{workers}r{round_}")
                    db = folder / "runs.sqlite3"
                    cases: dict[str, tuple[Callable[[], Any], list[str]]] = {
                        "postgres": (partial(PostgresCheckpointer, dsn), ["--dsn", dsn]),
                        "sqlite": (partial(SQLiteCheckpointer, db), ["--db", str(db)]),
                    }
                    for backend, (opener, where) in cases.items():
                        sub = folder / backend
                        sub.mkdir()
                        took = await one(opener, where, runs, workers, sub)
                        key = f"{backend}/{workers}"
                        results.setdefault(key, []).append(took)
    finally:
        cluster.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "workers.json")
    args = parser.parse_args()
    times = anyio.run(bench, args.runs, args.repeat)
    summary = {}
    for key, samples in sorted(times.items()):
        wall = statistics.median(total for total, _ in samples)
        working = statistics.median(work for _, work in samples)
        summary[key] = {
            "median_wall_s": round(wall, 3),
            "median_working_s": round(working, 3),
            "runs_per_s_wall": round(args.runs / wall, 1),
            "runs_per_s_working": round(args.runs / working, 1),
            "samples": [[round(total, 3), round(work, 3)] for total, work in samples],
        }
    report = {
        "runs": args.runs,
        "repeat": args.repeat,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "results": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.runs} runs, median of {args.repeat}; working = first claim to last run settled")
    print(f"{'backend/workers':<16} {'wall s':>8} {'runs/s':>7} {'working s':>10} {'runs/s':>7}")
    for key, row in summary.items():
        print(
            f"{key:<16} {row['median_wall_s']:>8.3f} {row['runs_per_s_wall']:>7.1f}"
            f" {row['median_working_s']:>10.3f} {row['runs_per_s_working']:>7.1f}"
        )


if __name__ == "__main__":
    main()
