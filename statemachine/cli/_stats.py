"""``statemachine stats``: time spent in each phase, and the retry and fallback rates.

A phase's time runs from one checkpoint's save time to the next, so it includes any
wait for a person in it, and the phase a run is in now counts once it is left. The
retry rate is retries per tool-call attempt; the fallback rate is the share of
answers still not accepted after validation.
"""

from __future__ import annotations

import argparse
import itertools
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

import anyio

from .. import Checkpointer, RunRecord
from ._options import using_store
from ._render import emit_json, pairs, percent, seconds, share, table
from ._show import fields

__all__ = ["run"]

# A reply of the runner's answer guard that was still not accepted after its attempts.
_FALLBACK_REASON: Final = "answer not accepted"
_PHASE_ORDER: Final = (
    "Idle",
    "Planning",
    "AwaitApproval",
    "ToolCalling",
    "Retrying",
    "ModelRetrying",
    "Observing",
    "Responding",
    "Failed",
    "Done",
)


def run(args: argparse.Namespace) -> int:
    """Measure the runs in the store the options name; the exit code."""
    code: int = anyio.run(using_store, args, _stats)
    return code


async def _is_fallback(store: Checkpointer, record: RunRecord) -> bool:
    """Whether a failed run failed because its answer was never accepted."""
    _, document = await store.load(record.run_id)
    reason = fields(document).get("reason", "")
    return isinstance(reason, str) and reason.startswith(_FALLBACK_REASON)


async def _stats(store: Checkpointer, args: argparse.Namespace) -> int:
    records = await store.registry(agent=args.agent)
    spent: dict[str, float] = {}
    entered: Counter[str] = Counter()
    retried_runs = answered = fallbacks = 0
    for record in records:
        entries = await store.history(record.run_id)
        phases = [entry.phase for entry in entries]
        entered.update(phases)
        for before, after in itertools.pairwise(entries):
            took = (after.at - before.at).total_seconds()
            spent[before.phase] = spent.get(before.phase, 0.0) + took
        retried_runs += "Retrying" in phases
        if record.phase == "Done":
            answered += 1
        elif record.phase == "Failed" and await _is_fallback(store, record):
            answered += 1
            fallbacks += 1
    summary = _summary(records, args.agent, spent, entered)
    summary.update(
        runs_with_retries=retried_runs,
        answers=answered,
        fallbacks=fallbacks,
        fallback_rate=share(fallbacks, answered),
    )
    if args.json:
        emit_json(summary)
    else:
        print(_stats_text(summary))
    return 0


def _summary(
    records: list[RunRecord],
    agent: str | None,
    spent: Mapping[str, float],
    entered: Counter[str],
) -> dict[str, Any]:
    total = sum(spent.values())
    order = [kind for kind in _PHASE_ORDER if kind in entered] + sorted(
        kind for kind in entered if kind not in _PHASE_ORDER
    )
    return {
        "agent": agent,
        "runs": len(records),
        "by_status": dict(sorted(Counter(r.status.value for r in records).items())),
        "phases": [
            {
                "phase": kind,
                "entered": entered[kind],
                "seconds": round(spent.get(kind, 0.0), 6),
                "share": share(spent.get(kind, 0.0), total),
            }
            for kind in order
        ],
        "retries": entered["Retrying"],
        "tool_calls": entered["ToolCalling"],
        "retry_rate": share(entered["Retrying"], entered["ToolCalling"]),
    }


def _stats_text(summary: Mapping[str, Any]) -> str:
    statuses = ", ".join(f"{count} {status}" for status, count in summary["by_status"].items())
    who = f" of agent {summary['agent']}" if summary["agent"] else ""
    lines = [f"{summary['runs']} runs{who}" + (f": {statuses}" if statuses else "")]
    if summary["phases"]:
        rows = (
            (row["phase"], str(row["entered"]), seconds(row["seconds"]), percent(row["share"]))
            for row in summary["phases"]
        )
        lines += ["", table(("PHASE", "ENTERED", "TIME", "SHARE OF TIME"), rows)]
    rates = [
        (
            "retry rate",
            f"{percent(summary['retry_rate'])}: {summary['retries']} retried of "
            f"{summary['tool_calls']} tool-call attempts, in "
            f"{summary['runs_with_retries']} of {summary['runs']} runs",
        ),
        (
            "fallback rate",
            f"{percent(summary['fallback_rate'])}: {summary['fallbacks']} of "
            f"{summary['answers']} answers still not accepted after validation",
        ),
    ]
    lines += ["", pairs(rates)]
    return "\n".join(lines)
