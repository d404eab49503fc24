"""The closed union of the phases keeps the context type through isinstance and match."""

from __future__ import annotations

from typing import Any, assert_type

from statemachine import (
    Active,
    Agent,
    AnyPhase,
    AwaitApproval,
    Done,
    Failed,
    Phase,
    Planning,
    Runner,
    Runtime,
    load_phase,
)

from ._fixtures import Ctx


async def advance_until_done(state: AnyPhase[Ctx], rt: Runtime) -> AnyPhase[Ctx]:
    """The README's loop: every phase it goes through stays a phase of Ctx."""
    while isinstance(state, Active):
        state = await state.advance(rt)
    return state


async def drive_by_hand(agent: Agent[Ctx], ctx: Ctx, rt: Runtime) -> Done[Ctx] | None:
    final = await advance_until_done(agent.start(ctx, "hi"), rt)
    return final if isinstance(final, Done) else None


def narrowing_keeps_the_context(state: AnyPhase[Ctx]) -> Ctx:
    if isinstance(state, Planning):
        assert_type(state, Planning[Ctx])
    match state:
        case AwaitApproval():
            assert_type(state, AwaitApproval[Ctx])
        case Done():
            assert_type(state, Done[Ctx])
        case _:
            pass
    return state.ctx


def on_an_open_phase_mypy_loses_it(state: Phase[Ctx]) -> None:
    # Why AnyPhase exists: on a Phase[Ctx], mypy narrows to Planning[Any] (pyright keeps Ctx).
    if isinstance(state, Planning):
        _wrong: Planning[int] = state  # pyright: ignore[reportAssignmentType]


def narrowed_it_stays_typed(state: AnyPhase[Ctx]) -> None:
    if isinstance(state, Planning):
        # Rule: narrowed from AnyPhase[Ctx], it is a Planning of Ctx, not of anything else.
        _wrong: Planning[int] = state  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


async def results_and_restores_are_closed(
    runner: Runner[Ctx], ctx: Ctx, document: dict[str, Any], agent: Agent[Ctx]
) -> None:
    result = await runner.run(ctx, "hi")
    if isinstance(result.final, Failed):
        assert_type(result.final, Failed[Ctx])
    restored = load_phase(document, agents={"a": agent})
    assert_type(restored, AnyPhase[Ctx])


def configured_agents_have_a_context_type() -> None:
    named = Agent[Ctx].from_config({}, name="x")
    assert_type(named, Agent[Ctx])
    # Rule: a configured agent is not an Agent[Any]: name its context type,
    # Agent[Ctx].from_config(...) (pyright does not infer it from an annotated target).
    _unnamed = Agent.from_config({}, name="x")  # type: ignore[var-annotated]  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
