"""A transition that may go several ways must be narrowed before its result is used."""

from __future__ import annotations

from typing import assert_never

from statemachine import (
    Active,
    Done,
    Failed,
    InvalidCall,
    Observing,
    Phase,
    Planning,
    ReadCall,
    Retrying,
    Runtime,
    ToolCalling,
    WriteCall,
)

from ._fixtures import Ctx


async def retry_may_fail(retrying: Retrying[Ctx], rt: Runtime) -> ToolCalling[Ctx]:
    # Rule: retry() may end in Failed, so it is not a ToolCalling until narrowed.
    return await retrying.retry(rt)  # type: ignore[return-value]  # pyright: ignore[reportReturnType]


async def retry_result_is_a_union(retrying: Retrying[Ctx], rt: Runtime) -> None:
    # Rule: the same, as an assignment.
    _again: ToolCalling[Ctx] = await retrying.retry(rt)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: a Failed has no execute, so the union has none either.
    await (await retrying.retry(rt)).execute(rt)  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


async def execute_may_retry_or_fail(tool_calling: ToolCalling[Ctx], rt: Runtime) -> None:
    # Rule: execute() may end in Retrying or Failed, so it is not an Observing until narrowed.
    _seen: Observing[Ctx] = await tool_calling.execute(rt)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: only Observing can observe; Retrying and Failed cannot.
    (await tool_calling.execute(rt)).observe()  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


async def execute_result_as_return(tool_calling: ToolCalling[Ctx], rt: Runtime) -> Observing[Ctx]:
    # Rule: the same, as a return value.
    return await tool_calling.execute(rt)  # type: ignore[return-value]  # pyright: ignore[reportReturnType]


async def a_phase_must_be_active_to_advance(state: Phase[Ctx], rt: Runtime) -> None:
    # Rule: Phase has no advance: narrow to Active (terminal phases have none).
    await state.advance(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def forgetting_the_invalid_call(routed: ReadCall | WriteCall | InvalidCall) -> None:
    match routed:
        case ReadCall():
            pass
        case WriteCall():
            pass
        case _:
            # Rule: a match over a routed call that forgets InvalidCall is not exhaustive.
            assert_never(routed)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def forgetting_the_write_call(planning: Planning[Ctx]) -> None:
    routed = planning.agent.tools.route("charge", "{}")
    match routed:
        case ReadCall():
            planning.call_tool(routed)
        case InvalidCall():
            planning.reject_call(routed)
        case _:
            # Rule: forgetting WriteCall is caught too: a new effect cannot slip through.
            assert_never(routed)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


async def forgetting_that_execute_can_fail(tool_calling: ToolCalling[Ctx], rt: Runtime) -> None:
    after = await tool_calling.execute(rt)
    match after:
        case Observing():
            after.observe()
        case Retrying():
            await after.retry(rt)
        case _:
            # Rule: a match over execute()'s result must handle Failed.
            assert_never(after)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


# Legal: the same results, narrowed.


async def retry_narrowed_by_match(retrying: Retrying[Ctx], rt: Runtime) -> ToolCalling[Ctx] | None:
    again = await retrying.retry(rt)
    match again:
        case ToolCalling():
            return again
        case Failed():
            return None
        case _:
            assert_never(again)


async def retry_narrowed_by_isinstance(retrying: Retrying[Ctx], rt: Runtime) -> str:
    again = await retrying.retry(rt)
    if isinstance(again, Failed):
        return again.reason
    after = await again.execute(rt)
    if isinstance(after, Observing):
        return after.observe().kind
    return after.kind


async def execute_narrowed_exhaustively(tool_calling: ToolCalling[Ctx], rt: Runtime) -> Phase[Ctx]:
    after = await tool_calling.execute(rt)
    match after:
        case Observing():
            return after.observe()
        case Retrying():
            return await after.retry(rt)
        case Failed():
            return after
        case _:
            assert_never(after)


async def run_to_the_end(state: Phase[Ctx], rt: Runtime) -> str:
    """The normal loop: a Phase, narrowed to Active, advanced until it is terminal."""
    while isinstance(state, Active):
        state = await state.advance(rt)
    if isinstance(state, Done):
        return state.answer
    if isinstance(state, Failed):
        return f"failed in {state.from_phase}: {state.reason}"
    raise AssertionError(f"a phase that is neither Active nor terminal: {state.kind}")
