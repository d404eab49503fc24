"""A stateful property over the public operations: no write without its own approval.

Hypothesis drives runs of a paying agent through the public API in any order: new runs
whose gate approves, denies or defers; decisions submitted to the store for this run or
for another; resumes; copies, evolves and pickles of any phase seen; driving an old
phase again. After every step: the write tool ran only in runs whose gate or person
approved exactly that call, at most once per approval, and no run's steps or spend went
down.
"""

from __future__ import annotations

import copy
import itertools
import pickle
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pydantic import BaseModel

from statemachine import (
    Agent,
    ApprovalRequest,
    Approve,
    AwaitApproval,
    DecisionRefusedError,
    Denial,
    MemoryCheckpointer,
    Money,
    Pending,
    Phase,
    PhaseForgedError,
    PhaseReusedError,
    Runner,
    RunResult,
    current_idempotency_key,
    dump_decision,
    write_tool,
)
from statemachine.testing import FunctionModel, reply, tool_call


class PayArgs(BaseModel):
    to: str
    amount: Money


# Every time the write tool really ran: the idempotency key it ran under.
RAN: list[str | None] = []


@write_tool
async def pay(args: PayArgs) -> dict[str, object]:
    """Move money (not idempotent: one attempt per approval)."""
    RAN.append(current_idempotency_key())
    return {"paid": args.amount}


def answer(request: Any) -> Any:
    """Ask to pay the amount the customer named, once; then answer."""
    if any(message.role == "tool" for message in request.messages):
        return reply("Done.")
    amount = request.messages[-1].content
    return tool_call("pay", {"to": "ada", "amount": amount})


class Gate:
    """Answers every request with the decision it was made with, and remembers them."""

    def __init__(self, decision: str, log: list[ApprovalRequest]) -> None:
        self.decision = decision
        self.log = log

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        self.log.append(request)
        if self.decision == "approve":
            return Approve(by="gate")
        if self.decision == "deny":
            return Denial(reason="no")
        return Pending()


class Payments(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        RAN.clear()
        self.store = MemoryCheckpointer()
        self.agent = Agent[None](name="payer", tools=[pay])
        self.asked: list[ApprovalRequest] = []
        self.approved: set[tuple[str, str]] = set()  # (run, call id) a gate or person approved
        self.waiting: dict[str, ApprovalRequest] = {}
        self.seen: list[Phase[None]] = []
        self.results: list[RunResult[None]] = []
        self.count = 0

    def runner(self, decision: str = "pending") -> Runner[None]:
        gate = Gate(decision, self.asked)
        return Runner(
            self.agent,
            model=FunctionModel(answer),
            gate=gate,
            checkpointer=self.store,
            keep_states=True,
        )

    def keep(self, result: RunResult[None]) -> None:
        self.results.append(result)
        self.seen.extend(result.states)
        final = result.final
        if isinstance(final, AwaitApproval) and final.waiting:
            self.waiting[result.run_id] = final.request(result.run_id)
        else:
            self.waiting.pop(result.run_id, None)

    @rule(
        amount=st.decimals(min_value=1, max_value=500, places=2),
        decision=st.sampled_from(["approve", "deny", "pending"]),
    )
    def start(self, amount: Decimal, decision: str) -> None:
        self.count += 1
        run_id = f"run-{self.count}"
        before = len(self.asked)
        result = anyio.run(lambda: self.runner(decision).run(None, str(amount), run_id=run_id))
        if decision == "approve":
            for request in self.asked[before:]:
                self.approved.add((request.run_id, request.call_id))
        self.keep(result)

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data(), yes=st.booleans())
    def submit(self, data: st.DataObject, yes: bool) -> None:
        target = data.draw(st.sampled_from(sorted(self.waiting)))
        source = data.draw(st.sampled_from(sorted(self.waiting)))
        request = self.waiting[source]
        decision = Approve.of(request, by="lin") if yes else Denial(reason="no", denied_by="lin")
        pending = anyio.run(self.store.decision, target) is not None
        try:
            anyio.run(self.store.submit_decision, target, dump_decision(decision))
        except DecisionRefusedError:
            assert pending or (yes and source != target)
            return
        assert not (yes and source != target), "another run's approval was stored"
        if yes:
            self.approved.add((request.run_id, request.call_id))

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.waiting)))
        result = anyio.run(lambda: self.runner().resume(run_id))
        self.keep(result)

    @precondition(lambda self: bool(self.seen))
    @rule(data=st.data(), how=st.sampled_from(["evolve", "copy", "deepcopy", "pickle", "drive"]))
    def forge(self, data: st.DataObject, how: str) -> None:
        phase = data.draw(st.sampled_from(self.seen))
        if how == "drive" and not phase.left:
            return  # the phase a run stopped at: driving it once is going on with it
        with pytest.raises((PhaseForgedError, PhaseReusedError)):
            self.attempt(how, phase)

    def attempt(self, how: str, phase: Phase[None]) -> None:
        """Try to make a second live phase from ``phase``, or to run it again."""
        if how == "evolve":
            attrs.evolve(phase)
        elif how == "copy":
            copy.copy(phase)
        elif how == "deepcopy":
            copy.deepcopy(phase)
        elif how == "pickle":
            pickle.dumps(phase)
        else:
            anyio.run(lambda: self.runner("approve").drive(phase))

    @invariant()
    def every_write_had_its_own_approval_once(self) -> None:
        assert len(RAN) == len(set(RAN)), "an approval let the write run twice"
        paid_runs = {
            state.call.approval.run_id
            for result in self.results
            for state in result.states
            if state.kind == "ToolCalling"
        }
        assert len(RAN) <= len(self.approved)
        assert {run for run, _ in self.approved} >= paid_runs

    @invariant()
    def steps_and_spend_never_go_down(self) -> None:
        for result in self.results:
            steps = [step for _, step in result.path]
            assert steps == sorted(steps)
            spent = [state.spent for state in result.states]
            for earlier, later in itertools.pairwise(spent):
                assert later.tool_calls >= earlier.tool_calls
                assert later.cost >= earlier.cost


Payments.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_no_write_runs_without_its_own_approval = Payments.TestCase
