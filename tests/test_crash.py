"""Crash injection: the support agent killed with SIGKILL at every transition boundary.

Each kill point runs ``tests/crash_support.py start`` in a subprocess that kills
itself right after the K-th transition was saved (or inside the refund call, after
the payments service committed and before the tool returned), then
``tests/crash_support.py resume`` in a new process on the same files. Both tests run
twice: with the checkpoints in SQLite, and in PostgreSQL (the session's throwaway
cluster, a fresh schema for each process pair).
For every kill point: the run completes (or waits for a person); the refund is paid
exactly once (the payments service's own ledger) with an approving person and never
with a refusing one, who is asked exactly once across both processes; the resumed run
starts at the last saved checkpoint's step and spend and ends with the same step and
spend as a run that was never killed; a refused refund stays refused (the model's
second attempt is suppressed, not asked about again). ``pytest -s`` prints the matrix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).with_name("crash_support.py")
IN_REFUND = "in-refund"
BACKENDS = ["sqlite", "postgres"]


def _store_args(request: pytest.FixtureRequest, backend: str) -> list[str]:
    """The crash_support.py options that pick the checkpoint store: a fresh one each call."""
    if backend == "sqlite":
        return []  # the default: runs.sqlite3 in the work folder
    return ["--dsn", request.getfixturevalue("pg_cluster").fresh_dsn(prefix="crash")]


def _run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), args[0], str(workdir), *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def _json(process: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert process.returncode == 0, process.stderr
    return json.loads(process.stdout.strip().splitlines()[-1])


def _reference(workdir: Path, scenario: str, store: list[str]) -> dict[str, Any]:
    workdir.mkdir()
    return _json(_run(workdir, "start", scenario, *store))


def _crash_and_resume(
    workdir: Path, scenario: str, kill: int | str, store: list[str]
) -> dict[str, Any]:
    workdir.mkdir()
    how = ["--kill-in-refund"] if kill == IN_REFUND else ["--kill-at", str(kill)]
    killed = _run(workdir, "start", scenario, *how, *store)
    assert killed.returncode == -signal.SIGKILL, (kill, killed.returncode, killed.stderr)
    assert killed.stdout == "", killed.stdout  # it never got to the end
    return _json(_run(workdir, "resume", scenario, *store))


@pytest.mark.parametrize("backend", BACKENDS)
def test_killed_at_every_transition_and_inside_the_refund_then_resumed(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    references = {
        s: _reference(tmp_path / f"{s}-reference", s, _store_args(request, backend))
        for s in ("approve", "deny")
    }
    for scenario, expected in (("approve", (1, ["ok"])), ("deny", (0, ["refused", "suppressed"]))):
        final = references[scenario]["final"]
        assert final["status"] == "done"
        assert (references[scenario]["payments"], final["refunds"]) == expected
        assert references[scenario]["gate_asks"] == 1
    points: list[tuple[str, int | str]] = [
        (scenario, kill)
        for scenario, reference in references.items()
        for kill in range(1, len(reference["transitions"]))
    ]
    points.append(("approve", IN_REFUND))
    stores = [_store_args(request, backend) for _ in points]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(
            pool.map(
                lambda point, store: _crash_and_resume(
                    tmp_path / f"{point[0]}-{point[1]}", *point, store
                ),
                points,
                stores,
            )
        )

    rows: list[tuple[Any, ...]] = []
    for (scenario, kill), out in zip(points, outcomes, strict=True):
        reference = references[scenario]
        if kill == IN_REFUND:
            after = "inside refund (paid, result unrecorded)"
        else:
            after = "{} -> {}".format(*reference["transitions"][kill - 1])
        final = out["final"]
        rows.append(
            (
                scenario,
                kill,
                after,
                out["saved"]["seq"],
                out["saved"]["step"],
                out["first"]["step"] if out["first"] else None,
                final["status"],
                final.get("kind"),
                out["payments"],
                out["gate_asks"],
                ",".join(final.get("refunds", [])),
                out.get("effect_before_resume", ""),
            )
        )
    header = (
        "scenario", "kill", "killed after", "seq", "step", "resumed@", "outcome", "phase",
        "paid", "asked", "refunds", "effect",
    )  # fmt: skip
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    print(f"\ncheckpoints in {backend}:")
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)))

    problems: list[str] = []
    for (scenario, kill), out in zip(points, outcomes, strict=True):
        problems += [
            f"{scenario} kill {kill}: {p}" for p in _problems(references[scenario], kill, out)
        ]
    for problem in problems:
        print("NOT HELD:", problem)
    assert not problems, "\n".join(problems)


def _problems(reference: dict[str, Any], kill: int | str, out: dict[str, Any]) -> list[str]:
    """Every property that does not hold for one kill point (empty: all hold)."""
    scenario = "approve" if reference["final"]["refunds"] == ["ok"] else "deny"
    states = reference["states"]
    # Killed inside the refund: the last checkpoint is the ToolCalling the approval led to.
    at = kill if isinstance(kill, int) else _approved_refund_at(reference)
    final, saved, first = out["final"], out["saved"], out["first"]
    checks: list[tuple[bool, str]] = [
        # The run completes or waits for a person; with an idempotent refund it completes.
        (final["status"] in ("done", "paused", "interrupted"), f"outcome {final}"),
        (final["status"] == "done" and final.get("kind") == "Done", f"not Done: {final}"),
        # Paid exactly once with an approving person, never with a refusing one.
        (
            out["paid"] == (["137.32"] if scenario == "approve" else []),
            f"payments {out['paid']}",
        ),
        # The person was asked exactly once over both processes.
        (out["gate_asks"] == 1, f"person asked {out['gate_asks']} times"),
        # The checkpoint the kill left is the last phase saved before it...
        (saved["seq"] == at, f"last checkpoint seq {saved['seq']}, expected {at}"),
        (
            (saved["kind"], saved["step"], saved["spent"])
            == (states[at]["kind"], states[at]["step"], states[at]["spent"]),
            f"last checkpoint {saved} is not phase {at} of the run {states[at]}",
        ),
    ]
    if first is not None:
        checks += [
            # ...and the resumed run starts there: step and spend continue, nothing reset.
            (
                (first["step"], first["spent"]) == (saved["step"], saved["spent"]),
                f"resumed at {first}, saved {saved}",
            ),
            (first["step"] == saved["seq"], f"resumed step {first['step']} != seq {saved['seq']}"),
        ]
    if final["status"] != "interrupted":
        checks += [
            (final["spent"]["tool_calls"] >= saved["spent"]["tool_calls"], f"spent {final}"),
            (Decimal(final["spent"]["cost"]) >= Decimal(saved["spent"]["cost"]), f"cost {final}"),
            # ...and it ends where a run never killed ends: nothing counted twice or lost.
            (
                (final["step"], final["spent"], final["answer"])
                == (
                    reference["final"]["step"],
                    reference["final"]["spent"],
                    reference["final"]["answer"],
                ),
                f"ended {final}, a run never killed ends {reference['final']}",
            ),
            # The refused refund stays refused: the retry is suppressed, the denial kept.
            (
                final["refunds"]
                == (["ok"] if scenario == "approve" else ["refused", "suppressed"]),
                f"refunds {final['refunds']}",
            ),
            (
                final["denied_in_transcript"] == (scenario == "deny"),
                "denial in transcript: " + str(final["denied_in_transcript"]),
            ),
        ]
    # The store holds one checkpoint per phase: seq i is phase i of the run, no repeats.
    expected = [[i, s["kind"]] for i, s in enumerate(states)]
    checks += [
        (
            out["record"] == {"status": "completed", "phase": "Done", "seq": len(states) - 1},
            f"run record {out['record']}",
        ),
        (out["history"] == expected, f"checkpoints {out['history'][at - 1 : at + 3]} ..."),
    ]
    if kill == IN_REFUND:
        checks += [
            # Killed after the service committed, before the result was recorded.
            (out["payments_before_resume"] == 1, f"paid before resume {out}"),
            (out["effect_before_resume"] == "intent", f"effect {out['effect_before_resume']}"),
            (saved["kind"] == "ToolCalling", f"saved {saved}"),
        ]
    return [message for held, message in checks if not held]


def _approved_refund_at(reference: dict[str, Any]) -> int:
    transitions = [tuple(t) for t in reference["transitions"]]
    return transitions.index(("AwaitApproval", "ToolCalling")) + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_processes_resuming_one_run_at_once_let_exactly_one_proceed(
    tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    """Killed mid-run, then resumed by two processes at once: one pays, the other is refused."""
    store = _store_args(request, backend)
    killed = _run(tmp_path, "start", "approve", "--kill-at", "3", *store)
    assert killed.returncode == -signal.SIGKILL
    # The killed process held the new run under a lease (crash_support.START_LEASE, 1 s):
    # both resumes start once it has lapsed, and race for the run.
    time.sleep(1.5)
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent.parent)}
    command = [sys.executable, str(SCRIPT), "resume", str(tmp_path), "approve", "--slow", *store]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    outputs = []
    for process in (first, second):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err.decode()
        outputs.append(json.loads(out.decode().strip().splitlines()[-1]))
    claimed = [out for out in outputs if out.get("claimed")]
    went_on = [out for out in outputs if not out.get("claimed")]
    assert len(claimed) == 1
    assert len(went_on) == 1
    assert went_on[0]["final"]["status"] == "done"
    assert went_on[0]["payments"] == 1
