"""A phase that waits for a person is saved with what it waits for, by the save itself.

A run paused by the governor returns at once after the paused phase's checkpoint: no
status is marked after it. So the store's row says ``interrupted`` and the pause's
reason only if the save handed them, also on the path that hands the store the delta
from the document saved before (every save after a run's first)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Check,
    Checkpointer,
    Decision,
    LoopGovernor,
    LoopState,
    Planning,
    Runner,
    RunStatus,
    Verdict,
    read_tool,
)
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

REASON = "a supervisor must look at order A-7 first"


class OrderArgs(BaseModel):
    order: str


@read_tool
async def lookup(args: OrderArgs) -> str:
    """An order's status."""
    return f"{args.order}: delivered"


def after_calls(count: int) -> Check:
    def supervisor(loop: LoopState, ctx: object) -> Decision:
        """Wait for a person once ``count`` lookups ran (until resumed)."""
        resumed = any(flag.startswith("resumed:") for flag in loop.flags)
        if loop.tool_iterations >= count and not resumed:
            return Decision(Verdict.PAUSE, REASON, check="supervisor")
        return Decision(Verdict.CONTINUE)

    return supervisor


async def test_a_paused_phase_is_saved_waiting_for_its_reason(store: Checkpointer) -> None:
    """After two lookups the run pauses: its row, read before anything else is written,
    is interrupted and waits for the pause's reason; resumed, it runs on and ends."""
    agent = Agent[None](
        name="orders",
        tools=[lookup],
        governor=LoopGovernor(checks=(after_calls(2),)),
    )
    script = [
        tool_call("lookup", '{"order": "A-7"}'),
        tool_call("lookup", '{"order": "A-8"}'),
        reply("Both delivered."),
    ]
    runner = Runner(agent, model=ScriptedModel(script[:2]), gate=AutoDenyGate(), checkpointer=store)
    result = await runner.run(None, "Where are A-7 and A-8?", run_id="run-w")
    assert result.status == "paused"
    paused = result.final
    assert isinstance(paused, Planning)
    assert paused.loop.paused == REASON
    # Not the run's first checkpoint: the save that wrote it handed the store a delta.
    assert paused.step > 1
    record = await store.record("run-w")
    assert (record.status, record.waiting_for, record.phase) == (
        RunStatus.INTERRUPTED,
        REASON,
        "Planning",
    )
    assert record.seq == len(result.history) - 1
    again = Runner(agent, model=ScriptedModel(script[2:]), gate=AutoDenyGate(), checkpointer=store)
    resumed = await again.resume("run-w", note="ok by ana")
    assert resumed.status == "done"
    assert (await store.record("run-w")).status == RunStatus.COMPLETED
