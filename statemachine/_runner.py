"""The in-memory runner: drives one run by calling ``advance`` until ``Done`` or ``Failed``."""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import date
from functools import partial
from typing import Generic, Literal, TypeVar, final

import anyio
import attrs
from opentelemetry import metrics

from ._approval import ApprovalGate
from ._errors import RunPausedError
from ._governor import VerdictRecord
from ._model import Model
from ._phases import Active, Agent, Done, Failed, Phase, Planning, Runtime

__all__ = ["RunResult", "Runner"]

C = TypeVar("C")

OnTransition = Callable[[Phase[C], Phase[C]], None]


@final
@attrs.frozen(kw_only=True)
class RunResult(Generic[C]):
    """How a run ended (or where it waits for a person), and every phase it went through."""

    run_id: str
    final: Done[C] | Failed[C] | Planning[C]
    states: tuple[Phase[C], ...] = attrs.field(repr=False)

    @property
    def ok(self) -> bool:
        """Whether the run answered."""
        return isinstance(self.final, Done)

    @property
    def status(self) -> Literal["done", "failed", "paused"]:
        """``done``, ``failed``, or ``paused`` (waiting for a person)."""
        match self.final:
            case Done():
                return "done"
            case Failed():
                return "failed"
            case _:
                return "paused"

    @property
    def verdicts(self) -> tuple[VerdictRecord, ...]:
        """Every verdict other than continue, in order."""
        return self.final.loop.verdicts

    @property
    def history(self) -> tuple[str, ...]:
        """The phases of the run by kind, e.g. ``('Idle', 'Planning', ..., 'Done')``."""
        return tuple(state.kind for state in self.states)

    def trace(self) -> str:
        """The state sequence as one line, verdicts on the arrows they caused.

        ``Idle -> Planning -[suppress: exact]-> Planning -> ... -> Done``
        """
        by_step: dict[int, list[str]] = {}
        for record in self.verdicts:
            by_step.setdefault(record.step, []).append(f"{record.verdict}: {record.check}")
        parts = [self.states[0].kind]
        for before, after in itertools.pairwise(self.states):
            said = by_step.get(before.step)
            parts.append(f" -[{'; '.join(said)}]-> " if said else " -> ")
            parts.append(after.kind)
        return "".join(parts)


@final
class Runner(Generic[C]):
    """Runs an agent with a model and an approval gate, in memory.

    ``clock`` and ``sleep`` are replaceable so tests need not wait for backoff;
    ``seed`` makes the retry jitter repeatable; ``on_transition`` is called with
    (old phase, new phase) after every transition; ``today`` dates relative words
    ("tomorrow") in answers; ``fallbacks`` is the OpenTelemetry counter that
    validation fallbacks add to (default: the global meter's).
    """

    __slots__ = (
        "_agent",
        "_clock",
        "_fallbacks",
        "_gate",
        "_model",
        "_on_transition",
        "_seed",
        "_sleep",
        "_today",
    )

    def __init__(
        self,
        agent: Agent[C],
        *,
        model: Model,
        gate: ApprovalGate,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        seed: int | None = None,
        on_transition: OnTransition[C] | None = None,
        today: Callable[[], date] = date.today,
        fallbacks: metrics.Counter | None = None,
    ) -> None:
        if agent.answer_guard is not None:
            # At start-up: a constrained guard refuses a backend that cannot enforce it.
            agent.answer_guard.check_backend(model)
        self._agent = agent
        self._model = model
        self._gate = gate
        self._clock = clock
        self._sleep = sleep
        self._seed = seed
        self._on_transition = on_transition
        self._today = today
        self._fallbacks = fallbacks

    async def run(self, ctx: C, text: str, *, run_id: str | None = None) -> RunResult[C]:
        """Run the agent on the customer's ``text`` until it answers, fails or pauses."""
        return await self.drive(self._agent.start(ctx, text), run_id=run_id)

    async def drive(self, state: Phase[C], *, run_id: str | None = None) -> RunResult[C]:
        """Advance ``state`` until the run answers, fails, or pauses for a person.

        To go on after a pause, pass ``paused.resume(note)``: a paused phase itself
        is refused, so that nobody resumes a run by accident.
        """
        if isinstance(state, Planning) and state.loop.paused:
            raise RunPausedError(state.loop.paused)
        rt = Runtime(
            run_id=run_id or uuid.uuid4().hex,
            model=self._model,
            gate=self._gate,
            clock=self._clock,
            sleep=self._sleep,
            rng=random.Random(self._seed),
            today=self._today,
            fallbacks=self._fallbacks,
        )
        states: list[Phase[C]] = [state]
        if isinstance(state, Active):
            # A phase validates its input before it starts: entering from outside (a
            # new run, a resumed one) is where a context can arrive unchecked.
            problems = state.input_problems()
            if problems:
                state = state.reject_input(problems)
                states.append(state)
        while isinstance(state, Active):
            before = state
            state = await state.advance(rt)
            states.append(state)
            if self._on_transition is not None:
                self._on_transition(before, state)
            if isinstance(state, Planning) and state.loop.paused:
                return RunResult(run_id=rt.run_id, final=state, states=tuple(states))
        if not isinstance(state, Done | Failed):  # pragma: no cover - Phase has no third kind
            raise TypeError(f"{type(state).__name__} is neither active nor terminal")
        return RunResult(run_id=rt.run_id, final=state, states=tuple(states))

    def run_sync(self, ctx: C, text: str, *, run_id: str | None = None) -> RunResult[C]:
        """:meth:`run` from synchronous code."""
        return anyio.run(partial(self.run, ctx, text, run_id=run_id))
