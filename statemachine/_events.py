"""A run as a stream of events: its transitions, and the model's text as it is written.

``Runner.events(ctx, text)`` runs the agent in a task of its own and hands the caller
an async iterator of :data:`RunEvent`: a :class:`TransitionEvent` after every
transition (saved first, when the runner has a store), a :class:`TextDelta` for each
piece of text a :class:`~statemachine.StreamingModel` writes, and one
:class:`RunFinished` with the run's result. Leaving the iteration early cancels the
run's task, and with it the model call in flight; the run is saved ``cancelled``
at its last checkpoint, as a run :meth:`~statemachine.Runner.stop` stops is.

The run's task finds its listener (an :class:`_EventSink`) through a context
variable, which the first runtime built in that task claims, so that a run started
inside one of its tools does not stream into the same listener.

A delta is text from the model, shown as it arrives and trusted for nothing else:
the reply the run goes on with is the stream's final one, checked as a reply from
``complete`` is (``_model._checked_reply``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Generic, Self, TypeAlias, TypeVar, cast, final

import anyio
import attrs

from ._errors import ModelResponseError
from ._model import ModelChunk, ModelRequest, StreamingModel

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from ._phases import AnyPhase, Phase
    from ._runner import RunResult

__all__ = [
    "RunEvent",
    "RunEvents",
    "RunFinished",
    "TextDelta",
    "TransitionEvent",
    "_claim_sink",
    "_run_events",
    "_streamed",
]

C = TypeVar("C")

# Events the run may get ahead of its reader by before it waits for them to be read.
_BUFFER: Final = 64


@final
@attrs.frozen(kw_only=True)
class TransitionEvent(Generic[C]):
    """One transition of the run: from the phase ``before`` (its kind) to ``state``.

    ``after`` is ``state``'s kind and ``step`` its step. With a store, ``state`` is
    saved before the event is sent.
    """

    before: str
    after: str
    step: int
    state: AnyPhase[C] = attrs.field(repr=False)


@final
@attrs.frozen(kw_only=True)
class TextDelta:
    """Text the model wrote since the last delta, during the step ``step``.

    Only for display: it may belong to a reply the run refuses or asks again about.
    """

    text: str
    step: int


@final
@attrs.frozen(kw_only=True)
class RunFinished(Generic[C]):
    """The last event: the run answered, failed, paused for a person or stopped."""

    result: RunResult[C]


RunEvent: TypeAlias = TransitionEvent[C] | TextDelta | RunFinished[C]
"""What ``Runner.events`` yields (``RunEvent[MyContext]``)."""


@final
class _EventSink:
    """Where one run's events go: the sending end of its memory object stream."""

    __slots__ = ("_send", "claimed")

    def __init__(self, send: MemoryObjectSendStream[Any]) -> None:
        self._send = send
        self.claimed = False

    async def transition(self, before: Phase[Any], after: Phase[Any]) -> None:
        # Every phase a run reaches is one of AnyPhase's members (Phases refuses others).
        state = cast("AnyPhase[Any]", after)
        event = TransitionEvent[Any](
            before=before.kind, after=after.kind, step=after.step, state=state
        )
        await self._send.send(event)

    async def text(self, text: str, step: int) -> None:
        await self._send.send(TextDelta(text=text, step=step))


_SINK: ContextVar[_EventSink | None] = ContextVar("statemachine_event_sink", default=None)


def _claim_sink() -> _EventSink | None:
    """The listener of the run being started in this task, once: a later run started
    in the same task (a tool's own agent) gets ``None``."""
    sink = _SINK.get()
    if sink is None or sink.claimed:
        return None
    sink.claimed = True
    return sink


@final
class RunEvents(Generic[C]):
    """The events of one run, in order; iterate with ``async for``.

    Made by ``Runner.events`` only. The iteration ends after :class:`RunFinished`; a
    run that raised (say :class:`~statemachine.EffectUncertainError`) raises the same
    error here instead.
    """

    __slots__ = ("_error", "_receive")

    def __init__(self, receive: MemoryObjectReceiveStream[Any]) -> None:
        self._receive = receive
        self._error: list[BaseException] = []

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> RunEvent[C]:
        try:
            event: RunEvent[C] = await self._receive.receive()
        except anyio.EndOfStream:
            if self._error:
                raise self._error[0] from None
            raise StopAsyncIteration from None
        return event


@asynccontextmanager
async def _run_events(
    go: Callable[[], Awaitable[RunResult[C]]],
) -> AsyncGenerator[RunEvents[C]]:
    """Run ``go`` in a task that streams its events to the iterator yielded; leaving the
    block cancels the task if the run has not finished."""
    send, receive = anyio.create_memory_object_stream[Any](_BUFFER)
    events = RunEvents[C](receive)

    async def produce() -> None:
        with send:
            _SINK.set(_EventSink(send))
            try:
                result = await go()
            except Exception as error:  # the reader raises it (anyio would group it)
                events._error.append(error)
                return
            await send.send(RunFinished(result=result))

    raised: list[Exception] = []
    async with anyio.create_task_group() as group:
        group.start_soon(produce)
        try:
            yield events
        except Exception as error:  # raised outside the group, or it would be grouped
            raised.append(error)
        finally:
            group.cancel_scope.cancel()
            receive.close()
    if raised:
        raise raised[0]


async def _streamed(
    model: StreamingModel, request: ModelRequest, said: Callable[[str], Awaitable[None]]
) -> object:
    """What ``model`` streams for ``request``: each delta passed to ``said``, then the
    final chunk's reply (unchecked: the caller checks it as it checks ``complete``'s).

    A chunk that is not a :class:`ModelChunk`, or a stream that ends without a reply,
    is a :class:`ModelResponseError`.
    """
    chunks = model.stream(request)
    try:
        async for chunk in chunks:
            # An untrusted model: its chunks are checked, its types notwithstanding.
            if not isinstance(chunk, ModelChunk) or not isinstance(chunk.text, str):  # type: ignore[redundant-expr]
                raise _bad_stream(model, f"yielded {type(chunk).__qualname__}, not a ModelChunk")
            if chunk.text:
                await said(chunk.text)
            if chunk.reply is not None:
                return chunk.reply
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
    raise _bad_stream(model, "ended without a chunk that carries the reply")


def _bad_stream(model: object, detail: str) -> ModelResponseError:
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    return ModelResponseError(
        f"stream() {detail}",
        url=name,
        message=(
            f"the model {name}'s stream() {detail}: it must yield statemachine.ModelChunk "
            "values, the last one with the whole reply (ModelChunk(reply=ModelReply(...)))"
        ),
    )
