"""``make bench``: the same agent loop in this library, its peers and plain-Python floors.

Every measurement runs in a fresh subprocess: ours and the floors in the project's venv
(``loops.py``), the peers in their own venv (``peer_loops.py``, in bench/.peers-venv,
which ``peers.py`` makes and fills with pinned versions). Runs are interleaved: each
round runs every framework once, in an order rotated from round to round, so that a
busier minute of the machine falls on all of them alike; the figure reported is the
median over rounds.

Measured per framework: microseconds per transition in memory; the same with a SQLite
checkpoint after every step where the framework has one; import time (a fresh
interpreter per import, median); peak memory (tracemalloc over one run, and the
process's peak resident size); bytes stored per transition in runs of about 100 and
10,000 transitions. Then ``extras.py`` (governor checks, reserve/commit throughput,
resume latency, mypy's time over typing_tests). Results go to bench/results.json and
the tables between the markers in BENCHMARKS.md.

``--quick``: a smoke run (small loops, one round, no mypy), written to
bench/results/quick.json; BENCHMARKS.md is left alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import peers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OURS = sys.executable
MARK_START = "<!-- bench:results:start -->"
MARK_END = "<!-- bench:results:end -->"
T = TypeVar("T")


@dataclass(frozen=True)
class Settings:
    calls: int = 1000  # tool calls per run: about 3,000 transitions
    rounds: int = 5  # interleaved rounds of the in-memory loops
    durable_rounds: int = 3
    repeat_limit_s: float = 30.0  # a run slower than this is not repeated
    sizes: tuple[int, ...] = (100, 10_000)  # transitions, for bytes stored per transition
    size_cap_s: float = 90.0  # a growth run stops here and reports how far it got
    memory_cap_s: float = 60.0  # likewise a run traced by tracemalloc (several times slower)
    import_repeats: int = 7
    # Long runs (tool calls: about three transitions each), in memory and durable.
    long_calls: int = 33_334  # about 100,000 transitions
    long_durable_calls: int = 10_000  # about 30,000 transitions
    long_cap_s: float = 600.0
    quick: bool = False


QUICK = Settings(
    calls=60,
    rounds=1,
    durable_rounds=1,
    sizes=(100, 1000),
    size_cap_s=20.0,
    memory_cap_s=20.0,
    import_repeats=2,
    long_calls=3_000,
    long_durable_calls=3_000,
    long_cap_s=60.0,
    quick=True,
)


@dataclass(frozen=True)
class Framework:
    label: str
    workload: str
    ours: bool  # runs in the project's venv (loops.py), else in the peers' (peer_loops.py)
    version: str = ""  # the distribution whose version is shown

    def command(self, peers_python: str) -> list[str]:
        if self.ours:
            return [OURS, str(HERE / "loops.py"), self.workload]
        return [peers_python, str(HERE / "peer_loops.py"), self.workload]


IN_MEMORY = (
    Framework("attrs floor", "floor-attrs", True, "attrs"),
    Framework("attrs floor, our phases' fields", "floor-attrs-wide", True, "attrs"),
    Framework("statemachine: bare typed transition", "ours-bare", True, "statemachine"),
    Framework("statemachine: phase methods, no runner", "ours-phases", True, "statemachine"),
    Framework("statemachine: full run (Runner)", "ours", True, "statemachine"),
    Framework("statemachine: full run, keep_states=True", "ours-kept", True, "statemachine"),
    Framework("statemachine: full run, OTel SDK on", "ours-otel", True, "opentelemetry-sdk"),
    Framework("transitions", "transitions", False, "transitions"),
    Framework("python-statemachine", "python-statemachine", False, "python-statemachine"),
    Framework("pydantic-graph (1.x)", "pydantic-graph", False, "pydantic-graph"),
    Framework("LangGraph", "langgraph", False, "langgraph"),
    Framework("Burr", "burr", False, "apache-burr"),
)
DURABLE = (
    Framework("SQLite floor: whole state per insert", "floor-sqlite-full", True, ""),
    Framework("SQLite floor: only the change per insert", "floor-sqlite-delta", True, ""),
    Framework("statemachine + SQLiteCheckpointer", "ours-sqlite", True, "statemachine"),
    Framework("LangGraph + SqliteSaver", "langgraph-sqlite", False, "langgraph-checkpoint-sqlite"),
    Framework("Burr + SQLitePersister", "burr-sqlite", False, "apache-burr"),
)
# What the in-memory `ours` run of bench/loops.py imports from us: `import statemachine`
# alone loads only the package's __init__ (each name is imported on first use), so this
# row is the import a run pays, shown next to it so the one is not taken for the other.
RUN_IMPORTS = (
    "from statemachine import Agent, Budget, LoopGovernor, ModelReply, ModelRequest, "
    "Observing, Phase, ReadCall, Runner, Runtime, read_tool; "
    "from statemachine.testing import AutoDenyGate, reply, tool_call"
)
RUN_IMPORTS_LABEL = "statemachine, the names bench/loops.py's run imports"
# (label, ours?, statement): what a user imports to build the loop.
IMPORTS = (
    ("statemachine (this library)", True, "import statemachine"),
    (RUN_IMPORTS_LABEL, True, RUN_IMPORTS),
    ("transitions", False, "import transitions"),
    ("python-statemachine", False, "import statemachine"),
    ("pydantic-graph", False, "import pydantic_graph"),
    ("LangGraph", False, "import langgraph.graph"),
    ("Burr", False, "import burr.core"),
)


def say(text: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")
    sys.stderr.flush()


def job(command: list[str], *flags: str, timeout: float = 3600.0) -> dict[str, Any]:
    """Run one measurement subprocess; its JSON line, or ``{"error": ...}``."""
    try:
        done = subprocess.run(
            [*command, *flags],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rotated(items: tuple[T, ...], by: int) -> list[T]:
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if key in run]
    return statistics.median(values) if values else None


def timed_rounds(
    frameworks: tuple[Framework, ...],
    peers_python: str,
    rounds: int,
    flags: list[str],
    *,
    repeat_limit_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Interleaved rounds; per workload its runs and the median of each measure."""
    runs: dict[str, list[dict[str, Any]]] = {f.workload: [] for f in frameworks}
    skip: set[str] = set()
    for number in range(rounds):
        for framework in rotated(frameworks, number):
            if framework.workload in skip:
                continue
            say(f"round {number + 1}/{rounds}: {framework.workload}")
            result = job(framework.command(peers_python), *flags)
            runs[framework.workload].append(result)
            slow = result.get("seconds", 0.0) > (repeat_limit_s or float("inf"))
            if "error" in result or slow:
                skip.add(framework.workload)  # an error, or too slow to repeat
    out: dict[str, dict[str, Any]] = {}
    for workload, measured in runs.items():
        good = [run for run in measured if "error" not in run]
        summary: dict[str, Any] = {"runs": measured, "n": len(good)}
        for key in ("us_per_transition", "transitions", "bytes_per_transition", "stored_bytes"):
            value = median_of(good, key)
            if value is not None:
                summary[key] = value
        if not good:
            summary["error"] = measured[-1].get("error") if measured else "not run"
        out[workload] = summary
    return out


def import_times(peers_python: str, repeats: int) -> dict[str, dict[str, Any]]:
    """Milliseconds to import each framework in a fresh interpreter (median of repeats).

    Our package is an editable install, which pip does not byte-compile (and this
    machine sets PYTHONDONTWRITEBYTECODE), while the peers' wheels were compiled when
    pip installed them: compile ours first, as a user's ``pip install`` would, so that
    every import is timed from bytecode.
    """
    subprocess.run(
        [OURS, "-m", "compileall", "-q", str(ROOT / "statemachine")], check=True, cwd="/"
    )
    runs: dict[str, list[float]] = {label: [] for label, _, _ in IMPORTS}
    for number in range(repeats):
        for label, ours, statement in rotated(IMPORTS, number):
            code = (
                "import time; started = time.perf_counter(); "
                f"{statement}; print((time.perf_counter() - started) * 1e3)"
            )
            python = OURS if ours else peers_python
            done = subprocess.run(
                [python, "-W", "ignore", "-c", code], cwd="/", capture_output=True, text=True
            )
            if done.returncode == 0:
                runs[label].append(float(done.stdout.strip()))
    return {
        label: {"median_ms": statistics.median(values), "runs_ms": values}
        for label, values in runs.items()
        if values
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions(peers_python: str) -> dict[str, str]:
    ours = (
        "statemachine",
        "attrs",
        "pydantic",
        "pydantic-core",
        "anyio",
        "structlog",
        "opentelemetry-api",
        "opentelemetry-sdk",
        "mypy",
    )
    found: dict[str, str] = {}
    for name in ours:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    listed = subprocess.run(
        [peers_python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    peer_versions = {item["name"].lower(): item["version"] for item in json.loads(listed.stdout)}
    for name in peers.REPORTED:
        if name in peer_versions:
            found[f"{name} (peers venv)" if name in found else name] = peer_versions[name]
    return found


def machine(peers_python: str) -> dict[str, Any]:
    peer_python = subprocess.run(
        [peers_python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "python_peers": peer_python,
        "platform": platform.platform(),
        "load_average_at_start": list(os.getloadavg()),
    }


# --- ratios and targets -------------------------------------------------------------------


def _us(section: dict[str, dict[str, Any]], workload: str) -> float | None:
    value = section.get(workload, {}).get("us_per_transition")
    return float(value) if value is not None else None


def _ratio(top: float | None, bottom: float | None) -> float | None:
    return top / bottom if top is not None and bottom else None


def ratios(results: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    memory, durable = results["in_memory"], results["durable"]
    ours = _us(memory, "ours")
    ours_sqlite = _us(durable, "ours-sqlite")
    return {
        "in_memory_ours_over": {
            f.workload: _ratio(ours, _us(memory, f.workload))
            for f in IN_MEMORY
            if f.workload != "ours"
        },
        "ours_bare_over": {
            floor: _ratio(_us(memory, "ours-bare"), _us(memory, floor))
            for floor in ("floor-attrs", "floor-attrs-wide")
        },
        "durable_ours_over": {
            f.workload: _ratio(ours_sqlite, _us(durable, f.workload))
            for f in DURABLE
            if f.workload != "ours-sqlite"
        },
    }


def _growth(results: dict[str, Any], workload: str) -> tuple[float | None, float | None, str]:
    sizes = results["growth"].get(workload, {})
    keys = sorted(sizes, key=int)
    if len(keys) < 2:
        return None, None, ""
    small, large = sizes[keys[0]], sizes[keys[-1]]
    note = ""
    if large.get("capped"):
        note = f" (stopped at the cap after {large.get('transitions', 0):,} transitions)"
    return small.get("bytes_per_transition"), large.get("bytes_per_transition"), note


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    memory, durable = results["in_memory"], results["durable"]
    bare = _ratio(_us(memory, "ours-bare"), _us(memory, "floor-attrs"))
    faster = _ratio(_us(memory, "langgraph"), _us(memory, "ours"))
    ours_sqlite = _us(durable, "ours-sqlite")
    faster_sqlite = _ratio(_us(durable, "langgraph-sqlite"), ours_sqlite)
    small, large, note = _growth(results, "ours-sqlite")
    growth = _ratio(large, small)
    imported = results["import_ms"].get("statemachine (this library)", {}).get("median_ms")
    run_ms = results["import_ms"].get(RUN_IMPORTS_LABEL, {}).get("median_ms")
    run_note = "" if run_ms is None else f" (a run's imports: {run_ms:.0f} ms)"
    rows: list[tuple[str, float | None, Callable[[float], bool], str]] = [
        ("bare typed transition <= 3x the attrs floor", bare, lambda v: v <= 3, "{:.1f}x"),
        (
            "full transition in memory >= 20x faster than LangGraph",
            faster,
            lambda v: v >= 20,
            "{:.2f}x",
        ),
        (
            "durable SQLite checkpoint per transition <= 100 us",
            ours_sqlite,
            lambda v: v <= 100,
            "{:,.0f} us",
        ),
        (
            "durable: >= 15x faster than LangGraph's SqliteSaver",
            faster_sqlite,
            lambda v: v >= 15,
            "{:.2f}x",
        ),
        (
            "bytes per transition flat as the run grows (large run <= 2x the 100-transition run)",
            growth,
            lambda v: v <= 2,
            "{:.1f}x" + note,
        ),
        ("import statemachine <= 150 ms", imported, lambda v: v <= 150, "{:.0f} ms" + run_note),
    ]
    return [
        {
            "target": name,
            "figure": None if value is None else form.format(value),
            "value": value,
            "met": None if value is None else check(value),
        }
        for name, value, check, form in rows
    ]


# --- the report ---------------------------------------------------------------------------


def _fmt(value: float | None, form: str = "{:,.1f}") -> str:
    return "n/a" if value is None else form.format(value)


def markdown(results: dict[str, Any]) -> str:
    """The generated part of BENCHMARKS.md: machine, versions, tables, targets."""
    m, v, s = results["machine"], results["versions"], results["settings"]
    memory, durable = results["in_memory"], results["durable"]
    lines = [
        f"Generated by `make bench` on {results['date']} (results: `bench/results.json`).",
        "",
        f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['platform']}; Python {m['python']}"
        f" (peers: {m['python_peers']}); load average at start"
        f" {', '.join(f'{x:.2f}' for x in m['load_average_at_start'])},"
        f" at end {', '.join(f'{x:.2f}' for x in m.get('load_average_at_end', []))}.",
        f"- Loop: {s['calls']:,} tool calls per run; in memory the median of up to"
        f" {s['rounds']} interleaved rounds, durable of up to {s['durable_rounds']} (a run"
        f" slower than {s['repeat_limit_s']:.0f} s is not repeated; `n` says how many runs)."
        f" Memory is traced over one run, stopped after {s['memory_cap_s']:.0f} s.",
        "- Versions: " + ", ".join(f"{name} {version}" for name, version in v.items()) + ".",
        "",
        "### In memory",
        "",
        "| framework | us per transition (median) | n | ours (full run) / this | peak KiB"
        " during the run | max RSS MiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    ours = _us(memory, "ours")
    for f in IN_MEMORY:
        row = memory.get(f.workload, {})
        us = _us(memory, f.workload)
        mem = results["memory"].get(f.workload, {})
        peak = _fmt(mem.get("peak_kib"), "{:,.0f}")
        if mem.get("capped"):
            peak += f" (capped at {mem.get('transitions', 0):,} transitions)"
        lines.append(
            f"| {f.label} | {_fmt(us, '{:,.2f}')} | {row.get('n', 0)} |"
            f" {_fmt(_ratio(ours, us), '{:,.2f}')} | {peak} |"
            f" {_fmt(mem.get('maxrss_kib') and mem['maxrss_kib'] / 1024, '{:,.0f}')} |"
        )
    otel = _us(memory, "ours-otel")
    bare = _us(memory, "ours-bare")
    lines += [
        "",
        "Bare typed transition / attrs floor: "
        + _fmt(_ratio(bare, _us(memory, "floor-attrs")), "{:.1f}x")
        + "; / the attrs floor with our phases' fields: "
        + _fmt(_ratio(bare, _us(memory, "floor-attrs-wide")), "{:.1f}x")
        + ".",
        "",
        f"Tracing overhead (OpenTelemetry SDK with a batch processor vs the default no-op"
        f" tracer): {_fmt(otel and ours and otel - ours, '{:,.1f}')} us per transition.",
        "",
        "LangGraph / full run with `Runner(keep_states=True)` (every phase kept in"
        " `RunResult.states`): "
        + _fmt(_ratio(_us(memory, "langgraph"), _us(memory, "ours-kept")), "{:.2f}x")
        + " (the target rows below use the default, which keeps the final phase and the"
        " path).",
        "",
        "### Durable: a SQLite checkpoint after every transition",
        "",
        "| framework | us per transition (median) | n | ours / this | bytes stored per"
        " transition (this run) |",
        "|---|---:|---:|---:|---:|",
    ]
    ours_sqlite = _us(durable, "ours-sqlite")
    for f in DURABLE:
        row = durable.get(f.workload, {})
        us = _us(durable, f.workload)
        lines.append(
            f"| {f.label} | {_fmt(us, '{:,.0f}')} | {row.get('n', 0)} |"
            f" {_fmt(_ratio(ours_sqlite, us), '{:,.2f}')} |"
            f" {_fmt(row.get('bytes_per_transition'), '{:,.0f}')} |"
        )
    sizes = [str(size) for size in s["sizes"]]
    lines += [
        "",
        "### Bytes stored per transition as the run grows",
        "",
        f"Runs of about {' and '.join(f'{int(x):,}' for x in sizes)} transitions; a run is"
        f" stopped after {s['size_cap_s']:.0f} s and reports the transitions it reached.",
        "",
        "| framework | " + " | ".join(f"~{int(x):,} transitions" for x in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for f in DURABLE:
        by_size = results["growth"].get(f.workload, {})
        cells = []
        for size in sizes:
            cell = by_size.get(size, {})
            text = _fmt(cell.get("bytes_per_transition"), "{:,.0f}")
            if cell.get("capped"):
                text += f" (capped at {cell.get('transitions', 0):,})"
            cells.append(text)
        lines.append(f"| {f.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "### Import time (fresh interpreter, median)",
        "",
        "| import | ms |",
        "|---|---:|",
    ]
    for label, timing in results["import_ms"].items():
        lines.append(f"| {label} | {timing['median_ms']:,.0f} |")
    extras = results.get("extras", {})
    if extras:
        lines += _extras_markdown(extras)
    lines += _long_markdown(results.get("long", {}))
    lines += ["", "### Targets of issue 9", "", "| target | measured | met |", "|---|---:|---|"]
    for row in results["targets"]:
        met = "n/a" if row["met"] is None else ("met" if row["met"] else "**missed**")
        lines.append(f"| {row['target']} | {row['figure'] or 'n/a'} | {met} |")
    lines += ["", "### Targets of issue 23", "", "| target | measured | met |", "|---|---:|---|"]
    for row in results.get("targets_23", []):
        met = "n/a" if row["met"] is None else ("met" if row["met"] else "**missed**")
        lines.append(f"| {row['target']} | {row['figure'] or 'n/a'} | {met} |")
    return "\n".join(lines) + "\n"


LONG = (
    ("in memory, default Runner", "ours-long", False),
    ("durable, SQLiteCheckpointer", "ours-sqlite-long", True),
)


def _long_markdown(long: dict[str, Any]) -> list[str]:
    if not long:
        return []
    lines = [
        "",
        "### Long runs",
        "",
        "Microseconds per transition over 3,000 transitions after the first 300 (start) and"
        " over the last 3,000 (end), each the median of its ten blocks of 300 (a burst of"
        " other work on the shared machine stalls a few blocks, not the median); flat"
        " means the end within 1.5x of the start. Peak"
        " memory: tracemalloc's peak over a second run of the same length, and the"
        " process's peak resident size in the timed run.",
        "",
        "| run | transitions | start us | end us | end / start | peak KiB (traced) | max RSS MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, workload, _ in LONG:
        timed = long.get(workload, {}).get("timed", {})
        traced = long.get(workload, {}).get("traced", {})
        lines.append(
            f"| {label} | {timed.get('transitions', 0):,} | {_fmt(timed.get('start_us'))} |"
            f" {_fmt(timed.get('end_us'))} | {_fmt(timed.get('end_over_start'), '{:.2f}x')} |"
            f" {_fmt(traced.get('peak_kib'), '{:,.0f}')} |"
            f" {_fmt((timed.get('maxrss_kib') or 0) / 1024, '{:,.0f}')} |"
        )
    return lines


def targets_23(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue 23, each from this run's figures."""
    memory, durable = results["in_memory"], results["durable"]
    ours, ours_sqlite = _us(memory, "ours"), _us(durable, "ours-sqlite")
    traced = results["memory"]
    peak = _ratio(
        traced.get("ours", {}).get("peak_kib"), traced.get("langgraph", {}).get("peak_kib")
    )
    imports = results["import_ms"]
    graph_ms = imports.get("pydantic-graph", {}).get("median_ms")
    imported = _ratio(imports.get("statemachine (this library)", {}).get("median_ms"), graph_ms)
    # The target reads `import statemachine`; what a run imports is shown beside it.
    run_imported = _ratio(imports.get(RUN_IMPORTS_LABEL, {}).get("median_ms"), graph_ms)
    run_note = "" if run_imported is None else f" (a run's imports: {run_imported:.2f}x)"
    extras = results.get("extras", {})
    checks = extras.get("governor_us", {})
    slowest = max((row.get("10000", 0.0) for row in checks.values()), default=None)
    growths: list[float] = []
    for row in checks.values():
        grown = _ratio(row.get("10000"), row.get("10"))
        if grown is not None:
            growths.append(grown)
    resumed = extras.get("resume", {}).get("10000", {}).get("resume_to_done_ms")
    small, large, note = _growth(results, "ours-sqlite")
    long = results.get("long", {})
    rows: list[tuple[str, float | None, Callable[[float], bool], str]] = [
        (
            "full run in memory, LangGraph's time / ours >= 10x",
            _ratio(_us(memory, "langgraph"), ours),
            lambda v: v >= 10,
            "{:.2f}x",
        ),
        (
            "full run in memory, ours / pydantic-graph 1.x <= 1.0",
            _ratio(ours, _us(memory, "pydantic-graph")),
            lambda v: v <= 1.0,
            "{:.2f}",
        ),
        (
            "durable SQLite, ours / the SQLite delta floor <= 2x",
            _ratio(ours_sqlite, _us(durable, "floor-sqlite-delta")),
            lambda v: v <= 2,
            "{:.1f}x",
        ),
        (
            "durable SQLite, LangGraph's saver time / ours >= 15x",
            _ratio(_us(durable, "langgraph-sqlite"), ours_sqlite),
            lambda v: v >= 15,
            "{:.2f}x",
        ),
        (
            "slowest governor check at 10,000 prior actions <= 20 us",
            slowest,
            lambda v: v <= 20,
            "{:.1f} us",
        ),
        (
            "every governor check at 10,000 prior actions <= 1.5x its figure at 10",
            max(growths, default=None),
            lambda v: v <= 1.5,
            "{:.2f}x (the largest)",
        ),
        (
            "resume of a 10,000-checkpoint run, to Done <= 50 ms",
            resumed,
            lambda v: v <= 50,
            "{:.0f} ms",
        ),
        (
            "peak traced memory of the 3,000-transition run, default Runner <= 2x LangGraph's",
            peak,
            lambda v: v <= 2,
            "{:.2f}x",
        ),
        (
            "import statemachine <= pydantic-graph's in the same run",
            imported,
            lambda v: v <= 1.0,
            "{:.2f}x pydantic-graph's" + run_note,
        ),
        (
            "bytes per transition, 10,000 vs 100 transitions <= 1.5x",
            _ratio(large, small),
            lambda v: v <= 1.5,
            "{:.2f}x" + note,
        ),
    ]
    for label, workload, _ in LONG:
        flat = long.get(workload, {}).get("timed", {}).get("end_over_start")
        rows.append((f"long run {label}: end <= 1.5x start", flat, lambda v: v <= 1.5, "{:.2f}x"))
    return [
        {
            "target": name,
            "figure": None if value is None else form.format(value),
            "value": value,
            "met": None if value is None else check(value),
        }
        for name, value, check, form in rows
    ]


def _by_size(caption: str, table: dict[str, dict[str, float]]) -> list[str]:
    """A captioned table of ``table``'s rows (check -> prior actions -> us); none if empty."""
    if not table:
        return []
    sizes = sorted({size for row in table.values() for size in row}, key=int)
    lines = [
        "",
        caption,
        "",
        "| check | " + " | ".join(f"{int(size):,} prior actions" for size in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, row in table.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[size]:,.1f}" for size in sizes) + " |")
    return lines


def _extras_markdown(extras: dict[str, Any]) -> list[str]:
    lines = ["", "### Loop governor checks (us, median)", ""]
    governor = extras.get("governor_us", {})
    sizes = sorted({size for row in governor.values() for size in row}, key=int)
    lines += [
        "| check | " + " | ".join(f"{int(size):,} prior actions" for size in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, row in governor.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[size]:,.1f}" for size in sizes) + " |")
    lines += _by_size(
        "The semantic tier with `EmbeddingSimilarity` (the embeddings extra; us, median;"
        " not counted among the checks above):",
        extras.get("governor_embedding_us", {}),
    )
    lines += _by_size(
        "`after_action` when every result brings new tokens (an id and ten random"
        " tokens: a growing trigram vocabulary; us; not counted among the checks above,"
        " whose results draw on 60 words):",
        extras.get("governor_varied_us", {}),
    )
    reserve = extras.get("reserve_commit", {})
    if reserve:
        lines += [
            "",
            f"Reserve/commit with {reserve['tasks']:,} concurrent tasks:"
            f" {reserve['pairs_per_s']:,.0f} pairs per second (the same tasks without the"
            f" meter: {reserve['tasks_only_per_s']:,.0f} per second; the meter adds"
            f" {reserve['us_per_pair_over_tasks_only']:,.1f} us per pair).",
        ]
    resume = extras.get("resume", {})
    if resume:
        lines += [
            "",
            "| resume of a run with | last snapshot bytes | load ms | load + decode ms |"
            " resume to Done ms |",
            "|---|---:|---:|---:|---:|",
        ]
        for size, row in resume.items():
            lines.append(
                f"| {int(size):,} checkpoints | {row['last_snapshot_bytes']:,} |"
                f" {row['load_ms']:,.1f} | {row['load_and_decode_ms']:,.1f} |"
                f" {row['resume_to_done_ms']:,.1f} |"
            )
    mypy = extras.get("mypy_typing_tests", {})
    if mypy:
        lines += [
            "",
            f"mypy --strict over typing_tests ({mypy['files']:.0f} files):"
            f" {mypy['cold_s']:.1f} s with a cold cache, {mypy['warm_s']:.1f} s warm.",
        ]
    return lines


def write_benchmarks_md(text: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    body = path.read_text() if path.exists() else f"# Benchmarks\n\n{MARK_START}\n{MARK_END}\n"
    if MARK_START not in body or MARK_END not in body:
        body += f"\n{MARK_START}\n{MARK_END}\n"
    head, rest = body.split(MARK_START, 1)
    _, tail = rest.split(MARK_END, 1)
    path.write_text(f"{head}{MARK_START}\n{text}{MARK_END}{tail}")


# --- main ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run; BENCHMARKS.md kept")
    parser.add_argument("--skip-extras", action="store_true")
    args = parser.parse_args()
    settings = QUICK if args.quick else Settings()
    say("peers' venv")
    peers_python = str(peers.ensure())
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(peers_python),
        "versions": versions(peers_python),
        "settings": asdict(settings),
    }
    calls = ["--calls", str(settings.calls)]
    say("in memory")
    results["in_memory"] = timed_rounds(
        IN_MEMORY, peers_python, settings.rounds, calls, repeat_limit_s=settings.repeat_limit_s
    )
    say("durable")
    results["durable"] = timed_rounds(
        DURABLE,
        peers_python,
        settings.durable_rounds,
        [*calls, "--store"],
        repeat_limit_s=settings.repeat_limit_s,
    )
    say("bytes per transition as the run grows")
    growth: dict[str, dict[str, Any]] = {f.workload: {} for f in DURABLE}
    for size in settings.sizes:
        for f in DURABLE:
            say(f"~{size:,} transitions: {f.workload}")
            sized = ["--calls", str(-(-size // 3)), "--store", "--cap", str(settings.size_cap_s)]
            growth[f.workload][str(size)] = job(f.command(peers_python), *sized)
    results["growth"] = growth
    say("peak memory")
    results["memory"] = {
        f.workload: job(
            f.command(peers_python), *calls, "--memory", "--cap", str(settings.memory_cap_s)
        )
        for f in IN_MEMORY
    }
    say("long runs")
    results["long"] = {}
    for _, workload, stored in LONG:
        size = settings.long_durable_calls if stored else settings.long_calls
        flags = ["--calls", str(size), "--cap", str(settings.long_cap_s)]
        flags += ["--store"] if stored else []
        say(f"{workload}: {size:,} tool calls")
        results["long"][workload] = {
            "timed": job([OURS, str(HERE / "loops.py"), workload], *flags),
            "traced": job([OURS, str(HERE / "loops.py"), workload], *flags, "--memory"),
        }
    say("import time")
    results["import_ms"] = import_times(peers_python, settings.import_repeats)
    if not args.skip_extras:
        say("extras: governor, reserve/commit, resume, mypy")
        flags = ["--json", *(["--quick"] if settings.quick else [])]
        results["extras"] = job([OURS, str(HERE / "extras.py")], *flags)
    results["machine"]["load_average_at_end"] = list(os.getloadavg())
    results["ratios"] = ratios(results)
    results["targets"] = targets(results)
    results["targets_23"] = targets_23(results)
    out = HERE / "results" / "quick.json" if settings.quick else HERE / "results.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    if not settings.quick:
        write_benchmarks_md(text)
    sys.stdout.write(text)
    say(f"results in {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
