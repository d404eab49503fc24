"""A new agent subclasses the phases and keeps every guarantee; terminals cannot be subclassed."""

from __future__ import annotations

import attrs

from statemachine import (
    Agent,
    ApprovedCall,
    AwaitApproval,
    Done,
    Failed,
    Observing,
    Phases,
    Planning,
    ReadCall,
    Responding,
    Runtime,
    ToolCalling,
    WriteCall,
)

from ._fixtures import LOOKUP_ARGS, Ctx, OtherCtx, lookup


# Rule: Failed is @final: a subclass could add a way out of a terminal phase.
class EscapableFailed(Failed[Ctx]):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    pass


# Rule: Done is @final for the same reason.
class ResumableDone(Done[Ctx]):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    pass


# Rule: ReadCall is @final: a subclass could pass a write tool off as a read.
class SneakyRead(ReadCall):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    pass


# Rule: ApprovedCall is @final: its only maker is AwaitApproval.approve.
class SelfApproved(ApprovedCall):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    pass


# Rule: WriteCall is @final too.
class QuietWrite(WriteCall):  # type: ignore[misc]  # pyright: ignore[reportGeneralTypeIssues]
    pass


class LookupOnlyPlanning(Planning[Ctx]):
    """Narrows its successors: legal, except that the body must keep to them."""

    async def advance(self, rt: Runtime) -> ToolCalling[Ctx] | Failed[Ctx]:
        if self.step > 3:
            # Rule: advance's body is checked against its annotation: Responding is not in it.
            return self.respond("enough")  # type: ignore[return-value]  # pyright: ignore[reportReturnType]
        return self.call_tool(lookup.call(LOOKUP_ARGS))


class SkippingPlanning(Planning[Ctx]):
    """Tries to add a successor the base does not have."""

    # Rule: an override may narrow advance's successors but not widen them (Done is new).
    async def advance(  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        self, rt: Runtime
    ) -> ToolCalling[Ctx] | AwaitApproval[Ctx] | Responding[Ctx] | Planning[Ctx] | Done[Ctx]:
        return self.respond("skipped").finish()


class EagerObserving(Observing[Ctx]):
    """Tries to go from Observing straight to the customer."""

    # Rule: Observing's only successor is Planning; an override cannot add Responding.
    async def advance(self, rt: Runtime) -> Responding[Ctx]:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        return self.observe().respond("done")


class NumberedPlanning(Planning[Ctx]):
    """Breaks the instructions hook."""

    # Rule: an overridden hook keeps its signature: instructions() returns str.
    def instructions(self) -> int:  # type: ignore[override]  # pyright: ignore[reportIncompatibleMethodOverride]
        return 42


class WrongContextPlanning(Planning[Ctx]):
    """Reads its context as if it were another agent's."""

    def instructions(self) -> str:
        # Rule: self.ctx has the agent's context type, so a typo or a wrong field is caught.
        return f"Ticket {self.ctx.ticket}"  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


@attrs.frozen(kw_only=True)
class TaggedPlanning(Planning[Ctx]):
    """Adds a required field: legal, because the base's single-use cell has init=False."""

    tag: str


class TicketResponding(Responding[OtherCtx]):
    """Another agent's phase."""


def wiring(agent: Agent[Ctx], ctx: Ctx, other: OtherCtx) -> None:
    # Rule: a phase class goes in its own role: Responding is not a Planning.
    Phases(planning=Responding)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: the phase classes of one agent share its context type.
    Phases[Ctx](planning=TaggedPlanning, responding=TicketResponding)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: an agent's phases carry its context type.
    Agent[OtherCtx](name="x", phases=Phases(planning=TaggedPlanning))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: a run of an agent holds that agent's context type, and no other.
    agent.start(other, "hello")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Rule: a subclass's required field is required.
    TaggedPlanning(agent=agent, ctx=ctx)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
