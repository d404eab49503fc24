"""``statemachine runs show ID``, and reading what a run's last checkpoint holds.

A checkpoint is read here as a document, defensively (a field that is missing or of
another shape reads as empty), without loading the run's phase: the command line
does not need the agent's code to show a run. A run held for a person is shown with
its reason, and, when its checkpoint cannot be read (the reason it is held, often),
from its registry row alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, cast

from .. import CheckpointEntry, Checkpointer, CheckpointError, canonical
from ..persist._chunks import _decode, _unpacked
from ..persist._lifecycle import ENDINGS
from ._options import PROG
from ._render import count, emit_json, money, pairs, record_json, seconds, table, when

__all__ = ["decision_text", "fields", "pending", "show"]


def _object(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a document read defensively)."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def fields(document: Mapping[str, Any]) -> dict[str, Any]:
    """The phase's fields in a checkpoint document, decoded."""
    return _object(_decode(_unpacked(_object(document.get("fields")))))


def pending(kind: str, phase_fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The write call a run waiting in AwaitApproval asks a person for, exactly."""
    call = _object(phase_fields.get("call"))
    if kind != "AwaitApproval" or not call:
        return None
    tool = str(call.get("tool", ""))
    arguments = _object(call.get("args"))
    amounts = [value for value in arguments.values() if isinstance(value, Decimal)]
    args_hash = str(call.get("args_hash", ""))
    return {
        "tool": tool,
        "arguments": arguments,
        "call": f"{tool}({canonical(arguments)})",
        "amount": amounts[0] if len(amounts) == 1 else None,
        "args_hash": args_hash,
        "key": f"{tool}:{args_hash}",
        "call_id": str(phase_fields.get("call_id", "")),
        "waiting": str(phase_fields.get("waiting", "")),
    }


def decision_text(document: Mapping[str, Any] | None) -> str:
    """A recorded decision that no worker has picked up yet, in words."""
    if document is None:
        return f"none yet ({PROG} runs approve|deny ID --by NAME)"
    if document.get("kind") == "approval":
        return (
            f"approved by {document.get('approved_by')} at {document.get('approved_at')}; "
            "not yet picked up"
        )
    return f"denied by {document.get('denied_by')} ({document.get('reason')}); not yet picked up"


def _timeline(entries: Sequence[CheckpointEntry], *, ended: bool) -> list[dict[str, Any]]:
    """Each checkpoint with its save time and how long the run stayed in its phase.

    The last checkpoint's phase has no time yet unless the run ended (then it is zero
    by definition: an ending is not a phase anyone waits in).
    """
    rows: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        after = entries[index + 1] if index + 1 < len(entries) else None
        spent = None if after is None else (after.at - entry.at).total_seconds()
        rows.append(
            {"seq": entry.seq, "phase": entry.phase, "at": entry.at.isoformat(), "seconds": spent}
        )
    if ended and rows:
        rows[-1]["seconds"] = 0.0
    return rows


async def _details(store: Checkpointer, run_id: str) -> dict[str, Any]:
    record = await store.record(run_id)
    entries = await store.history(run_id)
    unreadable = None
    check = getattr(store, "verify", None)  # the whole chain, not only from the last snapshot
    try:
        if check is not None:
            await check(run_id)
        _, document = await store.load(run_id)
    except CheckpointError as error:
        if not record.held:
            raise
        document, unreadable = {}, str(error)  # show what the registry knows, and why
    kind = str(document.get("kind", record.phase))
    saved = fields(document)
    verdicts = _object(saved.get("loop")).get("verdicts")
    details: dict[str, Any] = {
        "run": record_json(record),
        "phase": kind,
        "step": saved.get("step"),
        "elapsed": document.get("elapsed"),
        "spent": _object(saved.get("spent")),
        "timeline": _timeline(entries, ended=record.status in ENDINGS),
        "verdicts": [_object(v) for v in cast("list[object]", verdicts)]
        if isinstance(verdicts, list)
        else [],
        "pending_approval": pending(kind, saved),
        "decision": await store.decision(run_id) if record.decision_pending else None,
        "unreadable": unreadable,
    }
    if kind == "Done":
        details["answer"] = saved.get("answer", "")
    if kind == "Failed":
        details["reason"] = saved.get("reason", "")
    return details


def _head(details: Mapping[str, Any]) -> str:
    run = details["run"]
    status = run["status"]
    if run["waiting_for"]:
        status += f" (waiting for {run['waiting_for']})"
    spent = details["spent"]
    head: list[tuple[str, str]] = [
        ("run", run["run_id"]),
        ("agent", run["agent"]),
        ("status", status),
        ("phase", f"{details['phase']}, step {details['step']}"),
        ("updated", f"{when(datetime.fromisoformat(run['updated_at']))} UTC"),
        (
            "spent",
            f"{money(spent.get('cost', 0))}, {count(spent.get('tokens', 0), 'token')}, "
            f"{count(spent.get('tool_calls', 0), 'tool call')}, "
            f"{count(spent.get('model_calls', 0), 'model call')}",
        ),
    ]
    if isinstance(details["elapsed"], int | float | Decimal):
        head.append(("run time", seconds(float(details["elapsed"]))))
    if "answer" in details:
        head.append(("answer", str(details["answer"])))
    if "reason" in details:
        head.append(("failed", str(details["reason"])))
    if run["held"]:
        head.append(("held", f"{run['reason']}; {PROG} runs resume {run['run_id']} lifts it"))
    if run["failures"]:
        said = f"{run['failures']} in a row"
        if run["retry_at"] and not run["held"]:
            retry = datetime.fromisoformat(run["retry_at"])
            said += f"; a worker retries it from {when(retry)} UTC"
        head.append(("failures", said))
    if details["unreadable"] is not None:
        head.append(("checkpoint", f"cannot be read: {details['unreadable']}"))
    return pairs(head)


def _timeline_text(timeline: Sequence[Mapping[str, Any]]) -> str:
    return "timeline\n" + table(
        ("  SEQ", "AT (UTC)", "PHASE", "TIME IN PHASE"),
        (
            (
                f"  {row['seq']}",
                datetime.fromisoformat(row["at"]).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                row["phase"],
                "" if row["seconds"] is None else seconds(row["seconds"]),
            )
            for row in timeline
        ),
    )


def _verdicts_text(verdicts: Sequence[Mapping[str, Any]]) -> str:
    if not verdicts:
        return "verdicts: none"
    return "verdicts\n" + table(
        ("  STEP", "HOOK", "VERDICT", "CHECK", "REASON"),
        (
            (
                f"  {v.get('step')}",
                str(v.get("hook")),
                str(v.get("verdict")),
                str(v.get("check")),
                str(v.get("reason")),
            )
            for v in verdicts
        ),
    )


def _pending_text(call: Mapping[str, Any], decision: Mapping[str, Any] | None) -> str:
    rows = [("call", str(call["call"]))]
    if call["amount"] is not None:
        rows.append(("amount", money(call["amount"])))
    rows += [("key", str(call["key"])), ("waiting", call["waiting"] or "-")]
    rows.append(("decision", decision_text(decision)))
    return "pending approval\n" + pairs(rows, indent="  ")


def _show_text(details: Mapping[str, Any]) -> str:
    parts = [_head(details), _timeline_text(details["timeline"])]
    parts.append(_verdicts_text(details["verdicts"]))
    if details["pending_approval"] is not None:
        parts.append(_pending_text(details["pending_approval"], details["decision"]))
    if details["run"]["stop_requested"]:
        parts.append("stop requested: the worker driving it stops at its next checkpoint")
    return "\n\n".join(parts)


async def show(store: Checkpointer, args: argparse.Namespace) -> int:
    """``runs show ID``: the run's timeline, spend, verdicts and pending approval."""
    details = await _details(store, args.run_id)
    if args.json:
        emit_json(details)
    else:
        print(_show_text(details))
    return 0
