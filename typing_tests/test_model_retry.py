"""A model call's retry goes only back to Planning or to Failed, and only Planning starts one."""

from __future__ import annotations

from typing import assert_never

from statemachine import (
    AwaitApproval,
    Failed,
    ModelRetrying,
    Observing,
    Planning,
    Responding,
    Retrying,
    Runtime,
    ToolCalling,
)

from ._fixtures import Ctx


async def model_retry_may_fail(retrying: ModelRetrying[Ctx], rt: Runtime) -> Planning[Ctx]:
    # Rule: retry() may end in Failed, so it is not a Planning until narrowed.
    return await retrying.retry(rt)  # type: ignore[return-value]  # pyright: ignore[reportReturnType]


async def model_retry_goes_nowhere_else(retrying: ModelRetrying[Ctx], rt: Runtime) -> None:
    # Rule: a model retry never runs a tool.
    _tool: ToolCalling[Ctx] = await retrying.retry(rt)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: a model retry never answers the customer by itself.
    _answer: Responding[Ctx] = await retrying.advance(rt)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: nor does it ask for an approval.
    _approval: AwaitApproval[Ctx] = await retrying.advance(rt)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: a model retry has no tool call to observe or execute.
    retrying.observe()  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    await retrying.execute(rt)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


async def only_planning_retries_the_model(
    tool_retrying: Retrying[Ctx], observing: Observing[Ctx], failed: Failed[Ctx]
) -> None:
    # Rule: a tool's Retrying does not retry the model; retry_model is Planning's.
    tool_retrying.retry_model("busy")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Observing cannot retry the model either.
    observing.retry_model("busy")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: Failed is terminal, whatever its reason.
    failed.retry_model("busy")  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def retry_model_is_a_model_retrying(planning: Planning[Ctx]) -> None:
    # Rule: retry_model() goes to ModelRetrying, not back to Planning.
    _again: Planning[Ctx] = planning.retry_model("busy")  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


class NarrowerModelRetrying(ModelRetrying[Ctx]):
    """Legal: an override may narrow the successors (here: never Failed)."""

    async def advance(self, rt: Runtime) -> Planning[Ctx]:
        # Rule: the body's own union still has Failed in it, so it must be narrowed.
        return await self.retry(rt)  # type: ignore[return-value]  # pyright: ignore[reportReturnType]


class WiderModelRetrying(ModelRetrying[Ctx]):
    # Rule: an override may not add a successor (ToolCalling) the base does not name.
    async def advance(self, rt: Runtime) -> Planning[Ctx] | ToolCalling[Ctx] | Failed[Ctx]:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        return await self.retry(rt)


# Legal: the result narrowed.


async def model_retry_narrowed(retrying: ModelRetrying[Ctx], rt: Runtime) -> Planning[Ctx] | None:
    again = await retrying.retry(rt)
    match again:
        case Planning():
            return again
        case Failed():
            return None
        case _:
            assert_never(again)


async def planning_may_go_to_model_retrying(planning: Planning[Ctx], rt: Runtime) -> None:
    after = await planning.advance(rt)
    if isinstance(after, ModelRetrying):
        _retried: Planning[Ctx] | Failed[Ctx] = await after.advance(rt)
