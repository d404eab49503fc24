"""Two trees of the library side by side by the clock: an interleaved A/B of the bench's run.

``python bench/ab.py TREE_A TREE_B [--kind ours|ours-sqlite] [--calls N] [--rounds R]``
runs the bench's own full run (``loops.ours`` or ``loops.ours-sqlite``: the same agent,
model, gate and transition counter; the model's turns built before the clock starts, as
the bench does) in a fresh interpreter for each tree in turn, A then B then A ..., R
rounds; each interpreter warms up on a short run, then times ``--reps`` runs and reports
their median in microseconds a transition. The result is each tree's median over the
rounds and B's change against A. Interleaving cancels most of a shared machine's drift;
``--lock`` (default ``/tmp/statemachine-ab.lock``) makes concurrent A/Bs on one machine
take turns. The collector is on, as the bench runs (``--no-gc`` turns it off).

Instruction counts (callgrind) say where the work is; this says whether a change is
faster by the clock, which is what the bench's ratios are made of.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The measuring child: the tree's bench/ and the tree itself first on sys.path.
_CHILD = r"""
import gc, json, os, statistics, sys, tempfile, time
tree, kind = sys.argv[1], sys.argv[2]
calls, reps, gc_on = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
sys.path[:0] = [os.path.join(tree, "bench"), tree]
import anyio, loops
import statemachine
from _common import Cap
from statemachine import Runner, SQLiteCheckpointer
from statemachine.testing import AutoDenyGate
here = os.path.realpath(statemachine.__file__)
assert here.startswith(os.path.realpath(tree)), here
if not gc_on:
    gc.disable()

def once(n, folder, tag):
    counted, count = loops._counter()
    model = loops.CappedModel(n, Cap(None))

    async def go():
        if kind == "ours":
            runner = Runner(loops._agent(), model=model, gate=AutoDenyGate(), on_transition=count)
            await runner.run(None, "go", run_id="bench")
        else:
            async with SQLiteCheckpointer(os.path.join(folder, tag + ".db")) as store:
                runner = Runner(
                    loops._agent(), model=model, gate=AutoDenyGate(), on_transition=count,
                    checkpointer=store,
                )
                await runner.run(None, "go", run_id="bench")

    began = time.perf_counter()
    anyio.run(go)
    return (time.perf_counter() - began) / counted[0] * 1e6

with tempfile.TemporaryDirectory() as folder:
    once(30, folder, "warm")
    times = [once(calls, folder, f"r{i}") for i in range(reps)]
print(json.dumps(statistics.median(times)))
"""


def _measure(tree: Path, args: argparse.Namespace) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(tree),
            args.kind,
            str(args.calls),
            str(args.reps),
            "0" if args.no_gc else "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the run in {tree} failed:\n{out.stderr}")
    value: Any = json.loads(out.stdout)
    return float(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="An interleaved A/B of two trees by the clock.")
    parser.add_argument("a", type=Path, help="the tree measured first (the baseline)")
    parser.add_argument("b", type=Path, help="the tree compared with it")
    parser.add_argument("--kind", choices=("ours", "ours-sqlite"), default="ours")
    parser.add_argument("--calls", type=int, default=900, help="tool calls a run")
    parser.add_argument("--rounds", type=int, default=11, help="A then B, this many times")
    parser.add_argument("--reps", type=int, default=3, help="timed runs an interpreter")
    parser.add_argument("--no-gc", action="store_true", help="the collector off")
    parser.add_argument("--lock", default=str(Path(tempfile.gettempdir(), "statemachine-ab.lock")))
    args = parser.parse_args(argv)
    for tree in (args.a, args.b):
        if not (tree / "statemachine" / "__init__.py").is_file():
            parser.error(f"{tree} is not a checkout of the library (no statemachine/)")
    with open(args.lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        began = time.monotonic()
        a: list[float] = []
        b: list[float] = []
        for _ in range(args.rounds):
            a.append(_measure(args.a.resolve(), args))
            b.append(_measure(args.b.resolve(), args))
        took = time.monotonic() - began
    ma, mb = statistics.median(a), statistics.median(b)
    # B's change by round (each round's pair measured back to back), then its median.
    paired = statistics.median((y - x) / x for x, y in zip(a, b, strict=True))
    runs = f"{args.rounds} rounds x {args.reps} runs"
    print(f"{args.kind}, {args.calls} calls, {runs} ({took:.0f} s)")
    print(f"A {args.a}: {ma:.3f} us a transition (min {min(a):.3f}, max {max(a):.3f})")
    print(f"B {args.b}: {mb:.3f} us a transition (min {min(b):.3f}, max {max(b):.3f})")
    print(f"B / A: {mb / ma:.4f} ({(mb / ma - 1) * 100:+.2f}%); paired median {paired * 100:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
