"""``python -m statemachine runs ...`` and ``... stats``: the operators' command line.

Which store is read: PostgreSQL when ``--dsn`` (or ``STATEMACHINE_DSN``, unless
``--db`` is given) names one, else the SQLite file ``--db`` (or ``STATEMACHINE_DB``,
else ``./statemachine.db``), which must exist. An encrypted store needs its keys:
``--key-file PATH`` (a file holding ``id:base64key`` entries, the current key first,
separated by commas or lines) or ``STATEMACHINE_CHECKPOINT_KEYS`` in the same form.

``runs approve`` and ``runs deny`` only record the person's decision in the store
(``submit_decision``), from any machine; ``runs stop`` asks the store to stop the run
(``request_stop``). ``runs resume ID`` leaves the run to the workers (runnable again),
or with ``--agent MODULE[:FUNCTION]`` drives it in this process with the runner that
the worker command's factory (``worker_runner(checkpointer)``) builds.

Every command prints aligned text for a person, or one JSON document with
``--json``. Exit codes: 0 done, 1 refused (an unknown run, a run not in a state
where the command applies, a wrong key, a missing database), 2 a command line that
cannot be read. A refusal is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import re
import sqlite3
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final, NoReturn, cast

import anyio

from ._approval import Approve, Denial, dump_decision
from ._codec import _decode
from ._crypto import ENV_VAR as KEYS_VAR
from ._crypto import CheckpointCipher
from ._errors import CheckpointCorruptError, StatemachineError, UnknownRunError
from ._json import canonical, dumps
from ._lifecycle import ENDINGS, RunStatus
from ._runner import Runner
from ._store import CheckpointEntry, Checkpointer, LeaseRecord, RunRecord, SQLiteCheckpointer

__all__ = ["main"]

DB_VAR: Final = "STATEMACHINE_DB"
DSN_VAR: Final = "STATEMACHINE_DSN"
DEFAULT_DB: Final = "statemachine.db"
_PROG: Final = "statemachine"
# A reply of the runner's answer guard that was still not accepted after its attempts.
_FALLBACK_REASON: Final = "answer not accepted"
_DURATION = re.compile(r"(\d+)\s*([smhdw])\Z")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


class CliError(Exception):
    """A refusal: printed as one line on stderr, exit code ``code``."""

    def __init__(self, message: str, *, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, but a command line it cannot read is one line on stderr and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)", code=2)


# --- the command line ----------------------------------------------------------------


def _common() -> _Parser:
    common = _Parser(add_help=False)
    group = common.add_argument_group("store")
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        metavar="PATH",
        help=f"the SQLite file (default: ${DB_VAR}, else ./{DEFAULT_DB})",
    )
    where.add_argument(
        "--dsn",
        metavar="DSN",
        help=f"a PostgreSQL connection string; used instead of --db (default: ${DSN_VAR})",
    )
    group.add_argument(
        "--key-file",
        metavar="PATH",
        help=f"keys of an encrypted store, id:base64key, current first (default: ${KEYS_VAR})",
    )
    common.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    return common


def _parser(command: str) -> _Parser:
    common = _common()
    if command == "stats":
        stats = _Parser(
            prog=f"{_PROG} stats",
            parents=[common],
            description="Time spent in each phase, and the retry and fallback rates.",
        )
        stats.add_argument("--agent", metavar="NAME", help="only runs of this agent")
        return stats
    runs = _Parser(prog=f"{_PROG} runs", description="List, inspect and steer saved runs.")
    sub = runs.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)

    def action(name: str, help_: str) -> argparse.ArgumentParser:
        described = f"{help_[0].upper()}{help_[1:]}."
        return sub.add_parser(name, parents=[common], help=help_, description=described)

    listing = action("list", "list runs, oldest update first")
    listing.add_argument(
        "--status",
        action="append",
        choices=[status.value for status in RunStatus],
        help="only runs in this status (repeat for several)",
    )
    listing.add_argument("--agent", metavar="NAME", help="only runs of this agent")
    listing.add_argument(
        "--waiting",
        action="store_true",
        help="only runs waiting for a person to approve or deny a call",
    )
    show = action("show", "a run's timeline, spend, verdicts and pending approval")
    show.add_argument("run_id", metavar="ID")
    approve = action("approve", "approve the call a run waits on (a worker or resume goes on)")
    approve.add_argument("run_id", metavar="ID")
    approve.add_argument("--by", required=True, metavar="NAME", help="who approves")
    deny = action("deny", "deny the call a run waits on; the model is told the reason")
    deny.add_argument("run_id", metavar="ID")
    deny.add_argument("--by", required=True, metavar="NAME", help="who denies")
    deny.add_argument("--reason", required=True, help="why, in words the model can use")
    resume = action("resume", "go on with a run: here with --agent, else by the next free worker")
    resume.add_argument("run_id", metavar="ID")
    resume.add_argument(
        "--agent",
        metavar="MODULE[:FUNCTION]",
        help=(
            "run it here, with the runner the module's worker_runner(checkpointer) builds "
            "(the worker command's factory); without it the run is left to the workers"
        ),
    )
    resume.add_argument("--note", default="", help="who lets a paused run go on, and why")
    stop = action("stop", "stop a run (a worker driving it: at its next checkpoint)")
    stop.add_argument("run_id", metavar="ID")
    abort = action("abort", "end a run for good; nothing is undone, the record stays")
    abort.add_argument("run_id", metavar="ID")
    purge = action("purge", "remove completed and aborted runs older than a window")
    purge.add_argument(
        "--older-than",
        required=True,
        type=_duration,
        metavar="AGE",
        help="e.g. 30d, 12h, 90m, 2w",
    )
    return runs


def _duration(text: str) -> timedelta:
    found = _DURATION.match(text.strip())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age; write a number and a unit: 30d, 12h, 90m, 45s or 2w"
        )
    number, unit = found.groups()
    return timedelta(**{_UNITS[unit]: int(number)})


def main(argv: Sequence[str]) -> int:
    """Run ``runs ...`` or ``stats ...`` (``argv[0]``); return the exit code."""
    command, rest = argv[0], list(argv[1:])
    try:
        if command not in {"runs", "stats"}:
            raise CliError(f"{_PROG}: unknown command {command!r}; use runs or stats", code=2)
        args = _parser(command).parse_args(rest)
        code: int = anyio.run(_dispatch, command, args)
        return code
    except KeyboardInterrupt:
        _refuse(f"{_PROG}: interrupted")
        return 130
    except Exception as error:
        return _report(_unwrapped(error))


def _unwrapped(error: BaseException) -> BaseException:
    """The one error inside task groups' exception groups (the runner drives in one)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _report(error: BaseException) -> int:
    """Say what went wrong in one line on stderr; return the exit code."""
    match error:
        case CliError():
            _refuse(str(error))
            return error.code
        case UnknownRunError():
            _refuse(
                f"{_PROG}: no run {error.run_id!r} in {error.store}: it was never saved there, "
                f"or was purged; {_PROG} runs list shows the runs there are"
            )
        case StatemachineError():
            _refuse(f"{_PROG}: {error}")
        case BrokenPipeError():
            # The reader went away (``| head``): say nothing more, to a stdout that is gone.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        case sqlite3.Error() | OSError():
            _refuse(f"{_PROG}: {type(error).__name__}: {error}")
        case _:
            # Not one of ours (an agent's own code, say): still one line, named by its type.
            _refuse(f"{_PROG}: unexpected {type(error).__name__}: {error}")
    return 1


def _refuse(message: str) -> None:
    print(" ".join(message.split()), file=sys.stderr)


# --- the store ---------------------------------------------------------------------------


def _sealer(args: argparse.Namespace) -> CheckpointCipher | None:
    if args.key_file:
        path = Path(args.key_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise CliError(
                f"{_PROG}: cannot read the key file {str(path)!r} ({error.strerror})"
            ) from None
        entries = ",".join(part.strip() for part in re.split(r"[,\n]", text) if part.strip())
        return CheckpointCipher.from_env(f"key file {path}", environ={f"key file {path}": entries})
    if os.environ.get(KEYS_VAR, "").strip():
        return CheckpointCipher.from_env()
    return None


def _open(args: argparse.Namespace) -> Checkpointer:
    sealer = _sealer(args)
    # An explicit --db wins over $STATEMACHINE_DSN, as in the worker command.
    dsn = args.dsn or ("" if args.db else os.environ.get(DSN_VAR, ""))
    if dsn:
        try:
            postgres = importlib.import_module("statemachine._postgres")
        except ImportError as error:
            raise CliError(
                f"{_PROG}: PostgreSQL is not available here ({error}); install psycopg, "
                "or use --db for a SQLite file"
            ) from None
        store: Checkpointer = postgres.PostgresCheckpointer(dsn, sealer=sealer)
        return store
    path = Path(args.db or os.environ.get(DB_VAR) or DEFAULT_DB)
    if not path.is_file():
        raise CliError(
            f"{_PROG}: no database at {str(path)!r}; give the runs' SQLite file with "
            f"--db PATH (or ${DB_VAR}), or a PostgreSQL store with --dsn"
        )
    return SQLiteCheckpointer(path, sealer=sealer)


async def _close(store: Checkpointer) -> None:
    aclose: Callable[[], Any] | None = getattr(store, "aclose", None)
    if aclose is not None:
        await aclose()


async def _dispatch(command: str, args: argparse.Namespace) -> int:
    store = _open(args)
    try:
        try:
            if command == "stats":
                return await _stats(store, args)
            handler = _ACTIONS[args.action]
            return await handler(store, args)
        except CheckpointCorruptError as error:
            if _sealer_given(args) or "is not JSON" not in error.detail:
                raise
            raise CliError(
                f"{_PROG}: the checkpoints of run {error.run_id!r} are not plain JSON: the "
                "store is encrypted (or damaged). Give its keys with --key-file PATH or "
                f"${KEYS_VAR}"
            ) from None
    finally:
        with anyio.CancelScope(shield=True):
            await _close(store)


def _sealer_given(args: argparse.Namespace) -> bool:
    return bool(args.key_file or os.environ.get(KEYS_VAR, "").strip())


# --- output ------------------------------------------------------------------------------


def _emit_json(value: Any) -> None:
    print(dumps(value))


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    body = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(headers))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in body
    )


def _pairs(rows: Iterable[tuple[str, str]], indent: str = "") -> str:
    items = list(rows)
    width = max((len(label) for label, _ in items), default=0)
    return "\n".join(f"{indent}{label.ljust(width)}  {value}" for label, value in items)


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.3f}s"
    minutes, seconds = divmod(value, 60)
    if minutes < 60:
        return f"{int(minutes)}m{seconds:02.0f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes):02d}m"


def _record_json(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "agent": record.agent,
        "status": record.status.value,
        "phase": record.phase,
        "waiting_for": record.waiting_for,
        "updated_at": record.updated_at.isoformat(),
        "seq": record.seq,
        "stop_requested": record.stop_requested,
        "decision_pending": record.decision_pending,
    }


def _waits_for_approval(record: RunRecord) -> bool:
    """Whether the run waits at a write call for a person's approval (decided or not)."""
    return (
        record.status == RunStatus.INTERRUPTED
        and record.phase == "AwaitApproval"
        and record.waiting_for.startswith("approval of ")
    )


def _waiting_for(record: RunRecord) -> str:
    if record.stop_requested:
        return "stop requested: the worker driving it stops at its next checkpoint"
    if record.decision_pending:
        return "a worker: the decision is recorded"
    return record.waiting_for


# --- runs list ---------------------------------------------------------------------------


async def _list(store: Checkpointer, args: argparse.Namespace) -> int:
    records = await store.registry(status=args.status, agent=args.agent)
    if args.waiting:  # a person's decision is still needed
        records = [r for r in records if _waits_for_approval(r) and not r.decision_pending]
    if args.json:
        _emit_json([_record_json(record) for record in records])
        return 0
    if not records:
        print("no runs match")
        return 0
    print(
        _table(
            ("RUN", "AGENT", "STATUS", "PHASE", "UPDATED (UTC)", "WAITING FOR"),
            (
                (
                    r.run_id,
                    r.agent,
                    r.status.value,
                    r.phase,
                    _when(r.updated_at),
                    _waiting_for(r),
                )
                for r in records
            ),
        )
    )
    return 0


# --- runs show -----------------------------------------------------------------------------


def _object(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a document read defensively)."""
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def _fields(document: Mapping[str, Any]) -> dict[str, Any]:
    return _object(_decode(_object(document.get("fields"))))


def _timeline(entries: Sequence[CheckpointEntry], *, ended: bool) -> list[dict[str, Any]]:
    """Each checkpoint with its save time and how long the run stayed in its phase.

    The last checkpoint's phase has no time yet unless the run ended (then it is zero
    by definition: an ending is not a phase anyone waits in).
    """
    rows: list[dict[str, Any]] = []
    for index, entry in enumerate(entries):
        after = entries[index + 1] if index + 1 < len(entries) else None
        seconds = None if after is None else (after.at - entry.at).total_seconds()
        rows.append(
            {"seq": entry.seq, "phase": entry.phase, "at": entry.at.isoformat(), "seconds": seconds}
        )
    if ended and rows:
        rows[-1]["seconds"] = 0.0
    return rows


def _pending(kind: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The write call a run waiting in AwaitApproval asks a person for, exactly."""
    call = _object(fields.get("call"))
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
        "call_id": str(fields.get("call_id", "")),
        "waiting": str(fields.get("waiting", "")),
    }


async def _details(store: Checkpointer, run_id: str) -> dict[str, Any]:
    record = await store.record(run_id)
    entries = await store.history(run_id)
    _, document = await store.load(run_id)
    kind = str(document.get("kind", record.phase))
    fields = _fields(document)
    verdicts = _object(fields.get("loop")).get("verdicts")
    details: dict[str, Any] = {
        "run": _record_json(record),
        "phase": kind,
        "step": fields.get("step"),
        "elapsed": document.get("elapsed"),
        "spent": _object(fields.get("spent")),
        "timeline": _timeline(entries, ended=record.status in ENDINGS),
        "verdicts": [_object(v) for v in cast("list[object]", verdicts)]
        if isinstance(verdicts, list)
        else [],
        "pending_approval": _pending(kind, fields),
        "decision": await store.decision(run_id) if record.decision_pending else None,
    }
    if kind == "Done":
        details["answer"] = fields.get("answer", "")
    if kind == "Failed":
        details["reason"] = fields.get("reason", "")
    return details


def _count(number: Any, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _money(value: Any) -> str:
    return f"${value}" if isinstance(value, Decimal | int) else str(value)


def _show_text(details: Mapping[str, Any]) -> str:
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
        ("updated", f"{_when(datetime.fromisoformat(run['updated_at']))} UTC"),
        (
            "spent",
            f"{_money(spent.get('cost', 0))}, {_count(spent.get('tokens', 0), 'token')}, "
            f"{_count(spent.get('tool_calls', 0), 'tool call')}, "
            f"{_count(spent.get('model_calls', 0), 'model call')}",
        ),
    ]
    if isinstance(details["elapsed"], int | float | Decimal):
        head.append(("run time", _seconds(float(details["elapsed"]))))
    if "answer" in details:
        head.append(("answer", str(details["answer"])))
    if "reason" in details:
        head.append(("failed", str(details["reason"])))
    parts = [_pairs(head)]
    timeline = details["timeline"]
    parts.append(
        "timeline\n"
        + _table(
            ("  SEQ", "AT (UTC)", "PHASE", "TIME IN PHASE"),
            (
                (
                    f"  {row['seq']}",
                    datetime.fromisoformat(row["at"]).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                    row["phase"],
                    "" if row["seconds"] is None else _seconds(row["seconds"]),
                )
                for row in timeline
            ),
        )
    )
    verdicts = details["verdicts"]
    if verdicts:
        parts.append(
            "verdicts\n"
            + _table(
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
        )
    else:
        parts.append("verdicts: none")
    pending = details["pending_approval"]
    if pending is not None:
        rows = [("call", pending["call"])]
        if pending["amount"] is not None:
            rows.append(("amount", _money(pending["amount"])))
        rows += [("key", pending["key"]), ("waiting", pending["waiting"] or "-")]
        rows.append(("decision", _decision_text(details["decision"])))
        parts.append("pending approval\n" + _pairs(rows, indent="  "))
    if run["stop_requested"]:
        parts.append("stop requested: the worker driving it stops at its next checkpoint")
    return "\n\n".join(parts)


async def _show(store: Checkpointer, args: argparse.Namespace) -> int:
    details = await _details(store, args.run_id)
    if args.json:
        _emit_json(details)
    else:
        print(_show_text(details))
    return 0


# --- stats -----------------------------------------------------------------------------------


async def _stats(store: Checkpointer, args: argparse.Namespace) -> int:
    records = await store.registry(agent=args.agent)
    seconds: dict[str, float] = {}
    entered: Counter[str] = Counter()
    retried_runs = 0
    answered = fallbacks = 0
    for record in records:
        entries = await store.history(record.run_id)
        phases = [entry.phase for entry in entries]
        entered.update(phases)
        for before, after in itertools.pairwise(entries):
            seconds[before.phase] = (
                seconds.get(before.phase, 0.0) + (after.at - before.at).total_seconds()
            )
        if "Retrying" in phases:
            retried_runs += 1
        if record.phase == "Done":
            answered += 1
        elif record.phase == "Failed":
            _, document = await store.load(record.run_id)
            reason = _fields(document).get("reason", "")
            if isinstance(reason, str) and reason.startswith(_FALLBACK_REASON):
                answered += 1
                fallbacks += 1
    total = sum(seconds.values())
    tool_calls = entered["ToolCalling"]
    retries = entered["Retrying"]
    order = [kind for kind in _PHASE_ORDER if kind in entered] + sorted(
        kind for kind in entered if kind not in _PHASE_ORDER
    )
    summary: dict[str, Any] = {
        "agent": args.agent,
        "runs": len(records),
        "by_status": dict(sorted(Counter(r.status.value for r in records).items())),
        "phases": [
            {
                "phase": kind,
                "entered": entered[kind],
                "seconds": round(seconds.get(kind, 0.0), 6),
                "share": _share(seconds.get(kind, 0.0), total),
            }
            for kind in order
        ],
        "retries": retries,
        "tool_calls": tool_calls,
        "retry_rate": _share(retries, tool_calls),
        "runs_with_retries": retried_runs,
        "answers": answered,
        "fallbacks": fallbacks,
        "fallback_rate": _share(fallbacks, answered),
    }
    if args.json:
        _emit_json(summary)
    else:
        print(_stats_text(summary))
    return 0


_PHASE_ORDER: Final = (
    "Idle",
    "Planning",
    "AwaitApproval",
    "ToolCalling",
    "Retrying",
    "Observing",
    "Responding",
    "Failed",
    "Done",
)


def _share(part: float, whole: float) -> float | None:
    return None if whole == 0 else round(part / whole, 6)


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def _stats_text(summary: Mapping[str, Any]) -> str:
    statuses = ", ".join(f"{count} {status}" for status, count in summary["by_status"].items())
    who = f" of agent {summary['agent']}" if summary["agent"] else ""
    lines = [f"{summary['runs']} runs{who}" + (f": {statuses}" if statuses else "")]
    if summary["phases"]:
        lines += [
            "",
            _table(
                ("PHASE", "ENTERED", "TIME", "SHARE OF TIME"),
                (
                    (
                        row["phase"],
                        str(row["entered"]),
                        _seconds(row["seconds"]),
                        _percent(row["share"]),
                    )
                    for row in summary["phases"]
                ),
            ),
        ]
    lines += [
        "",
        _pairs(
            [
                (
                    "retry rate",
                    f"{_percent(summary['retry_rate'])}: {summary['retries']} retried of "
                    f"{summary['tool_calls']} tool-call attempts, in "
                    f"{summary['runs_with_retries']} of {summary['runs']} runs",
                ),
                (
                    "fallback rate",
                    f"{_percent(summary['fallback_rate'])}: {summary['fallbacks']} of "
                    f"{summary['answers']} answers still not accepted after validation",
                ),
            ]
        ),
    ]
    return "\n".join(lines)


# --- approve, deny, stop, abort, resume, purge -------------------------------------------------


async def _waiting_call(store: Checkpointer, run_id: str, verb: str) -> dict[str, Any]:
    """The call run ``run_id`` waits for a person to approve; refuse any other run."""
    record = await store.record(run_id)
    if not _waits_for_approval(record):
        where = f"{record.status.value} at {record.phase}"
        raise CliError(
            f"{_PROG}: run {run_id!r} is not waiting for an approval (it is {where}), so "
            f"there is nothing to {verb}; see {_PROG} runs list --waiting"
        )
    _, document = await store.load(run_id)
    pending = _pending(str(document.get("kind", "")), _fields(document))
    if pending is None:
        raise CliError(
            f"{_PROG}: run {run_id!r} is registered as waiting for an approval, but its last "
            f"checkpoint is not an approval wait; inspect it with {_PROG} runs show {run_id}"
        )
    return pending


def _decision_text(document: Mapping[str, Any] | None) -> str:
    if document is None:
        return f"none yet ({_PROG} runs approve|deny ID --by NAME)"
    if document.get("kind") == "approval":
        return (
            f"approved by {document.get('approved_by')} at {document.get('approved_at')}; "
            "not yet picked up"
        )
    return f"denied by {document.get('denied_by')} ({document.get('reason')}); not yet picked up"


async def _approve(store: Checkpointer, args: argparse.Namespace) -> int:
    pending = await _waiting_call(store, args.run_id, "approve")
    approval = Approve(
        by=args.by,
        at=datetime.now(UTC),
        run_id=args.run_id,
        call_id=pending["call_id"],
        tool=pending["tool"],
        args_hash=pending["args_hash"],
    )
    record = await store.submit_decision(args.run_id, dump_decision(approval))
    return _decided(record, pending, dump_decision(approval), args, "approved")


async def _deny(store: Checkpointer, args: argparse.Namespace) -> int:
    if not args.reason.strip():
        raise CliError(f"{_PROG}: --reason is empty; say why, in words the model can use", code=2)
    pending = await _waiting_call(store, args.run_id, "deny")
    denial = Denial(reason=args.reason, denied_by=args.by)
    record = await store.submit_decision(args.run_id, dump_decision(denial))
    return _decided(record, pending, dump_decision(denial), args, "denied")


def _decided(
    record: RunRecord,
    pending: Mapping[str, Any],
    decision: Mapping[str, Any],
    args: argparse.Namespace,
    verb: str,
) -> int:
    if args.json:
        _emit_json({"run": _record_json(record), "call": pending["call"], "decision": decision})
    else:
        print(
            f"{verb} {pending['call']} for run {record.run_id} (by {args.by}); a worker, or "
            f"{_PROG} runs resume {record.run_id} --agent MODULE, goes on with it"
        )
    return 0


async def _live_lease(store: Checkpointer, run_id: str) -> LeaseRecord | None:
    """The lease a worker holds on the run right now, if any."""
    now = datetime.now(UTC)
    held = [
        lease
        for lease in await store.leases(run_id)
        if lease.released_at is None and lease.until > now
    ]
    return held[-1] if held else None


async def _stop(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.request_stop(args.run_id)
    if args.json:
        _emit_json({"run": _record_json(record)})
    elif record.stop_requested:
        print(
            f"stop requested for run {record.run_id}: the worker driving it stops at its next "
            "checkpoint and marks it cancelled"
        )
    else:
        print(
            f"run {record.run_id} is {record.status.value} at {record.phase}; "
            f"{_PROG} runs resume {record.run_id} goes on with it"
        )
    return 0


async def _abort(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.record(args.run_id)
    if record.status == RunStatus.RUNNING:
        lease = await _live_lease(store, args.run_id)
        if lease is not None:
            raise CliError(
                f"{_PROG}: run {args.run_id!r} is being driven by {lease.owner} right now; "
                f"stop it first ({_PROG} runs stop {args.run_id}), then abort it"
            )
    if record.status != RunStatus.ABORTED:
        record = await store.set_status(args.run_id, RunStatus.ABORTED)
    if args.json:
        _emit_json({"run": _record_json(record)})
    else:
        print(
            f"run {record.run_id} aborted at {record.phase}; nothing was undone, its record stays"
        )
    return 0


async def _purge(store: Checkpointer, args: argparse.Namespace) -> int:
    removed = await store.purge(args.older_than)
    if args.json:
        _emit_json({"removed": removed, "older_than_seconds": args.older_than.total_seconds()})
    else:
        print(
            f"removed {removed} completed or aborted run(s) last updated more than "
            f"{_age(args.older_than)} ago"
        )
    return 0


def _age(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _check_resumable(record: RunRecord, *, here: bool) -> None:
    """Refuse a run that no resume may go on with (now, or without a person first)."""
    run_id = record.run_id
    if record.status in ENDINGS:
        raise CliError(
            f"{_PROG}: run {run_id!r} is {record.status.value}, an ending; nothing resumes it "
            "(start a new run instead)"
        )
    if record.status != RunStatus.INTERRUPTED or record.decision_pending:
        return
    if _waits_for_approval(record):
        # A run paused before a money move goes on only with a person's decision.
        raise CliError(
            f"{_PROG}: run {run_id!r} waits for approval of a call; approve or deny it "
            f"first ({_PROG} runs approve {run_id} --by NAME)"
        )
    if not here:
        raise CliError(
            f"{_PROG}: run {run_id!r} waits for a person ({record.waiting_for}); resume it "
            "here with --agent MODULE --note 'who lets it go on, and why'"
        )


async def _mark_runnable(store: Checkpointer, record: RunRecord) -> tuple[RunRecord, str]:
    """Leave the run to the workers: (its row, what happens next)."""
    _check_resumable(record, here=False)
    if record.status == RunStatus.RUNNING:
        lease = await _live_lease(store, record.run_id)
        if lease is not None:
            return record, f"it is running now, driven by {lease.owner}"
        return record, "it is already runnable: the next free worker picks it up"
    if record.status == RunStatus.INTERRUPTED:
        return record, "its decision is recorded: the next free worker goes on with it"
    record = await store.set_status(record.run_id, RunStatus.RUNNING)
    return record, "it is runnable: the next free worker picks it up"


def _runner_of(spec: str, store: Checkpointer) -> Runner[Any]:
    """The runner ``spec`` builds, by the factory the worker command uses."""
    from ._worker import _factory, _Refused  # only this command pays for the worker's imports

    try:
        # Whatever the module's function returns, checked: it is the user's code.
        factory: Callable[[Checkpointer], object] = _factory(spec)
    except _Refused as error:
        raise CliError(f"{_PROG}: {error}") from None
    built = factory(store)
    if not isinstance(built, Runner):
        raise CliError(f"{_PROG}: {spec} built {type(built).__name__}, not a Runner")
    runner: Runner[Any] = built
    return runner


async def _resume(store: Checkpointer, args: argparse.Namespace) -> int:
    record = await store.record(args.run_id)
    if args.agent is None:
        record, next_ = await _mark_runnable(store, record)
        if args.json:
            _emit_json({"run": _record_json(record), "resumed_here": False})
        else:
            print(f"run {record.run_id}: {next_}")
        return 0
    _check_resumable(record, here=True)
    runner = _runner_of(args.agent, store)
    if runner.agent.name != record.agent:
        raise CliError(
            f"{_PROG}: run {record.run_id!r} is a run of agent {record.agent!r}, and "
            f"{args.agent} builds a runner of {runner.agent.name!r}; name that agent's module"
        )
    result = await runner.resume(record.run_id, note=args.note)
    record = await store.record(record.run_id)
    if args.json:
        _emit_json(
            {
                "run": _record_json(record),
                "resumed_here": True,
                "result": result.status,
                "history": list(result.history),
            }
        )
    else:
        print(f"run {record.run_id}: {result.status}, {record.status.value} at {record.phase}")
        print(f"  {result.trace()}")
    return 0


_Handler = Callable[[Checkpointer, argparse.Namespace], Awaitable[int]]
_ACTIONS: Final[dict[str, _Handler]] = {
    "list": _list,
    "show": _show,
    "approve": _approve,
    "deny": _deny,
    "resume": _resume,
    "stop": _stop,
    "abort": _abort,
    "purge": _purge,
}
