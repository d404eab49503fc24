"""AwaitApproval claims its one transition before it asks the gate: a person is asked once."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import anyio
import pytest
from support import FlightArgs, exactly

from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    AwaitApproval,
    Denial,
    Done,
    MemoryCheckpointer,
    Pending,
    PhaseReusedError,
    Planning,
    Runner,
    RunStatus,
    Runtime,
    ToolCalling,
    write_tool,
)
from statemachine.testing import ScriptedModel, hand_built, reply, tool_call

pytestmark = pytest.mark.anyio

REUSED = (
    "this AwaitApproval phase was already left by advance(); calling advance() on it "
    "again would fork the run. Continue from the phase that advance() returned "
    "(state = await state.advance(rt))."
)


@write_tool(name="book", cost=lambda args: args.price)
async def book(args: FlightArgs) -> dict[str, Any]:
    return {"flight": args.flight, "charged": args.price}


AGENT = Agent[None](name="booker", tools=[book])


class CountingGate:
    """A gate that counts the times it is asked and answers once all callers have begun."""

    def __init__(self, answer: Approve | Denial | Pending, *, callers: int) -> None:
        self.answer = answer
        self.asked: list[ApprovalRequest] = []
        self.callers = callers
        self.begun = 0
        self.all_begun = anyio.Event()

    def begin(self) -> None:
        """Called by each caller before it advances; the last one lets the gate answer."""
        self.begun += 1
        if self.begun == self.callers:
            self.all_begun.set()

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        self.asked.append(request)
        # The person takes a while: every other advance() starts while the gate waits.
        await self.all_begun.wait()
        return self.answer


def waiting_phase() -> AwaitApproval[None, Any]:
    """An AwaitApproval holding a call of ``book``, as a unit test drives it by hand."""
    call = book.call(FlightArgs(flight="IB3170", price=Decimal("120.00")))
    return hand_built(AGENT.phases.await_approval, agent=AGENT, ctx=None, call=call, call_id="c1")


def runtime(gate: Any) -> Runtime:
    return Runtime(run_id="run-1", model=ScriptedModel([]), gate=gate, rng=random.Random(0))


async def advance_concurrently(
    waiting: AwaitApproval[None, Any], gate: CountingGate, callers: int
) -> tuple[list[Any], list[PhaseReusedError]]:
    """``callers`` concurrent ``advance()`` calls on ``waiting``: what they returned, raised."""
    rt = runtime(gate)
    returned: list[Any] = []
    raised: list[PhaseReusedError] = []

    async def one() -> None:
        gate.begin()
        try:
            returned.append(await waiting.advance(rt))
        except PhaseReusedError as error:
            raised.append(error)

    async with anyio.create_task_group() as group:
        for _ in range(callers):
            group.start_soon(one)
    return returned, raised


async def test_twenty_concurrent_advances_ask_the_gate_once_and_transition_once() -> None:
    """One advance asks the gate and approves; the other 19 are refused before asking."""
    gate = CountingGate(Approve(by="ana"), callers=20)
    returned, raised = await advance_concurrently(waiting_phase(), gate, 20)
    assert len(gate.asked) == 1
    assert [type(phase) for phase in returned] == [ToolCalling]
    assert [str(error) for error in raised] == [REUSED] * 19
    assert {(e.phase, e.transition, e.first) for e in raised} == {
        ("AwaitApproval", "advance", "advance")
    }
    assert returned[0].call.approval.approved_by == "ana"


@pytest.mark.parametrize(
    ("answer", "goes_to"),
    [(Denial(reason="too dear", denied_by="ana"), Planning), (Pending(), AwaitApproval)],
)
async def test_a_denial_or_a_pending_answer_is_also_asked_for_once(
    answer: Denial | Pending, goes_to: type[Any]
) -> None:
    """The claim does not depend on the answer: a no or a not-yet is asked for once too."""
    gate = CountingGate(answer, callers=5)
    returned, raised = await advance_concurrently(waiting_phase(), gate, 5)
    assert len(gate.asked) == 1
    assert [type(phase) for phase in returned] == [goes_to]
    assert [str(error) for error in raised] == [REUSED] * 4


async def test_a_transition_by_hand_during_the_ask_is_refused() -> None:
    """While the gate is asked, the phase is left: deny() on it forks nothing."""
    gate = CountingGate(Approve(by="ana"), callers=1)
    waiting = waiting_phase()
    async with anyio.create_task_group() as group:
        group.start_soon(waiting.advance, runtime(gate))
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(
            PhaseReusedError, match=exactly(REUSED.replace("calling advance()", "calling deny()"))
        ):
            waiting.deny("changed my mind")
        gate.begin()  # the person answers now
    assert len(gate.asked) == 1


class BrokenGate:
    """A gate whose first answer is an error (its service is down), then a yes."""

    def __init__(self) -> None:
        self.asked = 0

    async def decide(self, request: ApprovalRequest) -> Approve:
        self.asked += 1
        if self.asked == 1:
            raise ConnectionError("the approvals service is down")
        return Approve(by="ana")


async def test_a_gate_that_raises_leaves_the_phase_left_and_nothing_approved() -> None:
    """The claim stands: the gate's error propagates and the object cannot be advanced
    again (the run goes on from its checkpoint instead)."""
    gate = BrokenGate()
    waiting = waiting_phase()
    rt = runtime(gate)
    with pytest.raises(ConnectionError, match="the approvals service is down"):
        await waiting.advance(rt)
    assert waiting.left
    with pytest.raises(PhaseReusedError, match=exactly(REUSED)):
        await waiting.advance(rt)
    assert gate.asked == 1


async def test_a_cancelled_ask_leaves_the_phase_left() -> None:
    """A cancel (a deadline, a stop) while the person is asked also keeps the claim."""
    gate = CountingGate(Approve(by="ana"), callers=2)  # never answers: one caller only
    waiting = waiting_phase()
    with anyio.move_on_after(0.01) as scope:
        await waiting.advance(runtime(gate))
    assert scope.cancelled_caught
    assert waiting.left
    assert len(gate.asked) == 1


async def test_a_run_whose_gate_raised_resumes_from_its_checkpoint_and_asks_again() -> None:
    """What the claim asks of a run: resume it; the saved AwaitApproval asks the gate anew."""
    store = MemoryCheckpointer()
    script = [tool_call("book", {"flight": "IB3170", "price": 120}), reply("Booked IB3170.")]
    gate = BrokenGate()
    runner = Runner(AGENT, model=ScriptedModel(script), gate=gate, checkpointer=store)
    with pytest.raises(ConnectionError):
        await runner.run(None, "Book IB3170.", run_id="run-7")
    record = await store.record("run-7")
    assert (record.status, record.phase) == (RunStatus.FAILED_RESUMABLE, "AwaitApproval")
    again = Runner(AGENT, model=ScriptedModel(script[1:]), gate=gate, checkpointer=store)
    result = await again.resume("run-7")
    assert isinstance(result.final, Done)
    assert result.final.answer == "Booked IB3170."
    assert gate.asked == 2
