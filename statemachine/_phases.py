"""The nine phases of an agent run, and the agent definition that ties them together.

Every phase is a frozen, slotted attrs class, generic over the agent's context
type ``C``. A transition is a method that exists only on the phase where it is
legal and returns the next phase (a new object; nothing is mutated)::

    Idle.receive(text)               -> Planning
    Planning.call_tool(ReadCall)     -> ToolCalling
    Planning.request_approval(WriteCall) -> AwaitApproval
    Planning.respond(text)           -> Responding
    Planning.reject_call(InvalidCall) -> Planning      (the model is told what to fix)
    Planning.skip_pending(reason)    -> Planning      (every pending call answered, not run)
    Planning.fail(reason)            -> Failed
    Planning.retry_model(error)      -> ModelRetrying   (the model's service failed for now)
    AwaitApproval.approve(Approval)  -> ToolCalling
    AwaitApproval.deny(reason)       -> Planning
    await ToolCalling.execute(rt)    -> Observing | Retrying | Failed
    Observing.observe()              -> Planning
    await Retrying.retry(rt)         -> ToolCalling | Failed
    await ModelRetrying.retry(rt)    -> Planning | Failed   (see ``_model_retry``)
    Responding.finish()              -> Done

``Failed`` and ``Done`` are terminal: they have no transition methods and no
``advance``. Every other phase has one ``async advance(rt)`` whose return
annotation is the union of its successors; the runner calls only ``advance``.

A phase object may be left once: a second transition from the same object raises
:class:`PhaseReusedError` (Python has no move semantics; this is the stand-in).

Phases are sealed: only a transition makes one (``Agent.start`` makes the first). Each
phase holds a ticket (``_Ticket``) that the library mints as it builds the phase and
binds to that one object; the ticket, not the phase, records whether the phase was
left. A phase built by its constructor, ``attrs.evolve``, ``copy`` or ``pickle`` has no
ticket of its own, so it is refused (:class:`PhaseForgedError`) and can never
transition. The runner also checks what each ``advance`` returns (see ``_watch``).
Every tool call of a reply is run or answered, in the model's order (``_batch``).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from functools import partial
from typing import (
    Any,
    ClassVar,
    Final,
    Generic,
    Self,
    TypeAlias,
    TypeVar,
    assert_never,
    cast,
    final,
)

import attrs
from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar as TypeVarWithDefault

from . import _json
from ._approval import (
    APPROVAL_OF,
    Approval,
    ApprovalRequest,
    ApprovedCall,
    Denial,
    Pending,
)
from ._batch import (
    _asked_for,
    _call_id,
    _library_planning,
    _rejected,
    _routed_head,
    _skipped,
    _suppressed,
    _take_next,
    _unanswered_refused,
)
from ._breaker import CircuitBreaker
from ._budget import Budget, Spend
from ._calling import _execute, _holds_no_unapproved_write, _retry
from ._context import _tools_fit
from ._deciding import _approved, _denied, _finished
from ._errors import (
    ConfigError,
    PhaseForgedError,
    PhaseReusedError,
    SetupError,
    UnapprovedWriteError,
)
from ._fast._attrs import _BUILDERS, _COPIERS, _built, _checks_field, _site
from ._fast._classes import _per_class, _PerClass
from ._fast._messages import _appended, _MakingMessage, _result_text, _system, _told
from ._governor import ActionRecord, Decision, Hook, LoopGovernor, LoopState
from ._graph import _check_phase_class, _edges, _successors_of
from ._guard import OutputGuard, Parsed
from ._model import (
    _CHUNK,
    EMPTY_TRANSCRIPT,
    NO_SETTINGS,
    Message,
    ModelSettings,
    ToolRequest,
    Transcript,
    _new_transcript,
)
from ._model_retry import _retry_model
from ._planning import _plan
from ._retry import MODEL_RETRY, RetryPolicy
from ._runtime import Runtime
from ._schema import Diagnostic, _type_diagnostics
from ._seal import _bind, _own_ticket, _Ticket
from ._tools import AM, InvalidCall, ReadCall, Tool, ToolRegistry, WriteCall, WriteTool, _registry

__all__ = [
    "Active",
    "Agent",
    "AnyPhase",
    "AwaitApproval",
    "Done",
    "Failed",
    "Idle",
    "ModelRetrying",
    "Observing",
    "Phase",
    "Phases",
    "Planning",
    "Responding",
    "Retrying",
    "Runtime",
    "ToolCalling",
]

C = TypeVar("C")
# The agent's dependencies (Agent[Ctx, Deps]); Agent[Ctx] alone: any (as before deps).
D = TypeVarWithDefault("D", default=Any)
P = TypeVar("P", bound="Phase[Any]")
T = TypeVar("T")


@attrs.frozen(kw_only=True)
class Phase(Generic[C]):
    """What every phase holds: the agent, its context, the conversation, the spend.

    ``step`` counts the transitions that led here.
    """

    kind: ClassVar[str] = "Phase"

    agent: Agent[C] = attrs.field(eq=False, repr=False)
    ctx: C
    # Left out of repr: a long conversation would flood every log line and traceback.
    transcript: Transcript = attrs.field(default=EMPTY_TRANSCRIPT, repr=False)
    spent: Spend = Spend.model_construct()
    step: int = 0
    # Out of repr for the same reason as the transcript: it grows with the run.
    loop: LoopState = attrs.field(default=LoopState.model_construct(), repr=False)
    # The seal: a ticket the library mints for this one object (see _Ticket). Required,
    # and of a private type, so a phase built by hand is a type error; refused at run
    # time by _bind unless it is a fresh ticket that a transition minted.
    _ticket: _Ticket = attrs.field(alias="ticket", eq=False, repr=False, validator=_bind)

    def _leave(self, transition: str) -> None:
        # _own_ticket's check without its frame when the slot holds a bound _Ticket. The
        # slot read in a try, as getattr(self, "_ticket", None) reads it (the same look-up,
        # an AttributeError answering None) without getattr's call.
        ticket: object
        try:
            ticket = self._ticket
        except AttributeError:
            ticket = None
        if type(ticket) is _Ticket and ticket.holder is not None and ticket.holder() is self:
            owned = ticket
        else:
            owned = _own_ticket(self, transition)
        left_by = owned.left_by
        if left_by is not None:
            raise PhaseReusedError(self.kind, transition, left_by)
        owned.left_by = transition

    @property
    def left(self) -> bool:
        """Whether a transition has already been taken from this object."""
        ticket = _own_ticket(self, "left")
        return ticket.left_by is not None

    def __reduce_ex__(self, protocol: object) -> Any:
        raise PhaseForgedError(self.kind, "pickling or copying a phase is refused")

    def __copy__(self) -> Self:
        raise PhaseForgedError(self.kind, "copy.copy of a phase is refused")

    def __deepcopy__(self, memo: object) -> Self:
        raise PhaseForgedError(self.kind, "copy.deepcopy of a phase is refused")

    def _next(self, cls: type[P], **changes: Any) -> P:
        """A ``cls`` carrying this phase's fields (``step`` + 1), with ``changes``.

        What ``cls(agent=self.agent, ..., step=self.step + 1, **changes)`` makes. A class
        whose ``__init__`` only sets its fields (no validator, converter or ``takes_self``
        factory) is built by a function made for it (``_builder``); any other class, and
        ``changes`` that the function does not take as they are (an unknown or a missing
        argument), go through ``cls(...)`` and its checks and errors.
        """
        made: P | None = _built(_BUILDERS, cls, self, changes, copy=False)
        if made is not None:
            return made
        changes["ticket"] = _Ticket(self._ticket, "transition")
        fields: dict[str, Any] = {
            "agent": self.agent,
            "ctx": self.ctx,
            "transcript": self.transcript,
            "spent": self.spent,
            "step": self.step + 1,
            "loop": self.loop,
            **changes,
        }
        return cls(**fields)

    def _copy(self, **changes: Any) -> Self:
        """This phase again, changed: ``attrs.evolve(self, **changes)`` with a new ticket.

        The copy takes this phase's place: this phase is left by the copy, or, when it was
        left by ``advance`` (the copy carries on that transition), it may be copied once.
        """
        ticket = _own_ticket(self, "copy")
        if ticket.left_by is None:
            ticket.left_by = "copy"
        elif ticket.left_by == "advance" and not ticket.copied:
            ticket.copied = True
        else:
            raise PhaseReusedError(self.kind, "copy", ticket.left_by)
        made: Self | None = _built(_COPIERS, type(self), self, changes, copy=True)
        if made is not None:
            return made
        changes["ticket"] = _Ticket(ticket, "copy")
        return attrs.evolve(self, **changes)

    def _fail(self, reason: str, **changes: Any) -> Failed[C]:
        return self._next(Failed, reason=reason, from_phase=self.kind, **changes)

    def input_problems(self) -> tuple[Diagnostic, ...]:
        """What is wrong with this phase's context, checked against its schema.

        A pydantic context is validated anew (it may have been built with
        ``model_construct`` or restored from elsewhere); other contexts have
        nothing to check here (attrs validators ran when they were made).
        """
        if not isinstance(self.ctx, BaseModel):
            return ()
        document = self.ctx.model_dump(mode="python", warnings=False)
        try:
            type(self.ctx).model_validate(document)
        except ValidationError as error:
            return _type_diagnostics(error, document)
        return ()

    def _fail_call(self, reason: str, **changes: Any) -> Failed[C]:
        """``Failed``, with the call this phase holds settled as failed in the loop memory."""
        call_id: str = getattr(self, "call_id")  # noqa: B009 - only phases that hold a call
        loop = self.loop.settle(call_id, "failed", reason)
        return self._fail(reason, loop=loop, **changes)


# Phase's own _leave, read at import: Observing.observe leaves in its own frame only while
# the library's Observing still holds this very function.
_PHASE_LEAVE: Final = Phase._leave


class Active(Phase[C]):
    """A phase that is not terminal: it has an ``advance``."""

    __slots__ = ()

    def reject_input(self, problems: tuple[Diagnostic, ...]) -> Failed[C]:
        """Fail before this phase starts: its context failed its schema (``input_problems``)."""
        self._leave("reject_input")
        named = "; ".join(f"{d.path}: {d.message}" for d in problems)
        return self._fail(f"the context failed its schema before {self.kind} started: {named}")

    @abc.abstractmethod
    async def advance(self, rt: Runtime) -> AnyPhase[C]:
        """Do this phase's work and return the next phase."""

    @property
    def waiting_for(self) -> str:
        """What this phase waits for a person about (``""``: it does not wait).

        A paused ``Planning`` waits for the pause's reason; an ``AwaitApproval`` whose
        gate answered ``Pending`` for ``approval of <tool>`` (the tool only: the registry
        row that shows it is not encrypted, and the arguments may be a customer's). A run
        whose phase waits is ``interrupted`` and is resumed only by a person.
        """
        return ""

    @classmethod
    def successors(cls) -> tuple[type[Phase[Any]], ...]:
        """The phase classes this class's ``advance`` may return, read from its annotation.

        Read once per class; :class:`SetupError` for an annotation that is missing,
        cannot be resolved, or names something that is not a phase.
        """
        return _per_class(_SUCCESSORS, cls, _read_successors)  # asked at every transition


@attrs.frozen(kw_only=True)
class Idle(Active[C]):
    """A run that has its input and has not started."""

    kind: ClassVar[str] = "Idle"

    input: str = ""

    def receive(self, text: str) -> Planning[C]:
        """Take the customer's words and start planning."""
        self._leave("receive")
        return self._next(
            self.agent.phases.planning,
            transcript=_appended(self.transcript, Message(role="user", content=text)),
        )

    async def advance(self, rt: Runtime) -> Planning[C]:
        """Receive the run's input."""
        return self.receive(self.input)


@_library_planning
@attrs.frozen(kw_only=True)
class Planning(Active[C]):
    """The model decides: call a tool, ask to call a write tool, or answer.

    Override :meth:`instructions` to build the system prompt from ``ctx``.
    """

    kind: ClassVar[str] = "Planning"

    # The model's calls not yet run or answered, in its order; the first goes next.
    pending: tuple[ToolRequest, ...] = ()
    invalid_streak: int = 0
    # The attempt at the model call this phase makes (ModelRetrying counts them), and
    # the model it asks (0: the runner's; n: its n-th fallback, see Runtime.model_of).
    model_attempt: int = 1
    model_choice: int = 0

    def instructions(self) -> str:
        """The system prompt for the model; by default the agent's instructions."""
        return self.agent.instructions

    @property
    def waiting_for(self) -> str:
        """The reason of the pause this phase waits in (``""``: not paused)."""
        return self.loop.paused

    def messages(self) -> Transcript:
        """What the model is shown: the instructions, then the conversation (shared)."""
        transcript = self.transcript
        if type(transcript) is not Transcript:  # a phase built by hand with a tuple
            transcript = Transcript(transcript)
        system = self.instructions()
        if not system:  # an object of the model's own: it shares only tuples with the phase
            return transcript.prefixed()
        return transcript.prefixed(_system(system))

    def _action(self, call: ReadCall | WriteCall, raw_arguments: str | None) -> ActionRecord:
        raw = _json.dumps(call.args) if raw_arguments is None else raw_arguments
        return self.agent.governor.action(call, raw, _call_id(self))

    def next_call(self) -> ReadCall | WriteCall | InvalidCall | None:
        """The first of the model's pending calls, routed by the agent's tools (``None``:
        none is pending). A transition about a call takes this one while any is pending."""
        return _routed_head(self)

    def call_tool(self, call: ReadCall, *, raw_arguments: str | None = None) -> ToolCalling[C]:
        """Run a read-only tool. A write call is refused here, by mypy and at run time.

        ``raw_arguments`` are the arguments as the model wrote them (for the
        governor's exact-duplicate check); by default, the validated ones.
        """
        if not isinstance(call, ReadCall):
            raise UnapprovedWriteError(getattr(call, "name", repr(call)))
        return _asked_for(self, "call_tool", self.agent.phases.tool_calling, call, raw_arguments)

    def request_approval(
        self, call: WriteCall[AM], *, raw_arguments: str | None = None
    ) -> AwaitApproval[C, AM]:
        """Ask a person to approve a write call before it can run."""
        if not isinstance(call, WriteCall):
            raise SetupError(f"request_approval takes a WriteCall, got {type(call).__name__}")
        waiting = self.agent.phases.await_approval
        return _asked_for(self, "request_approval", waiting, call, raw_arguments)

    def suppress(
        self, call: ReadCall | WriteCall, decision: Decision, *, raw_arguments: str | None = None
    ) -> Planning[C]:
        """Skip a call the governor suppressed; the model is told why, in words it can use."""
        return _suppressed(self, call, decision, raw_arguments)

    def respond(self, text: str, *, verified: Parsed[Any] | None = None) -> Responding[C]:
        """Answer the customer; ``verified`` is the guard's verdict on exactly this answer."""
        _unanswered_refused(self, "respond")
        self._leave("respond")
        return self._next(self.agent.phases.responding, text=text, verified=verified)

    def reject_call(self, invalid: InvalidCall) -> Planning[C]:
        """Tell the model its tool call could not run, and plan again."""
        return _rejected(self, invalid)

    def skip_pending(self, reason: str) -> Planning[C]:
        """Answer every pending call without running it, telling the model ``reason``."""
        self._leave("skip_pending")
        return _skipped(self, reason)

    def fail(self, reason: str) -> Failed[C]:
        """Stop the run without an answer."""
        self._leave("fail")
        return self._fail(reason)

    def retry_model(self, error: str, *, retry_after: float | None = None) -> ModelRetrying[C]:
        """The model call failed for now (``error``); ``ModelRetrying`` decides what next."""
        self._leave("retry_model")
        return self._next(
            self.agent.phases.model_retrying,
            attempt=self.model_attempt,
            model_choice=self.model_choice,
            error=error,
            retry_after=retry_after,
        )

    def pause(self, reason: str) -> Planning[C]:
        """Wait for a person: the runner stops here until :meth:`resume` is called."""
        self._leave("pause")
        return self._next(
            self.agent.phases.planning,
            loop=self.loop._evolve(paused=reason),
            invalid_streak=self.invalid_streak,  # a pause does not end a run of invalid calls
            pending=self.pending,
        )

    def resume(self, note: str) -> Planning[C]:
        """A person let the paused run go on; ``note`` says who and why."""
        self._leave("resume")
        flags = (*self.loop.flags, f"resumed: {note}")
        return self._next(
            self.agent.phases.planning,
            loop=self.loop._evolve(paused="", flags=flags),
            invalid_streak=self.invalid_streak,
            pending=self.pending,
        )

    def _ruled(self, hook: Hook, decision: Decision) -> Planning[C]:
        """This phase with ``decision`` in its loop memory (before leaving it)."""
        loop = self.loop.noted(self.step, hook, decision)
        return self._copy(loop=loop)

    async def advance(
        self, rt: Runtime
    ) -> (
        ToolCalling[C]
        | AwaitApproval[C]
        | Responding[C]
        | Planning[C]
        | ModelRetrying[C]
        | Failed[C]
    ):
        """Ask the governor, ask the model, ask the governor again, then route.

        Every verdict is routed in one place, ``_planning``: abort goes to ``Failed``,
        pause waits for a person, finalize asks the model for its answer with no tools,
        suppress tells the model what it already got and plans again. With the model's
        calls pending, the first is taken instead, and the model is not asked (``_batch``).
        """
        if self.pending:
            return _take_next(self, rt)
        return await _plan(self, rt)


@attrs.frozen(kw_only=True)
class AwaitApproval(Active[C], Generic[C, AM]):
    """A write call waits for a person. It does nothing else.

    Generic in the call's arguments model too (defaulted: ``AwaitApproval[C]`` is
    ``AwaitApproval[C, Any]``), so that an approval of another tool's call is a type error
    where the types carry it (``planning.request_approval(refund.call(...))``).
    """

    kind: ClassVar[str] = "AwaitApproval"

    call: WriteCall[AM]
    call_id: str
    # Why the run waits here (the gate answered Pending); empty while it is asking.
    waiting: str = ""
    pending: tuple[ToolRequest, ...] = ()  # the reply's calls after this one

    @property
    def waiting_for(self) -> str:
        """``approval of <tool>`` once the gate answered ``Pending`` (``""`` while asking)."""
        return f"{APPROVAL_OF}{self.call.name}" if self.waiting else ""

    def request(self, run_id: str) -> ApprovalRequest[AM]:
        """What the person is asked."""
        return ApprovalRequest.for_call(
            self.call, run_id=run_id, agent=self.agent.name, call_id=self.call_id
        )

    def approve(self, approval: Approval[AM]) -> ToolCalling[C]:
        """Run the call; ``approval`` must be for this exact call (tool, arguments, call id).

        The approval comes from the runtime (``await rt.decide(request)``), which made it
        from a gate's or a person's yes; ``ToolCalling.execute`` checks it again against
        the run's record before the tool runs.
        """
        return _approved(self, approval)

    def deny(self, reason: str) -> Planning[C]:
        """Do not run the call; the model is told why and plans again."""
        return _denied(self, reason)

    def wait(self, reason: str) -> AwaitApproval[C, AM]:
        """No decision yet: the run stops here until a person's decision resumes it.

        On resume this phase is run again in full (it asks the gate again), which is
        why it does nothing but ask.
        """
        self._leave("wait")
        return self._next(
            self.agent.phases.await_approval,
            call=self.call,
            call_id=self.call_id,
            waiting=reason,
            pending=self.pending,
        )

    async def advance(self, rt: Runtime) -> ToolCalling[C] | Planning[C] | AwaitApproval[C, AM]:
        """Ask the gate, then approve, deny, or wait for the person's decision.

        The phase is left before the gate is asked, so the person is asked once: a
        second ``advance`` (or any transition) of this object, even while the first
        still waits on the gate, raises :class:`PhaseReusedError`. A gate that raises
        or is cancelled leaves this object left and nothing decided: the run goes on
        from its last checkpoint (this phase, saved before it was advanced), which
        asks the gate again.
        """
        self._leave("advance")
        asking = self._copy()  # carries on the transition this advance claimed
        decision = await rt.decide(asking.request(rt.run_id))
        match decision:
            case Pending():
                return asking.wait(decision.reason)
            case Approval():
                return asking.approve(decision)
            case Denial():
                return asking.deny(decision.reason)
            case _:
                assert_never(decision)


@attrs.frozen(kw_only=True)
class ToolCalling(Active[C]):
    """A tool runs: a read call, or a write call that a person approved."""

    kind: ClassVar[str] = "ToolCalling"

    call: ReadCall | ApprovedCall
    call_id: str
    attempt: int = 1
    pending: tuple[ToolRequest, ...] = ()  # the reply's calls after this one

    def __attrs_post_init__(self) -> None:
        _holds_no_unapproved_write(self.call)

    async def execute(self, rt: Runtime) -> Observing[C] | Retrying[C] | Failed[C]:
        """Run the tool once, under its timeout and the run's deadline.

        The budget is checked before the call; a call that would cross it does not
        run. A timeout cancels the call. A failure goes to ``Retrying`` when the
        tool's retry policy retries that kind of error, else to ``Failed``.

        A write call runs with its :func:`idempotency_key` as
        :func:`current_idempotency_key`. With a ledger (``rt.ledger``) its intent is
        recorded before the call and its result after. A key already committed is
        not called again: its recorded result is observed (see ``_replayed``). A key
        with an intent and no result (the run stopped mid-call) is sent again with
        the same key only to an ``idempotent`` tool; otherwise
        :class:`EffectUncertainError` is raised and the runner leaves the run
        ``interrupted`` for a person.
        """
        self._leave("execute")
        return await _execute(self, rt)

    async def advance(self, rt: Runtime) -> Observing[C] | Retrying[C] | Failed[C]:
        """Execute the call."""
        return await self.execute(rt)


@attrs.frozen(kw_only=True)
class Observing(Active[C]):
    """A tool's result is added to what the model sees."""

    kind: ClassVar[str] = "Observing"

    call: ReadCall | ApprovedCall
    call_id: str
    output: Any
    pending: tuple[ToolRequest, ...] = ()  # the reply's calls after this one

    def __attrs_post_init__(self) -> None:
        _holds_no_unapproved_write(self.call)

    def observe(self) -> Planning[C]:
        """Show the result to the model and plan again."""
        if type(self) is Observing and Observing._leave is _PHASE_LEAVE:
            # _leave("observe") in this frame (the library's class, holding Phase's
            # _leave): its slot read in a try, then an exact _Ticket held by this very
            # object and not left is left; any other case goes through _leave, which
            # judges and raises. A subclass or a replaced _leave calls _leave.
            ticket: object
            try:
                ticket = self._ticket
            except AttributeError:
                ticket = None
            if (
                type(ticket) is _Ticket
                and (holder := ticket.holder) is not None
                and holder() is self
                and ticket.left_by is None
            ):
                ticket.left_by = "observe"
            else:
                self._leave("observe")
        else:
            self._leave("observe")
        output = self.output
        content = _result_text(output if type(output) is dict else _json.to_plain(output))
        call_id = self.call_id
        name = self.call.name
        told: Message
        if type(content) is str and type(call_id) is str and type(name) is str:
            # _told(content, call_id, name) in this frame: its first case, the same steps.
            making: Any = _MakingMessage()
            making.role = "tool"
            making.content = content
            making.tool_calls = ()
            making.tool_call_id = call_id
            making.name = name
            making.__class__ = Message
            told = making
        else:
            told = _told(content, call_id, name)
        loop = self.agent.governor.after_action(
            self.loop,
            call_id=self.call_id,
            effect=self.call.tool.effect,
            result=content,
            ctx=self.ctx,
            step=self.step,
        )
        kind = self.agent.phases.planning
        # _appended(self.transcript, told) in this frame for a Transcript itself whose
        # tail stays within a chunk (_appended's first case, the same steps); any other
        # transcript is _appended's.
        transcript: Any = self.transcript  # a phase built by hand may hold a tuple
        made: Transcript
        if type(transcript) is Transcript and len(tail := transcript._tail + (told,)) <= _CHUNK:  # noqa: RUF005
            made = _new_transcript(Transcript)
            made._head, made._chunks, made._tail = transcript._head, transcript._chunks, tail
            made._grown = (transcript._tail, tail)
        else:
            made = _appended(transcript, told)
        planning: Planning[C] = _OBSERVED(kind, self, made, loop, self.pending)
        return planning

    async def advance(self, rt: Runtime) -> Planning[C]:
        """Observe the result."""
        return self.observe()


# What ``observing._next(planning, transcript=..., loop=..., pending=...)`` makes, the
# values passed as they are (no dict of them).
_OBSERVED = _site("transcript", "loop", "pending")


@attrs.frozen(kw_only=True)
class Retrying(Active[C]):
    """A tool call failed; the system, not the model, decides whether to try again.

    Holds the attempt that failed and its error. The model never sees a failed
    attempt. When attempts run out the only result is ``Failed``.
    """

    kind: ClassVar[str] = "Retrying"

    call: ReadCall | ApprovedCall
    call_id: str
    attempt: int
    error: str
    pending: tuple[ToolRequest, ...] = ()  # the reply's calls after this one

    def __attrs_post_init__(self) -> None:
        _holds_no_unapproved_write(self.call)

    @property
    def policy(self) -> RetryPolicy:
        """The retry policy in force for this call's tool."""
        return self.agent.retry_for(self.call.tool)

    async def retry(self, rt: Runtime) -> ToolCalling[C] | Failed[C]:
        """Back off, then call again; ``Failed`` once the attempts or the time run out."""
        self._leave("retry")
        return await _retry(self, rt)

    async def advance(self, rt: Runtime) -> ToolCalling[C] | Failed[C]:
        """Retry the call, or fail."""
        return await self.retry(rt)


# Their hooks only check the call they hold (the exact types it passes, as it tests
# them first): a builder runs the check on the value itself.
for _holder in (ToolCalling, Observing, Retrying):
    _checks_field(
        _holder.__attrs_post_init__, "call", (ReadCall, ApprovedCall), _holds_no_unapproved_write
    )
del _holder


@attrs.frozen(kw_only=True)
class Responding(Active[C]):
    """The answer for the customer is ready."""

    kind: ClassVar[str] = "Responding"

    text: str
    verified: Parsed[Any] | None = attrs.field(default=None, repr=False)

    def finish(self) -> Done[C]:
        """Deliver the answer and end the run.

        A verified answer is checked once more against the bytes that were validated
        (:class:`OutputTamperedError` if anything changed since): verified and shipped
        are one object, and its SHA-256 goes into ``Done.answer_sha256``.
        """
        return _finished(self, Done)

    async def advance(self, rt: Runtime) -> Done[C]:
        """Finish."""
        return self.finish()


@final
@attrs.frozen(kw_only=True)
class Failed(Phase[C]):
    """The run stopped without an answer. Terminal: there is no way out."""

    kind: ClassVar[str] = "Failed"

    reason: str
    from_phase: str = ""
    partial: str = ""


@final
@attrs.frozen(kw_only=True)
class Done(Phase[C]):
    """The run answered. Terminal: there is no way out."""

    kind: ClassVar[str] = "Done"

    answer: str
    verified: Parsed[Any] | None = attrs.field(default=None, repr=False)
    answer_sha256: str = ""

    @property
    def output(self) -> Any:
        """The validated, frozen answer object (the guard's schema), if there was a guard."""
        return None if self.verified is None else self.verified.value


@attrs.frozen(kw_only=True)
class ModelRetrying(Active[C]):
    """A model call failed for now; the system, not the model, decides whether to ask again.

    ``attempt`` is the attempt that failed, ``model_choice`` the model that failed it (0:
    the runner's, n: its n-th fallback, tried next at once), ``error`` the service's words,
    ``retry_after`` the seconds it asked to wait (``None``: not said). The policy is
    ``Agent.model_retry``; when its attempts run out ``advance`` raises
    :class:`ModelRetriesExhaustedError` and the run waits, ``failed_resumable``, for a
    resume (see ``_model_retry``).
    """

    kind: ClassVar[str] = "ModelRetrying"

    attempt: int
    error: str
    retry_after: float | None = None
    model_choice: int = 0

    async def retry(self, rt: Runtime) -> Planning[C] | Failed[C]:
        """Wait, then plan again; ``Failed`` when the budget or the time runs out first."""
        self._leave("retry")
        return await _retry_model(self, rt)

    async def advance(self, rt: Runtime) -> Planning[C] | Failed[C]:
        """Retry the model call, or fail."""
        return await self.retry(rt)


# The closed union of the phases. ``isinstance`` and ``match`` on an ``AnyPhase[C]`` keep
# ``C`` under both checkers (on a ``Phase[C]``, mypy narrows to ``Planning[Any]``).
AnyPhase: TypeAlias = (
    Idle[C]
    | Planning[C]
    | AwaitApproval[C]
    | ToolCalling[C]
    | Observing[C]
    | Retrying[C]
    | ModelRetrying[C]
    | Responding[C]
    | Failed[C]
    | Done[C]
)


@final
@attrs.frozen(kw_only=True)
class Phases(Generic[C]):
    """The phase classes an agent runs with; subclass a phase and name it here.

    Building it reads the graph from every ``advance`` annotation (see
    :func:`agent_graph`): a target that is not one of these phases is a
    :class:`SetupError` here, where the agent is defined, not in the middle of a run.
    """

    idle: type[Idle[C]] = attrs.field(
        default=cast("type[Idle[Any]]", Idle), validator=_check_phase_class("idle", Idle)
    )
    planning: type[Planning[C]] = attrs.field(
        default=cast("type[Planning[Any]]", Planning),
        validator=_check_phase_class("planning", Planning),
    )
    await_approval: type[AwaitApproval[C]] = attrs.field(
        default=cast("type[AwaitApproval[Any]]", AwaitApproval),
        validator=_check_phase_class("await_approval", AwaitApproval),
    )
    tool_calling: type[ToolCalling[C]] = attrs.field(
        default=cast("type[ToolCalling[Any]]", ToolCalling),
        validator=_check_phase_class("tool_calling", ToolCalling),
    )
    observing: type[Observing[C]] = attrs.field(
        default=cast("type[Observing[Any]]", Observing),
        validator=_check_phase_class("observing", Observing),
    )
    retrying: type[Retrying[C]] = attrs.field(
        default=cast("type[Retrying[Any]]", Retrying),
        validator=_check_phase_class("retrying", Retrying),
    )
    model_retrying: type[ModelRetrying[C]] = attrs.field(
        default=cast("type[ModelRetrying[Any]]", ModelRetrying),
        validator=_check_phase_class("model_retrying", ModelRetrying),
    )
    responding: type[Responding[C]] = attrs.field(
        default=cast("type[Responding[Any]]", Responding),
        validator=_check_phase_class("responding", Responding),
    )

    def __attrs_post_init__(self) -> None:
        _graph_edges(self)  # the graph is valid for this agent (each class read once)


# --- the graph, read from the advance annotations ----------------------------------------
# Each active phase's ``advance`` is annotated with the union of the phases it may go to,
# and the type checkers check every body against it; the graph is read from those same
# annotations (``Active.successors``), so it cannot drift from the code. The core reads
# it: ``Phases`` validates an agent's graph where the agent is defined, and the runner
# checks each transition against it; ``statemachine.agent_graph`` draws it.

# The Phases fields and the phase each one must be (a subclass of), in drawing order.
_ROLES: Final[tuple[tuple[str, type[Active[Any]]], ...]] = (
    ("idle", Idle),
    ("planning", Planning),
    ("await_approval", AwaitApproval),
    ("tool_calling", ToolCalling),
    ("observing", Observing),
    ("retrying", Retrying),
    ("model_retrying", ModelRetrying),
    ("responding", Responding),
)
_TERMINAL: Final[tuple[type[Phase[Any]], ...]] = (Failed, Done)
_ORDER: Final[tuple[type[Phase[Any]], ...]] = (*(base for _, base in _ROLES), *_TERMINAL)


def _graph_edges(
    phases: Phases[Any],
) -> tuple[tuple[tuple[str, type[Active[Any]]], ...], tuple[tuple[str, str], ...]]:
    """The named active phases of an agent running ``phases``, and its edges by name.

    Raises :class:`SetupError` when an ``advance`` annotation cannot be read or names a
    phase subclass this agent does not run (see :func:`statemachine.agent_graph`).
    """
    return _edges(phases, _ROLES, _ORDER)


_ONCE = RetryPolicy(max_attempts=1, retry_on=())

# Active.successors's answers (_successors_of keeps them too, in a weak map: slower to read).
_SUCCESSORS: _PerClass[tuple[type[Phase[Any]], ...]] = {}
_read_successors = partial(_successors_of, order=_ORDER)


@final
@attrs.frozen(kw_only=True)
class Agent(Generic[C, D]):
    """An agent's definition: tools, instructions, limits and phase classes.

    ``budget`` limits each run; ``retry`` is the default retry policy (a tool's own
    ``retry`` overrides it), ``model_retry`` the model calls' (see ``ModelRetrying``),
    ``model_settings`` go with every model request of its runs (an adapter's own
    ``settings=`` are their defaults), and ``breaker`` opens a circuit per model after
    failures in a row;
    ``max_steps`` caps the model calls (planning steps) of
    one run, the last of which must answer; ``max_tool_iterations`` caps the steps
    that ask for a tool, after which the model must answer; after
    ``max_invalid_calls`` invalid tool calls in a row the run fails. ``governor``
    holds the loop checks (duplicates, cycles, convergence) and their thresholds.
    ``deps_type`` declares the type of the dependencies every run is given
    (``Runner.run(..., deps=...)``, never checkpointed) and its tools' ``RunContext``
    carries: ``Agent(..., deps_type=Desk)`` is an ``Agent[Ctx, Desk]``.
    """

    name: str
    tools: ToolRegistry[D] = attrs.field(factory=lambda: ToolRegistry(()), converter=_registry)
    instructions: str = ""
    budget: Budget = Budget.model_construct()
    retry: RetryPolicy = RetryPolicy()
    model_retry: RetryPolicy = MODEL_RETRY
    model_settings: ModelSettings = NO_SETTINGS
    breaker: CircuitBreaker | None = None
    max_steps: int = 50
    max_tool_iterations: int | None = None
    max_invalid_calls: int = 3
    governor: LoopGovernor = LoopGovernor()
    answer_guard: OutputGuard[Any] | None = None
    answer_attempts: int = 3
    phases: Phases[C] = attrs.field(factory=Phases)
    deps_type: type[D] | None = attrs.field(default=None, validator=_tools_fit)

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any],
        *,
        name: str,
        tools: ToolRegistry | Iterable[Tool] = (),
        phases: Phases[C] | None = None,
        governor: LoopGovernor | None = None,
        answer_guard: OutputGuard[Any] | None = None,
    ) -> Agent[C]:
        """An agent whose settings come from ``config`` (see :class:`AgentConfig`).

        ``phases``, ``governor`` and ``answer_guard`` are code rather than configuration.
        A typo in ``config`` raises :class:`ConfigError` here, before anything runs. The
        agent's context type is the one named (``Agent[Trip].from_config(...)``), the
        variable's (``agent: Agent[Trip] = Agent.from_config(...)``) or ``phases``'s.
        """
        from ._config import _settings  # here: only configuration reads it

        code: dict[str, Any] = {"phases": phases, "governor": governor}
        given = {key: value for key, value in code.items() if value is not None}
        given["answer_guard"] = answer_guard
        settings = _settings(config)
        if "governor" in settings and governor is not None:
            problem = "$.governor: also given as code (governor=...); give it in one place"
            raise ConfigError((problem,), path="$.governor")
        return Agent[C](name=name, tools=tools, **settings, **given)

    def start(self, ctx: C, text: str) -> Idle[C]:
        """A new run of this agent, in ``Idle``, holding the customer's words."""
        return self.phases.idle(agent=self, ctx=ctx, input=text, ticket=_Ticket(None, "start"))

    def retry_for(self, tool: Tool) -> RetryPolicy:
        """The retry policy for ``tool``: its own, else the agent's.

        A write tool that is not ``idempotent`` is never retried: after any error
        the first attempt may have acted, and a second might act twice.
        """
        if isinstance(tool, WriteTool) and not tool.idempotent:
            return _ONCE
        return tool.retry if tool.retry is not None else self.retry
