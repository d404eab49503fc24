"""What every benchmark loop shares. Standard library only: it runs in both virtual envs.

The loop is the same in every framework: Planning -> ToolCalling -> Observing ->
Planning, with a model that answers instantly from a precomputed script (``calls``
tool calls, then an answer) and a read-only tool returning a small dict. A loop
script is run as ``python bench/<file>.py WORKLOAD --calls N [--memory]
[--cap SECONDS] [--db PATH]`` and prints one JSON object (see :func:`main`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

WARMUP_CALLS = 10


class CapReachedError(Exception):
    """The workload ran out of its time cap; the transitions done so far are reported."""


class Cap:
    """A wall-clock cap, checked by the model before each turn."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.deadline: float | None = None

    def start(self) -> None:
        if self.seconds is not None:
            self.deadline = time.perf_counter() + self.seconds

    def check(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise CapReachedError


class Call(NamedTuple):
    """One scripted tool call: the tool's name and its arguments as the model wrote them."""

    name: str
    arguments: str
    key: str


def script(calls: int) -> list[Call | None]:
    """The model's turns: ``calls`` tool calls (each a new key, so none is a duplicate), then
    ``None`` for the final answer."""
    turns: list[Call | None] = [
        Call("lookup", json.dumps({"key": f"k{n}"}), f"k{n}") for n in range(calls)
    ]
    turns.append(None)
    return turns


def small_dict(key: str) -> dict[str, object]:
    """The read-only tool: a small dict."""
    return {"key": key, "value": 42, "unit": "widgets"}


class Outcome(NamedTuple):
    """What a workload reports: transitions taken and, for a store, anything it wants shown."""

    transitions: int
    extra: Mapping[str, Any] = {}


Run = Callable[[], Outcome]
# A workload prepares (builds its graph or agent, precomputes the script) and returns
# the run, which is what is timed.
Workload = Callable[[int, str | None, Cap], Run]


def stored_bytes(path: str) -> int:
    """Bytes of every value in every table of a SQLite file (``length`` of each column).

    Independent of page size and free pages; what the store actually keeps.
    """
    connection = sqlite3.connect(path)
    try:
        total = 0
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for table in tables:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
            if not columns:
                continue
            summed = " + ".join(f'coalesce(sum(length("{column}")), 0)' for column in columns)
            (value,) = connection.execute(f'SELECT {summed} FROM "{table}"').fetchone()
            total += int(value)
        return total
    finally:
        connection.close()


def file_bytes(path: str) -> int:
    """The SQLite file's size on disk, with its write-ahead log if one is left."""
    return sum(os.path.getsize(part) for part in (path, f"{path}-wal") if os.path.exists(part))


def main(workloads: Mapping[str, Workload], argv: list[str] | None = None) -> None:
    """Run one workload once (after a short warm-up run) and print its measurements as JSON.

    ``seconds`` and ``us_per_transition`` time the measured run only. With ``--memory``
    the run is traced with tracemalloc instead (``peak_kib``: the peak of memory
    allocated during the run, imports excluded). ``maxrss_kib`` is the process's peak
    resident size. A workload with a store is given a fresh SQLite file; its
    ``stored_bytes`` (every value in every table) and ``file_bytes`` are reported.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=sorted(workloads))
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--cap", type=float, default=None, help="seconds; stop the run after")
    parser.add_argument("--store", action="store_true", help="give the workload a SQLite file")
    args = parser.parse_args(argv)
    workload = workloads[args.workload]
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        warm_db = os.path.join(folder, "warm.sqlite3") if args.store else None
        workload(WARMUP_CALLS, warm_db, Cap(None))()
        db = os.path.join(folder, "run.sqlite3") if args.store else None
        cap = Cap(args.cap)
        run = workload(args.calls, db, cap)
        if args.memory:
            tracemalloc.start()
        cap.start()
        started = time.perf_counter()
        outcome = run()
        seconds = time.perf_counter() - started
        result: dict[str, Any] = {
            "workload": args.workload,
            "calls": args.calls,
            "transitions": outcome.transitions,
            "seconds": seconds,
            "us_per_transition": seconds / max(outcome.transitions, 1) * 1e6,
            "capped": False,
            **outcome.extra,
        }
        if args.memory:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            result["peak_kib"] = peak / 1024
        result["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if db is not None and os.path.exists(db):
            result["stored_bytes"] = stored_bytes(db)
            result["file_bytes"] = file_bytes(db)
            result["bytes_per_transition"] = result["stored_bytes"] / max(outcome.transitions, 1)
    sys.stdout.write(json.dumps(result) + "\n")
