"""Writes tests/data/pre-chain-runs.db with the library as it was before the chain was
authenticated (issue 18): checkpoints carried only a checksum of their own bytes, and the
run's row held no head.

Run from a checkout of commit 1fa38eb (``PYTHONPATH=<that checkout> python
tests/data/make_pre_chain_runs.py OUT``). The file holds three runs of the agent
``payer``: ``paid`` (completed after an approved payment), ``waiting`` (interrupted,
waiting for an approval) and ``sealed`` (completed, its checkpoints sealed with
``KEY`` under the key id ``k-old``). ``tests/test_chain.py`` opens it with today's code,
which records each run's head once and then loads and resumes the runs.
"""

from __future__ import annotations

import base64
import sys
from datetime import UTC, datetime

import anyio
from pydantic import BaseModel

from statemachine import Agent, CheckpointCipher, Runner, SQLiteCheckpointer, write_tool
from statemachine.testing import AutoApproveGate, ScriptedGate, ScriptedModel, reply, tool_call

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)
KEY = base64.b64decode("q1Q4QmR0c2V2Z2h0aGlzaXNhdGVzdGtleW9ubHkhISE=")


class PayArgs(BaseModel):
    to: str
    amount: str


@write_tool
async def pay(args: PayArgs) -> dict[str, str]:
    """Move money."""
    return {"paid": args.amount}


def turns() -> list:  # type: ignore[type-arg]
    return [tool_call("pay", {"to": "ada", "amount": "10.00"}), reply("Paid.")]


async def main(path: str) -> None:
    agent = Agent[None](name="payer", tools=[pay])
    async with SQLiteCheckpointer(path) as store:
        runner = Runner(
            agent,
            model=ScriptedModel(turns()),
            gate=AutoApproveGate(by="lin", at=NOON),
            checkpointer=store,
        )
        await runner.run(None, "Pay Ada", run_id="paid")

        class Later:
            async def decide(self, request):  # type: ignore[no-untyped-def]
                from statemachine import Pending

                return Pending(reason="sent to the desk")

        waiting = Runner(agent, model=ScriptedModel(turns()), gate=Later(), checkpointer=store)
        await waiting.run(None, "Pay Ada", run_id="waiting")
    cipher = CheckpointCipher({"k-old": KEY}, current="k-old")
    async with SQLiteCheckpointer(path, sealer=cipher) as store:
        runner = Runner(
            agent,
            model=ScriptedModel(turns()),
            gate=ScriptedGate([True], by="kim"),
            checkpointer=store,
        )
        await runner.run(None, "Pay Ada", run_id="sealed")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
