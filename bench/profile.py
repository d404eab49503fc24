"""Where our transition spends its time: py-spy samples of one workload of ``loops.py``.

``python bench/profile.py ours`` (or ``ours-sqlite``, ``ours-phases``, ...) runs the
workload under py-spy (installed in bench/.peers-venv by ``peers.py``, never in the
project), sampling every thread (a SQLite checkpoint is written in a worker thread),
idle waits left out. Only the samples inside the workload's run are kept (not the
imports). Prints, and writes to bench/results/profile-<workload>.md, two tables: the
functions the samples were in (self) and the functions on the stack (inclusive), each
with its share of the samples.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

import peers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _frames(stack: str) -> list[str]:
    """``func (path:line)`` frames, outermost first, as ``func (path)`` without the line."""
    frames = []
    for frame in stack.split(";"):
        name, _, where = frame.partition(" (")
        path = where.rsplit(":", 1)[0]
        for prefix in (str(ROOT) + "/", "/root/.pyenv/versions/3.11.7/lib/python3.11/"):
            path = path.removeprefix(prefix)
        path = path.split("site-packages/")[-1]
        frames.append(f"{name} ({path})")
    return frames


def _in_run(frames: list[str]) -> bool:
    text = " ".join(frames)
    if "_find_and_load" in text:
        return False  # an import
    return "statemachine/" in text or "loops.py" in text


def profile(workload: str, calls: int, cap: float | None, rate: int, top: int) -> str:
    spy = peers.ensure().with_name("py-spy")
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as folder:
        raw = Path(folder) / "samples.txt"
        command = [sys.executable, str(HERE / "loops.py"), workload, "--calls", str(calls)]
        if workload.endswith("sqlite"):
            command.append("--store")
        if cap is not None:
            command += ["--cap", str(cap)]
        subprocess.run(
            [
                str(spy),
                "record",
                "--format",
                "raw",
                "-r",
                str(rate),
                "-o",
                str(raw),
                "--",
                *command,
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        lines = raw.read_text().splitlines()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        frames = _frames(stack)
        if not frames or not _in_run(frames):
            continue
        count = int(count_text)
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    out = [
        f"py-spy, {rate} samples/s, `loops.py {workload} --calls {calls}`"
        + (f" (capped at {cap:.0f} s)" if cap else "")
        + f": {total:,} samples in the run, idle waits excluded.",
        "",
        "| self | function |",
        "|---:|---|",
    ]
    for frame, count in own.most_common(top):
        out.append(f"| {count / total:.1%} | `{frame}` |")
    out += ["", "| inclusive | function |", "|---:|---|"]
    skip = ("<module>", "main (", "run (", "_run_once", "_run (", "run_until_complete")
    shown = 0
    for frame, count in inclusive.most_common():
        if frame.startswith(skip) or "asyncio/" in frame or "anyio/_backends" in frame:
            continue
        out.append(f"| {count / total:.1%} | `{frame}` |")
        shown += 1
        if shown == top:
            break
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--cap", type=float, default=None)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    text = profile(args.workload, args.calls, args.cap, args.rate, args.top)
    out = HERE / "results" / f"profile-{args.workload}.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
