"""The checkpoint producer's output stays byte for byte what it was before issue 23's
fourteenth round: the documents and delta ops the dumper gives for every phase of a
300-call run of the bench's agent (``bench/loops.py``'s ``ours``: one read tool
returning a small dict, a new key a call) hash as at 99d655e, and a durable run's
checkpoints load and resume to the same end."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from statemachine import Agent, Budget, Runner, SQLiteCheckpointer, read_tool
from statemachine._json import dumps_bytes
from statemachine.persist._delta import PhaseDumper
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

# sha256 over each phase's document and ops (``dumps_bytes``), as /tmp/base-s40 (99d655e,
# the tree before the round) writes them: 904 phases.
BASELINE = "0a84e681aae3c51d14b1d483c7e4e86a283cd1d3ddce868a90764e59161747a8"


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, object]:
    """Look a key up."""
    return {"key": args.key, "value": 42, "unit": "widgets"}


def _runner(calls: int, **kwargs: Any) -> Runner[None]:
    agent = Agent[None](name="bench", tools=[lookup], budget=Budget(), max_steps=10**9)
    turns = [tool_call("lookup", json.dumps({"key": f"k{n}"})) for n in range(calls)]
    return Runner(
        agent, model=ScriptedModel([*turns, reply("done")]), gate=AutoDenyGate(), **kwargs
    )


def _digest(phases: list[Any]) -> tuple[int, str]:
    dumper = PhaseDumper()
    made = hashlib.sha256()
    for phase in phases:
        document, ops = dumper.dump(phase)
        made.update(dumps_bytes(document))
        made.update(b"|")
        made.update(b"none" if ops is None else dumps_bytes(ops))
        made.update(b"\n")
    return len(phases), made.hexdigest()


def test_a_run_s_documents_and_ops_hash_as_before_the_round() -> None:
    runner = _runner(300, keep_states=True)
    phases = list(anyio.run(runner.run, None, "go").states)
    assert _digest(phases) == (904, BASELINE)


def test_a_durable_run_s_last_checkpoint_is_its_last_phase_s_document() -> None:
    async def go(path: str) -> None:
        async with SQLiteCheckpointer(path) as store:
            runner = _runner(40, checkpointer=store, keep_states=True)
            result = await runner.run(None, "go", run_id="r")
            history = await store.history("r")
            assert len(history) == len(result.states)
            dumper = PhaseDumper()
            document: dict[str, Any] = {}
            for phase in result.states:
                document, _ = dumper.dump(phase)
            seq, loaded = await store.load("r")
            assert seq == len(history) - 1
            assert {k: v for k, v in loaded.items() if k != "elapsed"} == document

    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(go, str(Path(tmp) / "run.db"))
