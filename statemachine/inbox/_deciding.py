"""What an operator may do to a run from the inbox, through the command line's own path.

Approve and deny store the person's decision with ``submit_decision``, exactly as
``statemachine runs approve|deny`` does: the page only records the decision, and the
runner that next drives the run (a worker, or ``runs resume --agent``) checks it
against the call and turns it into the right to run the tool. The store refuses a
second decision. Resume, stop and abort are the command line's too. Settling an
uncertain effect records what the person found at the service in the side-effect
ledger (the result, or that nothing went through) and leaves the run to the workers.

Every attempt, done or refused, is appended to the audit trail (:class:`AuditTrail`):
who, when, from where, the run, and the exact call hash the person was shown.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import anyio

from .. import Approve, Checkpointer, Denial, RunStatus, dump_decision, loads
from ..cli._options import Refusal
from ..cli._runs import _live_lease, _mark_runnable, _waiting_call
from ..cli._show import fields
from ._config import Operator
from ._reading import uncertain_effect

__all__ = ["ACTIONS", "AuditTrail", "Decided", "decide"]

ACTIONS: Final = ("approve", "deny", "resume", "stop", "abort", "settle")


class Decided(Exception):
    """An action refused; ``status`` is the HTTP status the page answers with."""

    def __init__(self, message: str, *, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


class AuditTrail:
    """An append-only JSON-lines file: one line per decision attempt, flushed to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = anyio.Lock()

    async def write(self, entry: Mapping[str, Any]) -> None:
        line = json.dumps(entry, default=str, sort_keys=True) + "\n"
        async with self._lock:
            await anyio.to_thread.run_sync(self._append, line)

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as file:
            file.write(line)
            file.flush()
            os.fsync(file.fileno())

    def read(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (an empty list before the first)."""
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def _amount_of(arguments: Mapping[str, Any]) -> Decimal | None:
    amounts = [value for value in arguments.values() if isinstance(value, Decimal)]
    return amounts[0] if len(amounts) == 1 else None


def _within_limit(operator: Operator, amount: Decimal | None, what: str) -> None:
    if operator.may_approve(amount):
        return
    if amount is None:
        raise Decided(
            f"the amount of {what} cannot be read, and you may approve only up to "
            f"{operator.up_to}; an operator without a limit must decide it",
            status=403,
        )
    raise Decided(
        f"{what} is for {amount}, above your limit of {operator.up_to}; an operator "
        "with a higher limit must approve it",
        status=403,
    )


async def _approve(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    call = await _waiting_call(store, run_id, "approve")
    seen = {"tool": call["tool"], "args_hash": call["args_hash"], "amount": call["amount"]}
    if form.get("args_hash") != call["args_hash"]:
        raise Decided(
            f"the call waiting is {call['call']} (hash {call['args_hash']}), not the one "
            "you were shown; read the run's page again before deciding"
        )
    _within_limit(operator, call["amount"], call["call"])
    approval = Approve(
        by=operator.name,
        at=datetime.now(UTC),
        run_id=run_id,
        call_id=call["call_id"],
        tool=call["tool"],
        args_hash=call["args_hash"],
    )
    await store.submit_decision(run_id, dump_decision(approval))
    return f"approved {call['call']}; a worker goes on with the run", seen


async def _deny(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    reason = form.get("reason", "").strip()
    if not reason:
        raise Decided("say why you deny it, in words the model can use", status=400)
    call = await _waiting_call(store, run_id, "deny")
    seen = {"tool": call["tool"], "args_hash": call["args_hash"], "amount": call["amount"]}
    if form.get("args_hash") != call["args_hash"]:
        raise Decided("the call waiting is not the one you were shown; read the page again")
    denial = Denial(reason=reason, denied_by=operator.name)
    await store.submit_decision(run_id, dump_decision(denial))
    return f"denied {call['call']}; the model is told why", seen


async def _resume(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    record = await store.record(run_id)
    if uncertain_effect(record) is not None:
        raise Decided("this run stopped in the middle of a write: settle the effect first")
    _, next_ = await _mark_runnable(store, record)
    return f"resumed: {next_}", {}


async def _stop(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    record = await store.request_stop(run_id)
    if record.stop_requested:
        return "stop requested: the worker driving it stops at its next checkpoint", {}
    return f"the run is {record.status.value}", {}


async def _abort(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    record = await store.record(run_id)
    if record.status == RunStatus.ABORTED:
        raise Decided("the run is aborted already")
    if record.status == RunStatus.RUNNING and await _live_lease(store, run_id) is not None:
        raise Decided("a worker is driving the run right now; stop it first, then abort it")
    await store.set_status(run_id, RunStatus.ABORTED)
    return "aborted; nothing was undone, the record stays", {}


async def _settle(
    store: Checkpointer, run_id: str, operator: Operator, form: Mapping[str, str]
) -> tuple[str, dict[str, Any]]:
    record = await store.record(run_id)
    effect = uncertain_effect(record)
    if effect is None:
        raise Decided("the run is not waiting for a person to settle an uncertain effect")
    tool, key = effect
    found = await store.effect(key)
    if found is None or found.status != "intent":
        raise Decided(f"the effect {key} is not an intent waiting to be settled")
    _, document = await store.load(run_id)
    call = fields(document).get("call")
    arguments = call.get("args", {}) if isinstance(call, dict) else {}
    amount = _amount_of(arguments) if isinstance(arguments, dict) else None
    seen = {"tool": tool, "args_hash": found.args_hash, "amount": amount, "key": key}
    if form.get("args_hash") != found.args_hash:
        raise Decided("the effect waiting is not the one you were shown; read the page again")
    # Either answer lets the run go on past a write: the same limit as an approval.
    _within_limit(operator, amount, f"{tool} ({key})")
    if form.get("outcome") == "went-through":
        try:
            result = loads(form.get("result", "") or "null")
        except ValueError as error:
            raise Decided(f"the result is not JSON ({error})", status=400) from None
        await store.record_result(key, result)
        said = f"recorded that {tool} went through"
    elif form.get("outcome") == "did-not":
        await store.discard_intent(key)
        said = f"recorded that {tool} did not go through; it is sent again"
    else:
        raise Decided("choose whether the call went through or not", status=400)
    await store.set_status(run_id, RunStatus.RUNNING)
    return f"{said}; a worker goes on with the run", seen


_DOING: Final = {
    "approve": _approve,
    "deny": _deny,
    "resume": _resume,
    "stop": _stop,
    "abort": _abort,
    "settle": _settle,
}


async def decide(
    store: Checkpointer,
    audit: AuditTrail,
    action: str,
    run_id: str,
    operator: Operator,
    form: Mapping[str, str],
    *,
    source: str,
) -> str:
    """Do ``action`` to run ``run_id`` for ``operator``; what happened, in words.

    Refused (:class:`Decided`) unless the operator may decide; every attempt is written
    to the audit trail, with ``source`` (where the request came from).
    """
    entry: dict[str, Any] = {
        "at": datetime.now(UTC).isoformat(),
        "operator": operator.name,
        "from": source,
        "action": action,
        "run_id": run_id,
        "reason": form.get("reason", "") or form.get("note", ""),
        "shown_args_hash": form.get("args_hash", ""),
    }
    try:
        if not operator.may_decide:
            raise Decided(f"{operator.name} may view runs but not decide", status=403)
        said, seen = await _DOING[action](store, run_id, operator, form)
    except (Decided, Refusal) as error:
        entry.update(outcome="refused", said=str(error))
        await audit.write(entry)
        raise Decided(str(error), status=getattr(error, "status", 409)) from None
    except Exception as error:  # the store's own refusal: DecisionRefusedError, ...
        entry.update(outcome="refused", said=str(error))
        await audit.write(entry)
        raise Decided(str(error)) from None
    entry.update(outcome="done", said=said, **seen)
    await audit.write(entry)
    return said
