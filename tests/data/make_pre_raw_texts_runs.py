"""Writes tests/data/pre-raw-texts-runs.db with the library as it was before a compressed
snapshot stored its long texts after its JSON (issue 23): a compressed snapshot is the
zlib stream of its JSON text, every full chunk of the transcript and the action log a
JSON string in it, each quote escaped.

Run from a checkout of commit 20153a6 (``PYTHONPATH=<that checkout> python
tests/data/make_pre_raw_texts_runs.py OUT``). The file holds one run of the agent
``looker``, ``waiting``: interrupted after 200 lookups, waiting for an approval of a
payment; its last snapshots are larger than 32 KiB (stored compressed: the first whole,
the next by pieces) and the last is followed by deltas. ``tests/test_resume_fast2.py``
opens it with today's code, loads and verifies it and resumes it to its end.
"""

from __future__ import annotations

import sys

import anyio
from pydantic import BaseModel

from statemachine import (
    Agent,
    Pending,
    Runner,
    SQLiteCheckpointer,
    read_tool,
    write_tool,
)
from statemachine.testing import ScriptedModel, reply, tool_call

LOOKUPS = 200


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
        waiting = Runner(
            agent(),
            model=ScriptedModel(turns(LOOKUPS, pays=True)),
            gate=Later(),
            checkpointer=store,
        )
        await waiting.run(None, f"Look {LOOKUPS} keys up, then pay Ada", run_id="waiting")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
