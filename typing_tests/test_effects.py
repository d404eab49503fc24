"""Effects are types: a write call reaches ToolCalling only through AwaitApproval."""

from __future__ import annotations

import attrs

from statemachine import (
    Agent,
    Approval,
    Approve,
    ApprovedCall,
    AwaitApproval,
    Denial,
    InvalidCall,
    Observing,
    Planning,
    ReadCall,
    Retrying,
    Runtime,
    ToolCalling,
    WriteCall,
)

from ._fixtures import CHARGE_ARGS, LOOKUP_ARGS, Ctx, charge, lookup


def planning_takes_only_read_calls(
    planning: Planning[Ctx],
    write: WriteCall,
    approved: ApprovedCall,
    invalid: InvalidCall,
) -> None:
    # Rule: a write call cannot run straight from Planning.
    planning.call_tool(write)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: a write tool's call is a WriteCall, so it is refused too.
    planning.call_tool(charge.call(CHARGE_ARGS))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: an approved call cannot be replayed through Planning.
    planning.call_tool(approved)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: an invalid call cannot run; it goes to reject_call.
    planning.call_tool(invalid)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def approval_is_for_write_calls(planning: Planning[Ctx], read: ReadCall) -> None:
    # Rule: request_approval takes only write calls.
    planning.request_approval(read)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: a read tool's call is a ReadCall, so it is refused too.
    planning.request_approval(lookup.call(LOOKUP_ARGS))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def registry_call_must_be_routed(planning: Planning[Ctx]) -> None:
    # Rule: ToolRegistry.call may be a write call, so it must be narrowed first.
    planning.call_tool(planning.agent.tools.call("charge", {}))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_call_has_its_tools_effect() -> None:
    # Rule: a read tool makes a ReadCall, never a WriteCall.
    _write: WriteCall = lookup.call(LOOKUP_ARGS)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: a write tool makes a WriteCall, never a ReadCall.
    _read: ReadCall = charge.call(CHARGE_ARGS)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: a ReadCall cannot be forged around a write tool.
    _forged = ReadCall(tool=charge, args=CHARGE_ARGS)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def no_direct_path_to_tool_calling(
    agent: Agent[Ctx], ctx: Ctx, write: WriteCall, tool_calling: ToolCalling[Ctx]
) -> None:
    # Rule: ToolCalling cannot be built at all (phases are sealed: only a transition makes
    # one), and not around an unapproved write call (mypy reports both).
    ToolCalling(agent=agent, ctx=ctx, call=write, call_id="c")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    # Rule: nor through the agent's configured ToolCalling class.
    configured = agent.phases.tool_calling
    configured(agent=agent, ctx=ctx, call=write, call_id="c")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    # Rule: nor by evolving a ToolCalling that ran a read call. mypy only: pyright does not
    # check attrs.evolve's keywords (README, typing; tests/test_pyright.py pins the gap).
    attrs.evolve(tool_calling, call=write)  # type: ignore[arg-type]
    # Rule: Retrying leads to ToolCalling, so it cannot hold an unapproved write call.
    Retrying(agent=agent, ctx=ctx, call=write, call_id="c", attempt=1, error="")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    # Rule: Observing holds only calls that were allowed to run.
    Observing(agent=agent, ctx=ctx, call=write, call_id="c", output=None)  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]
    # Rule: a read call needs no approval, so AwaitApproval refuses one.
    read = lookup.call(LOOKUP_ARGS)
    AwaitApproval(agent=agent, ctx=ctx, call=read, call_id="c")  # type: ignore[call-arg, arg-type]  # pyright: ignore[reportCallIssue]


def approve_takes_an_approval(waiting: AwaitApproval[Ctx], denial: Denial) -> None:
    # Rule: a denial is not an approval.
    waiting.approve(denial)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: a name is not an approval; an Approval records the call and who approved it.
    waiting.approve("alice")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: an approval is made by the runtime from a gate's yes, not from a bare call.
    waiting.approve(waiting.call)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: nor from the yes itself: a gate's Approve is not an Approval.
    waiting.approve(Approve(by="alice"))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: deny takes the reason the model will be told, not a Denial object.
    waiting.deny(denial)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def the_legal_path(waiting: AwaitApproval[Ctx], rt: Runtime) -> ToolCalling[Ctx] | None:
    """The one way a write call reaches ToolCalling: the runtime asks the gate, and its
    Approval (made from the gate's yes, for that exact call) is given to approve."""
    decision = await rt.decide(waiting.request(rt.run_id))
    if isinstance(decision, Approval):
        return waiting.approve(decision)
    return None


def approved_call_has_no_public_constructor(write: WriteCall, approval: Approval) -> None:
    # Rule: only AwaitApproval.approve makes an ApprovedCall; building one is refused.
    ApprovedCall(write, approval)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
