"""Writes tests/data/pre-seal-runs.db with the library as it was before sealed approvals.

Run from a checkout of commit a85b0b8 (``PYTHONPATH=<that checkout> python
tests/data/make_pre_seal_runs.py OUT``): gates then returned ``Approval.of(request,
by=...)``, checkpoints kept an approval as ``{tool, args_hash, approved_by,
approved_at}`` and a stored decision had no run or call id. ``tests/test_sealed.py``
resumes both runs with today's code.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime
from typing import Any

import anyio
from pydantic import BaseModel

from statemachine import (  # type: ignore[attr-defined]
    Agent,
    Approval,
    ApprovalRequest,
    Pending,
    Runner,
    SQLiteCheckpointer,
    dump_decision,
    write_tool,
)
from statemachine.testing import ScriptedModel, reply, tool_call

NOON = datetime(2026, 11, 30, 12, tzinfo=UTC)


class PayArgs(BaseModel):
    to: str
    amount: str


@write_tool
async def pay(args: PayArgs) -> dict[str, str]:
    """Move money."""
    return {"paid": args.amount}


class Approves:
    async def decide(self, request: ApprovalRequest) -> Any:
        return Approval.of(request, by="lin@old.example", at=NOON)


class Later:
    async def decide(self, request: ApprovalRequest) -> Any:
        return Pending(reason="sent to the desk")


class Crash(Exception):
    pass


def crash_at_tool_calling(before: Any, after: Any) -> None:
    if after.kind == "ToolCalling":
        raise Crash("the process died after saving ToolCalling")


async def main(path: str) -> None:
    agent = Agent[None](name="payer", tools=[pay])
    turns = [tool_call("pay", {"to": "ada", "amount": "10.00"}), reply("Paid.")]
    async with SQLiteCheckpointer(path) as store:
        runner = Runner(
            agent,
            model=ScriptedModel(turns),
            gate=Approves(),
            checkpointer=store,
            on_transition=crash_at_tool_calling,
        )
        with contextlib.suppress(Crash):
            await runner.run(None, "Pay Ada", run_id="approved-then-crashed")
        waiting = Runner(agent, model=ScriptedModel(turns), gate=Later(), checkpointer=store)
        result = await waiting.run(None, "Pay Ada", run_id="decided-while-waiting")
        request = result.final.request("decided-while-waiting")
        decision = Approval.of(request, by="kim@old.example", at=NOON)
        await store.submit_decision("decided-while-waiting", dump_decision(decision))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
