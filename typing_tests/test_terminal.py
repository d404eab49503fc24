"""Terminal phases have no way out, and a transition exists only on its own phase."""

from __future__ import annotations

from statemachine import (
    Active,
    Approval,
    AwaitApproval,
    Done,
    Failed,
    Idle,
    Observing,
    Planning,
    Responding,
    Retrying,
    Runtime,
    ToolCalling,
)

from ._fixtures import LOOKUP_ARGS, Ctx, lookup


async def failed_is_terminal(failed: Failed[Ctx], rt: Runtime) -> None:
    # Rule: Failed cannot be retried; retrying is Retrying's transition.
    await failed.retry(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Failed has no advance, so the runner cannot step out of it.
    await failed.advance(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Failed cannot start a tool call.
    failed.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Failed cannot answer.
    failed.respond("sorry")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


async def done_is_terminal(done: Done[Ctx], rt: Runtime) -> None:
    # Rule: Done cannot call a tool.
    done.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Done has no advance.
    await done.advance(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Done cannot be finished twice; finish belongs to Responding.
    done.finish()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Done cannot take new input; receive belongs to Idle.
    done.receive("one more thing")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def terminal_phases_are_not_active(failed: Failed[Ctx], done: Done[Ctx]) -> None:
    # Rule: Failed is not an Active phase (it has no advance to call).
    _active: Active[Ctx] = failed  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: Done is not an Active phase either.
    _also_active: Active[Ctx] = done  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def idle_only_receives(idle: Idle[Ctx]) -> None:
    # Rule: Idle cannot call a tool before the model has planned.
    idle.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Idle cannot answer before the model has planned.
    idle.respond("hello")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def approval_belongs_to_await_approval(
    planning: Planning[Ctx], observing: Observing[Ctx], approval: Approval
) -> None:
    # Rule: Planning cannot approve its own write call; approve is AwaitApproval's.
    planning.approve(approval)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Observing cannot approve anything.
    observing.approve(approval)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


async def wrong_phase_transitions(
    planning: Planning[Ctx],
    waiting: AwaitApproval[Ctx],
    tool_calling: ToolCalling[Ctx],
    observing: Observing[Ctx],
    retrying: Retrying[Ctx],
    responding: Responding[Ctx],
    rt: Runtime,
) -> None:
    # Rule: Planning does not run tools itself; ToolCalling executes.
    await planning.execute(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: a call waiting for approval cannot be routed around it to a tool.
    waiting.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: a call waiting for approval cannot answer the customer meanwhile.
    waiting.respond("booked!")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: a running tool cannot be observed before it has run.
    tool_calling.observe()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: the result of a tool goes back to the model, not straight to the customer.
    observing.respond("done")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: only Retrying decides to retry; Observing cannot.
    await observing.retry(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Retrying cannot switch to another tool call.
    retrying.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: once the answer is ready, no more tool calls.
    responding.call_tool(lookup.call(LOOKUP_ARGS))  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
