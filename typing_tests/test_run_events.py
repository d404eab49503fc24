"""The events of ``Runner.events``: narrowed on the union, each with its own fields only.

``Runner.events`` and ``resume_events`` yield :data:`RunEvent` of the runner's context:
a ``TransitionEvent`` (its ``state`` a phase of that context), a ``TextDelta`` (text
and step, nothing more) or a ``RunFinished`` (the ``RunResult`` of that context). A
field is read only after the event is narrowed to the class that has it; the events
are frozen; and another agent's events or results do not stand in for these.
"""

from __future__ import annotations

from typing import assert_never

from statemachine import (
    AnyPhase,
    RunEvent,
    RunFinished,
    Runner,
    RunResult,
    TextDelta,
    TransitionEvent,
)

from ._fixtures import Ctx, OtherCtx


async def follow_a_run(runner: Runner[Ctx], ctx: Ctx) -> RunResult[Ctx] | None:
    """Legal: every event narrowed by ``match``; the union is exhausted."""
    async with runner.events(ctx, "Where is my order?") as events:
        async for event in events:
            match event:
                case TransitionEvent(before=before, after=after, step=step):
                    phase: AnyPhase[Ctx] = event.state
                    print(f"{step}: {before} -> {after} ({phase.kind})")
                case TextDelta(text=text):
                    print(text, end="")
                case RunFinished(result=result):
                    return result
                case _:
                    assert_never(event)
    return None


async def follow_a_resumed_run(runner: Runner[Ctx]) -> list[str]:
    """Legal: a resumed run's events are the same union, narrowed with isinstance."""
    texts: list[str] = []
    async with runner.resume_events("r-1") as events:
        async for event in events:
            if isinstance(event, TextDelta):
                texts.append(event.text)
            elif isinstance(event, RunFinished):
                finished: RunResult[Ctx] = event.result
                texts.append(finished.status)
    return texts


def a_field_needs_narrowing_first(event: RunEvent[Ctx]) -> None:
    # Rule: only a TextDelta has text; the union as a whole has none.
    event.text  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: only a RunFinished has the result.
    event.result  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def each_event_has_its_own_fields(
    delta: TextDelta, moved: TransitionEvent[Ctx], finished: RunFinished[Ctx]
) -> None:
    # Rule: a text delta carries no phase and no result: it is only text to show.
    delta.state  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    delta.result  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: a transition carries no text.
    moved.text  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    # Rule: the last event carries the result, not a phase.
    finished.state  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def events_are_frozen(delta: TextDelta, moved: TransitionEvent[Ctx]) -> None:
    # Rule: an event is a record of what happened; it cannot be changed.
    delta.text = "something else"  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
    moved.step = 0  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


def events_keep_their_context(
    moved: TransitionEvent[Ctx], finished: RunFinished[Ctx], event: RunEvent[Ctx]
) -> None:
    # Rule: a transition's phase is a phase of this agent's context, not another's.
    _phase: AnyPhase[OtherCtx] = moved.state  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: the run's result is of this context.
    _result: RunResult[OtherCtx] = finished.result  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # Rule: and an event of this run is not an event of another agent's run.
    _other: RunEvent[OtherCtx] = event  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def a_transition_is_not_a_finish(event: RunEvent[Ctx]) -> RunResult[Ctx] | None:
    if isinstance(event, TransitionEvent):
        # Rule: a transition holds its phase, not the run's result.
        return event.state  # type: ignore[return-value]  # pyright: ignore[reportReturnType]
    if isinstance(event, RunFinished):
        return event.result
    return None
