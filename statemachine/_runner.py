"""The in-memory runner: drives one run by calling ``advance`` until ``Done`` or ``Failed``."""

from __future__ import annotations

import itertools
import operator
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import date, timedelta
from decimal import Decimal
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, final

import anyio
import attrs
from typing_extensions import TypeVar as TypeVarWithDefault

from ._approval import (
    APPROVAL_OF,
    ApprovalGate,
    ApprovalRequest,
    Approve,
    ApprovedCall,
    Denial,
    Pending,
    _ApprovalBook,
    load_decision,
    waits_for_approval,
)
from ._batch import _take_next
from ._budget import Budget, Spend
from ._calling import _execute
from ._context import _deps_for_run
from ._errors import (
    CheckpointOrderError,
    DecisionRefusedError,
    EffectUncertainError,
    RunClaimedError,
    RunPausedError,
    SetupError,
)
from ._events import RunEvents, _claim_sink, _run_events
from ._governor import VerdictRecord
from ._lease import DEFAULT_LEASE, _Driving, _Leases
from ._model import Model
from ._observe import Instruments, _Told, default_instruments
from ._observe import transition_keys as _transition_keys
from ._phases import (
    Active,
    Agent,
    AnyPhase,
    AwaitApproval,
    Done,
    Failed,
    Observing,
    Phase,
    Planning,
    Retrying,
    Runtime,
    ToolCalling,
)
from ._planning import _plan
from ._saving import _Saver, _status, _stop_asked, _Went
from ._seal import _Ticket
from ._watch import Watch, check_start
from .persist._lifecycle import RunStatus

if TYPE_CHECKING:
    import logging

    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode

    from .persist._protocol import Checkpointer, RunRecord

__all__ = ["RunResult", "Runner", "StopReport"]

C = TypeVar("C")
# The agent's dependencies; Runner[Ctx] alone: a runner of an agent with any.
D = TypeVarWithDefault("D", default=Any)

OnTransition = Callable[[Phase[C], Phase[C]], None]

_monotonic = time.monotonic


def _load_deferred() -> None:
    """Bind the names from opentelemetry and logging this module uses; a runner does it.

    Not at import: ``import statemachine`` loads neither; :class:`Runner` calls this
    first thing, and only its methods use these names.
    """
    global otel_context, trace, Status, StatusCode, _library_logger
    import logging

    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    # Through the standard library's "statemachine" logger, so that nothing is printed
    # unless the application configures logging (or structlog) to show it.
    _library_logger = logging.getLogger("statemachine")


@final
@attrs.frozen(kw_only=True)
class RunResult(Generic[C]):
    """How a run ended (or where it waits for a person), and the phases it went through.

    ``path`` holds the kind and step of every phase, which ``history`` and ``trace``
    read. ``states`` holds the final phase only, unless the runner was asked to keep
    every phase (``Runner(keep_states=True)``).
    """

    run_id: str
    # The closed union, so that isinstance and match on them keep C (see AnyPhase).
    final: AnyPhase[C]
    states: tuple[AnyPhase[C], ...] = attrs.field(repr=False)
    path: tuple[tuple[str, int], ...] = attrs.field(
        default=attrs.Factory(lambda result: _path_of(result.states), takes_self=True),
        repr=False,
    )

    @property
    def ok(self) -> bool:
        """Whether the run answered."""
        return isinstance(self.final, Done)

    @property
    def status(self) -> Literal["done", "failed", "paused", "stopped"]:
        """``done``, ``failed``, ``paused`` (waiting for a person) or ``stopped``."""
        match self.final:
            case Done():
                return "done"
            case Failed():
                return "failed"
            case _ if _waits_for_a_person(self.final):
                return "paused"
            case _:
                return "stopped"

    @property
    def verdicts(self) -> tuple[VerdictRecord, ...]:
        """Every verdict other than continue, in order."""
        return self.final.loop.verdicts

    @property
    def history(self) -> tuple[str, ...]:
        """The phases of the run by kind, e.g. ``('Idle', 'Planning', ..., 'Done')``."""
        return tuple(kind for kind, _ in self.path)

    def trace(self) -> str:
        """The state sequence as one line, verdicts on the arrows they caused.

        ``Idle -> Planning -[suppress: exact]-> Planning -> ... -> Done``
        """
        by_step: dict[int, list[str]] = {}
        for record in self.verdicts:
            by_step.setdefault(record.step, []).append(f"{record.verdict}: {record.check}")
        parts = [self.path[0][0]]
        for (_, step), (kind, _) in itertools.pairwise(self.path):
            said = by_step.get(step)
            parts.append(f" -[{'; '.join(said)}]-> " if said else " -> ")
            parts.append(kind)
        return "".join(parts)


def _path_of(states: tuple[Phase[Any], ...]) -> tuple[tuple[str, int], ...]:
    return tuple((state.kind, state.step) for state in states)


def _result(run_id: str, went: _Went[C], final: Phase[C]) -> RunResult[C]:
    """How one drive ended at ``final``, with the phases it went through."""
    closed, states, path = went.ended(final)
    return RunResult(run_id=run_id, final=closed, states=states, path=path)


# The functions the runner's own loop calls in place of advance (Runner._steps), as the
# library's classes define them: it does so only while the classes still hold these very
# functions (one patched in the process, say by instrumentation, is awaited as it is).
_OWN_ADVANCE = (
    Planning.advance,
    ToolCalling.advance,
    ToolCalling.execute,
    Observing.advance,
    ToolCalling._leave,
)

# The library's Watch.accept: the runner takes accept's short way in its own frame only
# while the class holds it still (read once a drive); a replaced accept is called.
_OWN_ACCEPT = Watch.accept


def _own_advance() -> bool:
    """Whether the library's Planning, ToolCalling and Observing hold their own advance
    (and execute) still; asked once per drive."""
    now = (
        Planning.advance,
        ToolCalling.advance,
        ToolCalling.execute,
        Observing.advance,
        ToolCalling._leave,
    )
    return all(map(operator.is_, now, _OWN_ADVANCE))


@final
class Runner(Generic[C, D]):
    """Runs an agent with a model and an approval gate, in memory.

    ``clock`` and ``sleep`` are replaceable so tests need not wait for backoff;
    ``seed`` makes the retry jitter repeatable; ``on_transition`` is called with
    (old phase, new phase) after every transition; ``today`` dates relative words
    ("tomorrow") in answers; ``tracer`` and ``meter`` are where spans and metrics
    go (default: the global OpenTelemetry providers'); ``fallbacks`` is the counter
    that validation fallbacks add to (default: ``meter``'s
    ``statemachine.validation.fallbacks``). With a ``checkpointer`` every run is
    saved as it goes and held under a lease of ``lease`` while it is driven, so
    that many workers can share one store (see :meth:`resume` and :meth:`submit`).
    ``keep_states=True`` keeps every phase in ``RunResult.states`` (by default only the
    final one; the kinds and steps of all are in ``RunResult.path`` either way): the
    phases share their conversation, but each holds its own fields, so keeping them
    all costs memory that grows with the run.
    ``fallback_models`` are asked in order when ``model`` (or the one before) is
    unavailable or its circuit breaker is open; each attempt is a ``ModelRetrying``.
    ``deps`` are the dependencies of every run this runner drives or resumes (an agent
    declares their type, ``Agent(..., deps_type=...)``); a run's own ``deps=`` wins.
    """

    __slots__ = (
        "_agent",
        "_checkpointer",
        "_clock",
        "_deps",
        "_fallback_models",
        "_fallbacks",
        "_gate",
        "_keep_states",
        "_leases",
        "_metrics",
        "_model",
        "_on_transition",
        "_seed",
        "_sleep",
        "_today",
        "_tracer",
    )

    def __init__(
        self,
        agent: Agent[C, D],
        *,
        model: Model,
        gate: ApprovalGate,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        seed: int | None = None,
        on_transition: OnTransition[C] | None = None,
        today: Callable[[], date] = date.today,
        fallbacks: metrics.Counter | None = None,
        checkpointer: Checkpointer | None = None,
        lease: timedelta = DEFAULT_LEASE,
        tracer: trace.Tracer | None = None,
        meter: metrics.Meter | None = None,
        keep_states: bool = False,
        fallback_models: tuple[Model, ...] = (),
        deps: D | None = None,
    ) -> None:
        _load_deferred()
        if deps is not None:  # refused here, not at the first run
            _deps_for_run(agent.name, agent.deps_type, deps)
        self._deps = deps
        if agent.answer_guard is not None:
            # At start-up: a constrained guard refuses a backend that cannot enforce it.
            for backend in (model, *fallback_models):
                agent.answer_guard.check_backend(backend)
        self._agent = agent
        self._model = model
        self._fallback_models = tuple(fallback_models)
        self._gate = gate
        self._clock = clock
        self._sleep = sleep
        self._seed = seed
        self._on_transition = on_transition
        self._today = today
        # Created once here: a transition only adds to them.
        self._metrics = default_instruments() if meter is None else Instruments(meter)
        self._fallbacks = self._metrics.fallbacks if fallbacks is None else fallbacks
        self._checkpointer = checkpointer
        self._leases = _Leases(lease, agent=agent.name, log=_log)
        self._tracer = trace.get_tracer("statemachine") if tracer is None else tracer
        self._keep_states = keep_states

    @property
    def agent(self) -> Agent[C, D]:
        """The agent this runner runs."""
        return self._agent

    async def run(
        self, ctx: C, text: str, *, run_id: str | None = None, deps: D | None = None
    ) -> RunResult[C]:
        """Run the agent on the customer's ``text`` until it answers, fails or pauses.

        ``deps`` are the run's dependencies (default: the runner's), handed to its tools.
        """
        return await self.drive(self._agent.start(ctx, text), run_id=run_id, deps=deps)

    def events(
        self, ctx: C, text: str, *, run_id: str | None = None, deps: D | None = None
    ) -> AbstractAsyncContextManager[RunEvents[C]]:
        """:meth:`run`, as its events: ``async with runner.events(ctx, text) as events:``
        then ``async for event in events:``.

        Each transition is a ``TransitionEvent`` (sent after the new phase is saved),
        the text a streaming model writes comes as ``TextDelta`` s, and the last event
        is ``RunFinished`` with the :class:`RunResult`; an error the run raises is raised
        by the iteration. The run goes on in a task of its own while the block is open:
        leaving it before ``RunFinished`` (``break``, an error, a cancelled reader)
        cancels the run and its model call, and a saved run is left ``cancelled`` at
        its last checkpoint, ready to resume.
        """
        return _run_events(partial(self.run, ctx, text, run_id=run_id, deps=deps))

    def resume_events(
        self,
        run_id: str,
        *,
        note: str = "",
        decision: Approve | Denial | None = None,
        deps: D | None = None,
    ) -> AbstractAsyncContextManager[RunEvents[C]]:
        """:meth:`resume`, as its events (see :meth:`events`)."""
        go = partial(self.resume, run_id, note=note, decision=decision, deps=deps)
        return _run_events(go)

    async def submit(self, ctx: C, text: str, *, run_id: str | None = None) -> str:
        """Save a new run for a worker to run; return its id.

        The run's first phase is saved as checkpoint 0, status ``running`` with no
        lease, so the next worker that calls ``claim_next`` on the store takes it.
        """
        from .persist._codec import check_resumable, dump_phase

        checkpointer = self._require_checkpointer("submit")
        check_resumable(ctx, checkpointer)
        state = self._agent.start(ctx, text)
        run_id = run_id or uuid.uuid4().hex
        status, waiting = _status(state)
        await checkpointer.save(
            run_id,
            0,
            {**dump_phase(state), "elapsed": 0.0},
            agent=self._agent.name,
            status=status,
            phase=state.kind,
            waiting_for=waiting,
        )
        return run_id

    async def drive(
        self,
        state: Phase[C],
        *,
        run_id: str | None = None,
        gate: ApprovalGate | None = None,
        deps: D | None = None,
    ) -> RunResult[C]:
        """Advance ``state`` until the run answers, fails, or pauses for a person.

        To go on after a pause, pass ``paused.resume(note)``: a paused phase itself
        is refused, so that nobody resumes a run by accident. With a checkpointer,
        ``state`` is saved first (a new run) and every phase after it is saved as it
        is reached; a phase that raises leaves the run ``failed_resumable`` and a
        cancelled run ``cancelled``, both at the last phase saved. The checkpointer
        is also the side-effect ledger: a write call that may have gone through
        before a crash raises :class:`EffectUncertainError` and leaves the run
        ``interrupted``, waiting for a person (see the error's message).

        A stop request found in the store at a checkpoint (``request_stop``, or the
        run's record cancelled from elsewhere) stops the run there, as :meth:`stop`
        does. With a checkpointer the new run is held under a lease from before its
        first checkpoint to its end, renewed as a resumed run's is, so that a worker
        sharing the store never takes it while it runs here (:class:`RunClaimedError`
        when another holds ``run_id``). A store that outlives the process also needs
        a context class that another process can import by name: one defined in the
        script being run (``__main__``) or inside a function is refused with
        ``SetupError`` before anything is saved (move it into a module of its own), as
        is a run of an agent that declares dependencies given none (``deps``, or the
        runner's).
        """
        given = self._given(deps)
        checkpointer = self._checkpointer
        if checkpointer is None:
            return await self._drive_from(state, run_id=run_id, gate=gate, deps=given)
        from .persist._codec import check_resumable  # a run with a store only

        check_resumable(state.ctx, checkpointer)
        run_id = run_id or uuid.uuid4().hex
        go = partial(self._drive_from, state, run_id=run_id, gate=gate, deps=given)
        return await self._leases.hold(checkpointer, run_id, None, None, go)

    def _given(self, deps: D | None) -> object:
        """The dependencies of a run given ``deps`` (else the runner's), checked."""
        given = self._deps if deps is None else deps
        return _deps_for_run(self._agent.name, self._agent.deps_type, given)

    def _runtime(
        self, run_id: str, gate: ApprovalGate | None, elapsed: float, deps: object
    ) -> Runtime:
        """The runtime of one drive, with an approval book of the runner's own."""
        rt = Runtime(
            run_id=run_id,
            model=self._model,
            gate=self._gate if gate is None else gate,
            clock=self._clock,
            sleep=self._sleep,
            rng=random.Random(self._seed),
            today=self._today,
            fallbacks=self._fallbacks,
            ledger=self._checkpointer,
            fallback_models=self._fallback_models,
            events=_claim_sink(),
            deps=deps,
            # A resumed run's clock goes on from the time it had already used.
            started=self._clock() - elapsed,
        )
        # The runner's book: approvals its own gate (or a person, through the store) gave
        # in this run, never statemachine.testing's hand-made ones.
        object.__setattr__(rt, "_approvals", _ApprovalBook(hand=False))
        return rt

    async def _drive_from(
        self,
        state: Phase[C],
        *,
        run_id: str | None,
        gate: ApprovalGate | None,
        seq: int | None = None,
        elapsed: float = 0.0,
        restored: Callable[[Runtime], None] | None = None,
        deps: object = None,
        loaded: dict[str, Any] | None = None,
    ) -> RunResult[C]:
        """:meth:`drive`, or :meth:`resume` going on from checkpoint ``seq`` of a run that
        had used ``elapsed`` seconds (``restored`` records its approvals in the runtime;
        ``loaded`` is checkpoint ``seq``'s document, which ``state`` was decoded from)."""
        if isinstance(state, Planning) and state.loop.paused:
            raise RunPausedError(state.loop.paused)
        check_start(state, self._agent)
        rt = self._runtime(run_id or uuid.uuid4().hex, gate, elapsed, deps)
        if restored is not None:
            restored(rt)
        # The run's tools run with this runtime only (see _calling._checked).
        state._ticket.runtime = rt
        saver = _Saver(
            self._checkpointer,
            rt,
            self._agent.name,
            seq,
            None if loaded is None else (state, loaded),
        )
        run_span = self._tracer.start_span(
            f"run {self._agent.name}",
            attributes={"statemachine.run_id": rt.run_id, "statemachine.agent": self._agent.name},
        )
        # Known from the start, so that stop() finds the run even before its first save.
        driving = self._leases.running.setdefault(rt.run_id, _Driving())
        try:
            await saver.save(state, first=True)
        except BaseException:
            run_span.end()
            self._leases.forget(rt.run_id, driving)
            raise
        went = _Went(state, keep=self._keep_states)
        try:
            return await self._steps(state, rt, saver, went, driving, run_span)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await saver.mark(RunStatus.CANCELLED)
            raise
        except EffectUncertainError as error:
            # Not a failure to retry: a person must check with the service first. It is
            # raised (not returned) so nobody can mistake it for a finished run.
            await saver.mark(RunStatus.INTERRUPTED, waiting_for=error.waiting_for)
            raise
        except CheckpointOrderError:
            raise  # another process saved this run's next checkpoint: its status is theirs
        except Exception:
            await saver.mark(RunStatus.FAILED_RESUMABLE)
            raise
        finally:
            run_span.end()
            self._leases.forget(rt.run_id, driving)
            with anyio.CancelScope(shield=True):
                await self.count_waiting()

    async def count_waiting(self) -> None:
        """Read the runs waiting for an approval from the store into the
        ``statemachine.approvals.waiting`` gauge (done at the end of every drive; a worker
        also does it when it is idle). Nothing without a store; a store that cannot be
        read now leaves the last reading as it was."""
        store = self._checkpointer
        if store is None:
            return
        try:
            records = await store.registry(status=RunStatus.INTERRUPTED)
        except Exception as error:  # the gauge waits for the next reading
            _log().warning("approvals waiting not read", error=repr(error))
            return
        waiting = Counter(
            (record.agent, record.waiting_for.removeprefix(APPROVAL_OF))
            for record in records
            if waits_for_approval(record.waiting_for)
        )
        self._metrics.waiting_in(str(getattr(store, "_where", id(store))), waiting)

    async def _steps(
        self,
        state: Phase[C],
        rt: Runtime,
        saver: _Saver,
        went: _Went[C],
        driving: _Driving,
        run_span: Any,
    ) -> RunResult[C]:
        """Step the run, saving each phase, until it ends, waits for a person or stops."""
        watch = Watch(rt, self._agent, state)
        in_run = trace.set_span_in_context(run_span)
        log = _log().bind(run_id=rt.run_id, agent=self._agent.name)
        told = _Told(self._tracer, run_span, self._metrics)  # after the bind: its processors
        saving = self._checkpointer is not None
        on_transition, events = self._on_transition, rt.events
        if isinstance(state, Active):
            # A phase validates its input before it starts: entering from outside (a new
            # run, a resumed one) is where a context can arrive unchecked.
            problems = state.input_problems()
            if problems:
                entered, state = state, watch.accept(state, state.reject_input(problems), (Failed,))
                went.add(state)
                await saver.save(state)
                if rt.events is not None:
                    await rt.events.transition(entered, state)
        # _step's whole work for a run without a tracer or instruments of its own (the
        # no-op tracer, quiet instruments: both fixed for the drive when _Told is made),
        # done in this frame: no coroutine, frame and await of _step's per transition. The
        # same calls in the same order (the clock read twice, as _step reads it, but for
        # time.monotonic itself: see ``timed``).
        plain = told.untraced is not None and not told.metered
        direct = plain and _own_advance()
        waits = self._checkpointer is None
        # _Went.add's append of the path, in this frame, for the _Went made above (of
        # that class itself, made in _run) when it keeps no phases: the same reads
        # (kind, then step) in the same order.
        path = went._path.append if type(went) is _Went and went._keep is False else None
        # The agent's budget when it is a Budget itself with no limit, read once a drive
        # (a frozen model: what it reads now it reads at every transition): _execute and
        # _plan do not read its limits again for this very object (by identity).
        held: object = self._agent.budget
        budget = self._agent.budget
        free = (
            budget
            if type(held) is Budget
            and budget.wall_clock is None
            and budget.tool_calls is None
            and budget.tokens is None
            and budget.cost is None
            else None
        )
        # What the loop reads of the drive's own objects at every transition, read once:
        # _Driving.hand_back and _Told's logger, levels, capture class, processors and
        # plain class are set when they are made and never rebound (the levels dict and
        # the processors list change in place, and are read in place below).
        hand_back = driving.hand_back
        levels, logger, capture = told._levels, told._logger, told._capture
        processors, unheard = told._processors, told._plain
        current_context = told.current
        # Whether the run's clock is another than time.monotonic itself (a reading of which
        # does nothing): _step's reading of the time a transition took, which nothing uses
        # without instruments, is made only then. The runtime is this drive's own and
        # frozen: its clock is the same at every transition.
        timed = rt.clock is not _monotonic
        # The watch's pairs from each of the library's active classes (Watch.pairs_from:
        # the same dicts for the whole drive), for accept's short way below, while
        # Watch.accept is the library's own.
        own = Watch.accept is _OWN_ACCEPT
        from_planning = watch.pairs_from(Planning) if own else None
        from_calling = watch.pairs_from(ToolCalling) if own else None
        from_observing = watch.pairs_from(Observing) if own else None
        with driving.scope as scope:
            while isinstance(state, Active):
                if hand_back is not None and hand_back.is_set():
                    # A worker shutting down: the run stays running, for another.
                    return _result(rt.run_id, went, state)
                # (Its class is read by identity below, and not narrowed: Any.)
                before: Any = state
                if plain:
                    began = rt.clock()
                    current = current_context()
                    if current is not told.seen:
                        told.see(current)
                    attaching = told.attaching
                    token = None if attaching is None else otel_context.attach(attaching)
                    try:
                        # advance itself, without its coroutine (and execute's), for the
                        # library's own classes by identity: their advance is theirs (a
                        # slotted instance has no attribute of its own; _own_advance: the
                        # class holds the library's function), and does what is called
                        # here in the same order. A subclass's advance is awaited.
                        cls = type(before) if direct else None
                        advanced: Phase[C]
                        if cls is Observing:
                            advanced = before.observe()
                            pairs = from_observing
                            library = True
                        elif cls is ToolCalling:
                            pairs = from_calling
                            library = True
                            # _leave("execute") in this frame (the class holds Phase's
                            # _leave, _own_advance): its slot read in a try, then an exact
                            # _Ticket held by this very object and not left is left; any
                            # other case goes through _leave, which judges and raises.
                            try:
                                ticket: object = before._ticket
                            except AttributeError:
                                ticket = None
                            if (
                                type(ticket) is _Ticket
                                and (holder := ticket.holder) is not None
                                and holder() is before
                                and ticket.left_by is None
                            ):
                                ticket.left_by = "execute"
                            else:
                                before._leave("execute")
                            advanced = await _execute(before, rt, free)
                        elif cls is Planning:
                            pairs = from_planning
                            library = True
                            advanced = (
                                _take_next(before, rt)
                                if before.pending
                                else await _plan(before, rt, free)
                            )
                        else:
                            pairs = None
                            library = False
                            advanced = await before.advance(rt)
                        # Watch.accept's short way in this frame, for the library's own
                        # classes (by identity, above): the pair's function from the
                        # watch's own pairs of that class (Watch.pairs_from, read once a
                        # drive), for an advanced phase of exactly the entry's class; what
                        # it does not accept is judged by the watch's whole check, as
                        # accept judges it (not the function again). Anything else: accept.
                        if (
                            pairs is not None
                            and (entry := pairs.get(kind := type(advanced))) is not None
                            and entry[0] is kind
                        ):
                            state = (
                                advanced
                                if entry[1](watch, before, advanced)
                                else watch._checked(before, advanced, None)
                            )
                        else:
                            state = watch.accept(before, advanced)
                    except BaseException:
                        self._metrics.failed(before, rt.clock() - began)
                        raise
                    finally:
                        if token is not None:
                            otel_context.detach(token)
                    if timed:  # _step's reading of the time taken, unused without instruments
                        rt.clock()
                    # The only phases Instruments.waits counts. The library's Planning,
                    # ToolCalling and Observing (by identity) are not AwaitApproval, and
                    # isinstance answering False costs ~460 instructions (it asks the
                    # object's __class__ then): only another class is asked. ``before``
                    # advanced above as one of those three (``library``) is not asked.
                    if waits and (
                        (
                            not library
                            and (took := type(before)) is not Planning
                            and took is not ToolCalling
                            and took is not Observing
                            and isinstance(before, AwaitApproval)
                        )
                        or (
                            (made := type(state)) is not Planning
                            and made is not ToolCalling
                            and made is not Observing
                            and isinstance(state, AwaitApproval)
                        )
                    ):
                        self._metrics.waits(before, state)
                    # told.events_wanted(), read in this frame: the logger's cached answer
                    # when it is exactly False (_Told._levels; anything else asks the
                    # logger), then isinstance only for a last processor of a class other
                    # than the one known not to capture (_Told._plain).
                    if (levels.get(_INFO) is not False and logger.isEnabledFor(_INFO)) or (
                        capture is not None
                        and processors
                        and type(last := processors[-1]) is not unheard
                        and isinstance(last, capture)
                    ):
                        log.info("transition", **_transition_keys(rt, before, state))
                else:
                    state = await self._step(rt, before, in_run, log, watch, told)
                if path is None:
                    went.add(state)
                else:
                    path((state.kind, state.step))
                # Without a checkpointer there is nothing to save: no coroutine to await.
                record = await saver.save(state) if saving else None
                if on_transition is not None:
                    on_transition(before, state)
                if events is not None:
                    await events.transition(before, state)
                if record is not None and _stop_asked(record) and isinstance(state, Active):
                    # Stopped from elsewhere (the store): as stop(), at this checkpoint.
                    return await self._stopped(saver, went, driving, state, mark=True)
                # _waits_for_a_person, read in place for the library's own classes (by
                # identity): ToolCalling and Observing wait for nothing (Active.waiting_for),
                # Planning for its loop memory's pause (Planning.waiting_for).
                kind = type(state)
                if kind is ToolCalling or kind is Observing:
                    continue
                if state.loop.paused if kind is Planning else _waits_for_a_person(state):
                    return _result(rt.run_id, went, state)
        if scope.cancelled_caught:  # stop(): the last phase saved is where it stopped
            # A lost lease: another worker holds the run now, its status is not ours.
            return await self._stopped(saver, went, driving, state, mark=not driving.lost)
        if not isinstance(state, Done | Failed):  # pragma: no cover - Phase has no third kind
            raise TypeError(f"{type(state).__name__} is neither active nor terminal")
        return _result(rt.run_id, went, state)

    @staticmethod
    async def _stopped(
        saver: _Saver, went: _Went[C], driving: _Driving, state: Phase[C], *, mark: bool
    ) -> RunResult[C]:
        """The run stopped at ``state`` (its last checkpoint), marked ``cancelled``."""
        if mark:
            with anyio.CancelScope(shield=True):
                await saver.mark(RunStatus.CANCELLED)
        stopped = _result(saver.run_id, went, state)
        driving.result = stopped
        return stopped

    async def _step(
        self, rt: Runtime, before: Active[C], in_run: Context, log: Any, watch: Watch, told: _Told
    ) -> Phase[C]:
        """One transition, in one span named after it, and one log event with the same keys.

        The span is started and made current as ``start_as_current_span`` does it. Its
        name and attributes, and the event's keys, are built only when someone takes
        them: a span that records, a logger that listens. With the no-op tracer the span
        of every transition is the run's own (``_Told``), made current as it would be.
        """
        entered = rt.clock()
        if told.untraced is None:
            after, took, keys = await self._traced(rt, before, in_run, watch, entered)
        else:
            # Current all the same (spans that others start inside the phase see it), but
            # without use_span's generator: nothing of it is recorded. The no-op tracer
            # gives back the span that is current already: nothing to attach then.
            current = told.current()
            if current is not told.seen:
                told.see(current)
            attaching = told.attaching
            token = None if attaching is None else otel_context.attach(attaching)
            try:
                after = watch.accept(before, await before.advance(rt))
            except BaseException:
                self._metrics.failed(before, rt.clock() - entered)
                raise
            finally:
                if token is not None:
                    otel_context.detach(token)
            took = rt.clock() - entered
            keys = None
        if told.metered:
            self._metrics.transition(before, after, took, count_waits=self._checkpointer is None)
        elif self._checkpointer is None and (
            isinstance(before, AwaitApproval) or isinstance(after, AwaitApproval)
        ):  # the only phases Instruments.waits counts
            self._metrics.waits(before, after)
        if told.events_wanted():
            log.info(
                "transition", **(_transition_keys(rt, before, after) if keys is None else keys)
            )
        return after

    async def _traced(
        self, rt: Runtime, before: Active[C], in_run: Context, watch: Watch, entered: float
    ) -> tuple[Phase[C], float, dict[str, Any] | None]:
        """``_step``'s transition in a span of the tracer's own; the span's keys when it
        records them."""
        span = self._tracer.start_span(f"{before.kind} -> ?", context=in_run)
        if span.is_recording():
            with trace.use_span(span, end_on_exit=True):
                try:
                    after = watch.accept(before, await before.advance(rt))
                except BaseException as error:
                    self._metrics.failed(before, rt.clock() - entered)
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                    raise
                took = rt.clock() - entered
                keys = _transition_keys(rt, before, after)
                span.update_name(f"{before.kind} -> {after.kind}")
                span.set_attributes({f"statemachine.{key}": value for key, value in keys.items()})
            return after, took, keys
        # As _step's no-op branch, with the span the tracer gave.
        token = None
        if span is not trace.get_current_span():
            token = otel_context.attach(trace.set_span_in_context(span))
        try:
            after = watch.accept(before, await before.advance(rt))
        except BaseException:
            self._metrics.failed(before, rt.clock() - entered)
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
            span.end()
        return after, rt.clock() - entered, None

    async def resume(
        self,
        run_id: str,
        *,
        note: str = "",
        decision: Approve | Denial | None = None,
        owner: str | None = None,
        hand_back: anyio.Event | None = None,
        lease: timedelta | None = None,
        deps: D | None = None,
    ) -> RunResult[C]:
        """Go on with a saved run from its last checkpoint.

        Only the phase that did not finish runs again; the step count, the budget
        spent and the governor's memory continue from the checkpoint. A run paused
        for a person needs ``note`` (who let it go on, and why); a run waiting for
        an approval is given the person's ``decision`` (the waiting phase runs again
        in full and gets it as the gate's answer), or else the decision submitted to
        the store (``submit_decision``), if there is one. A completed or aborted run
        is refused (:class:`IllegalStatusChangeError`).

        The run is held under a lease while it goes on: claimed here
        (:class:`RunClaimedError` if another holds it) and released at the end, or,
        when ``owner`` is given, already claimed by the caller under that name (a
        worker's ``claim_next``), which then releases it. Either way it is renewed
        every third of the lease (``lease``, default the runner's); a lease lost to
        another worker stops the run here without changing its status. When
        ``hand_back`` is set the run stops at its next checkpoint and stays
        ``running``, for another worker to go on with.

        Dependencies are never checkpointed: a run of an agent that declares them is
        given them again (``deps``, or the runner's), or refused before anything changes.
        """
        checkpointer = self._require_checkpointer("resume")
        given = self._given(deps)
        go = partial(self._resume, checkpointer, run_id, note=note, decision=decision, deps=given)
        return await self._leases.hold(checkpointer, run_id, owner, hand_back, go, lease=lease)

    async def _resume(
        self,
        checkpointer: Checkpointer,
        run_id: str,
        *,
        note: str,
        decision: Approve | Denial | None,
        deps: object,
    ) -> RunResult[C]:
        from .persist._codec import dump_phase, load_phase

        seq, document = await checkpointer.load(run_id)
        state = load_phase(document, agents={self._agent.name: self._agent}, run_id=run_id)
        gate = await _decision_gate(checkpointer, run_id, state, decision)
        record = await checkpointer.set_status(run_id, RunStatus.RUNNING)
        if record.stop_requested:  # stopped from elsewhere before it went on
            await checkpointer.set_status(run_id, RunStatus.CANCELLED)
            stopped = RunResult(run_id=run_id, final=state, states=(state,))  # a loaded phase
            self._leases.running[run_id].result = stopped
            return stopped
        loaded: dict[str, Any] | None = document
        if isinstance(state, Planning) and state.loop.paused:
            if not note:
                raise RunPausedError(state.loop.paused)
            state = state.resume(note)
            loaded = None  # the phase saved next is not the one loaded
            seq += 1
            await checkpointer.save(
                run_id,
                seq,
                {**dump_phase(state), "elapsed": document.get("elapsed", 0.0)},
                agent=self._agent.name,
                status=RunStatus.RUNNING,
                phase=state.kind,
            )
        elapsed = document.get("elapsed", 0.0)
        return await self._drive_from(
            state,
            run_id=run_id,
            gate=gate,
            seq=seq,
            elapsed=float(elapsed) if isinstance(elapsed, int | float | Decimal) else 0.0,
            restored=partial(_admit_restored, state),
            deps=deps,
            loaded=loaded,
        )

    async def stop(self, run_id: str) -> StopReport | None:
        """Stop a run this runner is driving, at once: its current phase is cancelled.

        Every checkpoint stays and a saved run is marked ``cancelled``, ready to
        resume. Returns a report of where it stopped and how far it got (the run's own
        ``run``/``drive`` returns a result with status ``stopped``); ``None`` when the
        run is not being driven here.
        """
        driving = self._leases.running.get(run_id)
        if driving is None:
            return None
        driving.scope.cancel()
        await driving.finished.wait()
        result = driving.result
        if result is None:  # it ended on its own just before the stop arrived
            return None
        return StopReport(
            run_id=run_id,
            phase=result.final.kind,
            step=result.final.step,
            spent=result.final.spent,
            history=result.history,
        )

    async def resume_pending(self, *, deps: D | None = None) -> list[RunResult[C]]:
        """At start-up: resume this agent's runs that stopped without anyone deciding so.

        That is a run whose process died (still ``running`` in the registry) or whose
        phase raised (``failed_resumable``). A run waiting for a person
        (``interrupted``: a pause, an approval before a money move, an effect whose
        outcome is uncertain) or stopped by one (``cancelled``) is never resumed
        here: the person resumes it. A run another worker holds is left to it.
        """
        checkpointer = self._require_checkpointer("resume_pending")
        statuses = (RunStatus.RUNNING, RunStatus.FAILED_RESUMABLE)
        records = await checkpointer.registry(status=statuses, agent=self._agent.name)
        results: list[RunResult[C]] = []
        for record in records:
            try:
                results.append(await self.resume(record.run_id, deps=deps))
            except RunClaimedError:
                continue
        return results

    async def abort(self, run_id: str) -> RunRecord:
        """Decide not to go on with a saved run: nothing is undone, the record stays."""
        checkpointer = self._require_checkpointer("abort")
        return await checkpointer.set_status(run_id, RunStatus.ABORTED)

    def _require_checkpointer(self, what: str) -> Checkpointer:
        if self._checkpointer is None:
            raise SetupError(
                f"Runner.{what}() needs saved runs: construct the Runner with "
                "checkpointer=SQLiteCheckpointer(path) (or MemoryCheckpointer())"
            )
        return self._checkpointer

    def run_sync(
        self, ctx: C, text: str, *, run_id: str | None = None, deps: D | None = None
    ) -> RunResult[C]:
        """:meth:`run` from synchronous code."""
        return anyio.run(partial(self.run, ctx, text, run_id=run_id, deps=deps))


def _waits_for_a_person(state: Phase[Any]) -> bool:
    return isinstance(state, Active) and bool(state.waiting_for)


# The standard library's "statemachine" logger, bound by _load_deferred (a runner);
# logging.INFO, written out.
_library_logger: logging.Logger
_INFO = 20


@cache
def _log() -> Any:
    """The library's structlog logger, made on first use: structlog imports asyncio."""
    import structlog

    return structlog.wrap_logger(_library_logger)


@final
@attrs.frozen(kw_only=True)
class StopReport:
    """Where a stopped run stopped and how far it got."""

    run_id: str
    phase: str
    step: int
    spent: Spend
    history: tuple[str, ...]


class _Decided:
    """The gate of a resumed run: the person's decision, given once.

    A second question (the run waits for approval again later) is answered ``Pending``:
    a decision answers the one request it was given for.
    """

    def __init__(self, decision: Approve | Denial) -> None:
        self._decision: Approve | Denial | None = decision

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        decision, self._decision = self._decision, None
        return Pending() if decision is None else decision


async def _decision_gate(
    checkpointer: Checkpointer,
    run_id: str,
    state: Phase[Any],
    decision: Approve | Denial | None,
) -> ApprovalGate | None:
    """The gate a resumed run's waiting phase asks: the person's decision, given here or
    submitted to the store, once it is shown to answer this run's own call.

    ``None``: no decision (the runner's own gate is asked). A stored approval of another
    call is dropped, so the run keeps waiting for a decision about its own call.
    """
    stored = False
    if decision is None and isinstance(state, AwaitApproval):
        submitted = await checkpointer.decision(run_id)
        if submitted is not None:
            # Cleared by the next checkpoint, which the decision leads to.
            decision = load_decision(submitted, run_id=run_id)
            stored = True
    if decision is None:
        return None
    if not isinstance(state, AwaitApproval):
        raise SetupError(
            f"run {run_id} is not waiting for an approval (it is at {state.kind}); "
            "resume it without a decision"
        )
    if isinstance(decision, Approve):
        misfit = decision.misfit(state.request(run_id))
        if misfit is not None:
            if stored:
                await checkpointer.take_decision(run_id)
            raise DecisionRefusedError(
                f"the approval does not answer the call this run waits for ({misfit}); "
                "nothing was run. Approve this run's request: Approve.of(request, by=...)",
                run_id=run_id,
            )
    return _Decided(decision)


def _admit_restored(state: Phase[Any], rt: Runtime) -> None:
    """Record in ``rt``'s book the approval a phase restored from this runner's store holds.

    Only :meth:`Runner.resume` does this, for a phase it loaded from its own checkpoint
    (written by a runner after the approval was made and checked). Its attempt is counted
    as not yet run; the side-effect ledger decides whether the tool runs again.
    """
    call = getattr(state, "call", None)
    if isinstance(state, ToolCalling | Retrying) and type(call) is ApprovedCall:
        attempts = state.attempt - 1 if isinstance(state, ToolCalling) else state.attempt
        rt._approvals.admit(call.approval, attempts=attempts)
