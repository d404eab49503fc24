"""Sealed guarantees: only the runtime makes an Approval, only a transition makes a phase."""

from __future__ import annotations

from typing import Any, assert_type

from pydantic import BaseModel

from statemachine import (
    Agent,
    Approval,
    ApprovalGate,
    ApprovalRequest,
    Approve,
    AwaitApproval,
    Denial,
    Done,
    Failed,
    Idle,
    Observing,
    Pending,
    Phase,
    Planning,
    Responding,
    Retrying,
    Runner,
    Runtime,
    ToolCalling,
    WriteCall,
    load_phase,
    write_tool,
)
from statemachine.testing import ScriptedModel, hand_approval, hand_built

from ._fixtures import CHARGE_ARGS, LOOKUP_ARGS, ChargeArgs, Ctx, charge, lookup


def no_phase_is_built_directly(agent: Agent[Ctx], ctx: Ctx, write: WriteCall) -> None:
    # Rule: every phase is made by a transition (Agent.start makes Idle); building one is
    # a missing-argument error under both checkers, whatever the fields.
    read = lookup.call(LOOKUP_ARGS)
    Idle(agent=agent, ctx=ctx, input="hi")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Planning(agent=agent, ctx=ctx)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    AwaitApproval(agent=agent, ctx=ctx, call=write, call_id="c")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    ToolCalling(agent=agent, ctx=ctx, call=read, call_id="c")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Observing(agent=agent, ctx=ctx, call=read, call_id="c", output=1)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Retrying(agent=agent, ctx=ctx, call=read, call_id="c", attempt=1, error="")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Responding(agent=agent, ctx=ctx, text="hi")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Done(agent=agent, ctx=ctx, answer="hi")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    Failed(agent=agent, ctx=ctx, reason="no")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
    # Rule: nor through the agent's configured classes.
    agent.phases.planning(agent=agent, ctx=ctx)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


class MyPlanning(Planning[Ctx]):
    """A user's subclass: a field with a default still works, and so does its advance."""

    note: str = ""

    def shortcut(self) -> Done[Ctx]:
        # Rule: a subclass method cannot add a Planning -> Done edge by building a Done.
        return Done[Ctx](agent=self.agent, ctx=self.ctx, answer="x")  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def only_the_runtime_makes_an_approval(request: ApprovalRequest) -> None:
    # Rule: Approval has no public constructor, and no Approval.of.
    Approval(  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
        id="x",
        run_id="r",
        call_id="c",
        tool="t",
        args_hash="h",
        approved_by="me",
        approved_at=None,  # type: ignore[arg-type]
        note="",
    )
    Approval.of(request, by="me")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # A person's yes is an Approve: legal, and not an Approval.
    yes = Approve.of(request, by="lin")
    _approval: Approval = yes  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


class MintingGate:
    """A gate that answers with an Approval: not a gate."""

    async def decide(self, request: ApprovalRequest) -> Approval | Denial | Pending:
        raise NotImplementedError


class DecidingGate:
    """A gate answers a decision: Approve, Denial or Pending."""

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        return Approve(by="lin")


def gates_return_decisions(agent: Agent[Ctx]) -> None:
    Runner(agent, model=ScriptedModel([]), gate=MintingGate())  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    _gate: ApprovalGate = DecidingGate()
    Runner(agent, model=ScriptedModel([]), gate=DecidingGate())


def load_phase_keeps_the_context_type(document: dict[str, Any], agent: Agent[Ctx]) -> None:
    restored: Phase[Ctx] = load_phase(document, agents={"a": agent})
    # Rule: a phase of one context type does not become another's.
    _wrong: Phase[int] = load_phase(document, agents={"a": agent})  # type: ignore[dict-item]  # pyright: ignore[reportAssignmentType]
    del restored


def hand_built_is_typed(agent: Agent[Ctx], ctx: Ctx) -> Planning[Ctx]:
    """statemachine.testing.hand_built, for unit tests: the class it is given."""
    return hand_built(Planning[Ctx], agent=agent, ctx=ctx)


class RefundArgs(BaseModel):
    """Arguments of a second write tool."""

    order_id: str


@write_tool
async def refund(args: RefundArgs) -> str:
    """Another write tool."""
    return args.order_id


async def an_approval_of_another_tools_call(planning: Planning[Ctx], rt: Runtime) -> None:
    waiting_charge = planning.request_approval(charge.call(CHARGE_ARGS))
    assert_type(waiting_charge, AwaitApproval[Ctx, ChargeArgs])
    waiting_refund = planning.request_approval(refund.call(RefundArgs(order_id="A-1")))
    decision = await rt.decide(waiting_refund.request(rt.run_id))
    if isinstance(decision, Approval):
        assert_type(decision, Approval[RefundArgs])
        # Rule: an approval of a refund cannot approve a charge.
        waiting_charge.approve(decision)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        # Legal: the approval of exactly the call asked about.
        waiting_refund.approve(decision)
    # A hand approval (statemachine.testing) is typed the same way.
    waiting_charge.approve(hand_approval(waiting_refund))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def a_write_tool_offers_no_way_around_approval() -> None:
    # Rule: a tool's function is not a public attribute: only ToolCalling.execute runs it.
    await charge.fn(CHARGE_ARGS)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
