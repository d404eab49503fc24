"""Writes tests/data/pre-marker-runs.db with the library as it was before runs ended with
a marker row (issue 23, format 0): the head of a run's chain, its seq, phase and moment
kept in its row of ``runs``, which every save wrote.

Run from a checkout of commit d452a40 (``PYTHONPATH=<that checkout> python
tests/data/make_pre_marker_runs.py OUT``). The runs are those of ``make_pre_rowid_runs.py``
(its ``main``, run against that checkout): ``long`` (completed after 40 lookups),
``waiting`` (interrupted after 12 lookups, waiting for an approval of a payment) and
``sealed`` (completed after 12 lookups, sealed with the key id ``k-old``), and one more,
``open``: 30 lookups saved by a runner whose process was then interrupted (a
``KeyboardInterrupt`` in its 31st lookup), so that its last saves took the one-statement
path and it is still running. ``tests/test_sqlite_markers.py``
opens the file with today's code, which moves each run's head to its end marker once,
and checks that every run loads, verifies and resumes as from the file as it was.
"""

from __future__ import annotations

import contextlib
import sys

import anyio
from make_pre_rowid_runs import LookupArgs, main, pay, turns

from statemachine import Agent, Runner, SQLiteCheckpointer, read_tool
from statemachine.testing import AutoApproveGate, ScriptedModel

looked: list[str] = []


@read_tool(name="lookup")
async def interrupted(args: LookupArgs) -> dict[str, str]:
    """Look a key up (the 31st is interrupted)."""
    looked.append(args.key)
    if len(looked) > 30:
        raise KeyboardInterrupt
    return {"key": args.key, "value": f"value of {args.key}"}


async def more(path: str) -> None:
    await main(path)
    agent = Agent[None](name="looker", tools=[interrupted, pay], max_steps=1000)
    async with SQLiteCheckpointer(path) as store:
        runner = Runner(
            agent,
            model=ScriptedModel(turns(40, pays=False)),
            gate=AutoApproveGate(by="lin"),
            checkpointer=store,
        )
        with contextlib.suppress(KeyboardInterrupt):
            await runner.run(None, "Look 40 keys up", run_id="open")


if __name__ == "__main__":
    anyio.run(more, sys.argv[1])
