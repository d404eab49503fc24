"""A reply's batch of calls: a write in it reaches ToolCalling only through AwaitApproval.

The calls of one reply wait in ``pending`` as the model wrote them (``ToolRequest``), and
are taken one at a time, routed (``next_call``) into a read, a write or an invalid call.
Nothing in a batch is a ``ReadCall`` until it is narrowed to one, so no write of it can
run without its own approval, however the batch is written.
"""

from __future__ import annotations

from typing import assert_never

from statemachine import (
    Approval,
    AwaitApproval,
    InvalidCall,
    Observing,
    Planning,
    ReadCall,
    ToolCalling,
    WriteCall,
)

from ._fixtures import ChargeArgs, Ctx


def a_pending_call_is_not_a_call(planning: Planning[Ctx]) -> None:
    for request in planning.pending:
        # Rule: a pending call is the model's request, not a call: it runs only once routed.
        planning.call_tool(request)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        # Rule: and it is not a write call that could be approved as it is.
        planning.request_approval(request)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def the_next_call_may_be_a_write(planning: Planning[Ctx]) -> ToolCalling[Ctx]:
    # Rule: the next pending call may be a write (or invalid, or none): it is not run
    # until it is narrowed to a read call.
    return planning.call_tool(planning.next_call())  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_batch_with_a_write(
    planning: Planning[Ctx], batch: tuple[ReadCall, WriteCall[ChargeArgs]]
) -> ToolCalling[Ctx]:
    read, write = batch
    planning.call_tool(read)
    # Rule: the write of a batch does not go to ToolCalling with the reads.
    return planning.call_tool(write)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_batch_of_calls_is_not_one_call(planning: Planning[Ctx], batch: tuple[ReadCall, ...]) -> None:
    # Rule: a batch is taken one call at a time, each through its own transition.
    planning.call_tool(batch)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def each_write_waits_for_its_own_approval(
    planning: Planning[Ctx], write: WriteCall[ChargeArgs], approval: Approval[ChargeArgs]
) -> ToolCalling[Ctx]:
    waiting = planning.request_approval(write)
    # Rule: asking for approval is not running: AwaitApproval is not ToolCalling.
    _running: ToolCalling[Ctx] = waiting  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    return waiting.approve(approval)


def observing_goes_back_to_planning(observing: Observing[Ctx]) -> None:
    # Rule: after a result, the next pending call is taken by Planning, not run at once.
    _next: ToolCalling[Ctx] = observing.observe()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: nor does it wait for an approval without Planning asking for one.
    _waiting: AwaitApproval[Ctx] = observing.observe()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def take_the_next_pending_call(
    planning: Planning[Ctx],
) -> ToolCalling[Ctx] | AwaitApproval[Ctx, ChargeArgs] | Planning[Ctx]:
    """Legal: the next pending call, narrowed, goes where its effect allows."""
    routed = planning.next_call()
    match routed:
        case ReadCall():
            return planning.call_tool(routed)
        case WriteCall():
            return planning.request_approval(routed)
        case InvalidCall():
            return planning.reject_call(routed)
        case None:
            return planning
        case _:
            assert_never(routed)


def a_write_narrowed_as_a_read_is_still_refused(planning: Planning[Ctx]) -> ToolCalling[Ctx]:
    routed = planning.next_call()
    if isinstance(routed, WriteCall):
        # Rule: narrowing to a write does not make it runnable from Planning.
        return planning.call_tool(routed)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    if isinstance(routed, ReadCall):
        return planning.call_tool(routed)
    raise ValueError("no read call is pending")
