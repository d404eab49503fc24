"""Writes tests/data/pre-rowid-runs.db with the library as it was before the checkpoints
table was keyed by its rowid (issue 23): its key was (run_id, seq), an index of its own,
and the runs' rows held no number.

Run from a checkout of commit 161fbdc (``PYTHONPATH=<that checkout> python
tests/data/make_pre_rowid_runs.py OUT``). The file holds three runs of the agent
``looker``: ``long`` (completed after 40 lookups, so that its checkpoints hold snapshots
and deltas), ``waiting`` (interrupted after 12 lookups, waiting for an approval of a
payment) and ``sealed`` (completed after 12 lookups, its checkpoints sealed with ``KEY``
under the key id ``k-old``). ``tests/test_sqlite_rowid16.py`` opens it with today's code,
which moves the checkpoints to the rowid key once, and checks that every run loads,
verifies and resumes as from the file as it was.
"""

from __future__ import annotations

import base64
import sys
from datetime import UTC, datetime

import anyio
from pydantic import BaseModel

from statemachine import (
    Agent,
    CheckpointCipher,
    Pending,
    Runner,
    SQLiteCheckpointer,
    read_tool,
    write_tool,
)
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)
KEY = base64.b64decode("q1Q4QmR0c2V2Z2h0aGlzaXNhdGVzdGtleW9ubHkhISE=")


class LookupArgs(BaseModel):
    key: str


class PayArgs(BaseModel):
    to: str
    amount: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key, "value": f"value of {args.key}"}


@write_tool
async def pay(args: PayArgs) -> dict[str, str]:
    """Move money."""
    return {"paid": args.amount}


def turns(lookups: int, *, pays: bool) -> list:  # type: ignore[type-arg]
    calls = [tool_call("lookup", {"key": f"k{n}"}) for n in range(lookups)]
    if pays:
        calls.append(tool_call("pay", {"to": "ada", "amount": "10.00"}))
    return [*calls, reply("Done.")]


class Later:
    async def decide(self, request):  # type: ignore[no-untyped-def]
        return Pending(reason="sent to the desk")


def agent() -> Agent[None]:
    return Agent[None](name="looker", tools=[lookup, pay], max_steps=1000)


async def main(path: str) -> None:
    async with SQLiteCheckpointer(path) as store:
        runner = Runner(
            agent(),
            model=ScriptedModel(turns(40, pays=False)),
            gate=AutoApproveGate(by="lin", at=NOON),
            checkpointer=store,
        )
        await runner.run(None, "Look 40 keys up", run_id="long")
        waiting = Runner(
            agent(), model=ScriptedModel(turns(12, pays=True)), gate=Later(), checkpointer=store
        )
        await waiting.run(None, "Look 12 keys up, then pay Ada", run_id="waiting")
    cipher = CheckpointCipher({"k-old": KEY}, current="k-old")
    async with SQLiteCheckpointer(path, sealer=cipher) as store:
        runner = Runner(
            agent(),
            model=ScriptedModel(turns(12, pays=False)),
            gate=AutoApproveGate(by="kim", at=NOON),
            checkpointer=store,
        )
        await runner.run(None, "Look 12 keys up", run_id="sealed")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
