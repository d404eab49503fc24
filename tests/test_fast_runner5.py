"""The run loop's question whether a transition's log event is wanted, read in place
(the logger's cached answer, the last processor's class), answers as
``_Told.events_wanted`` would at every transition: levels set, loggers disabled and
``logging.disable`` called from inside a run (between two transitions), and structlog
processors of every kind last (a capture, a subclass of one, a class that claims to be
one, an object whose class is changed in place); and the loop's path of phases is the one
``_Went.add`` writes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import structlog
import test_watch_quick as quick_cases
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import LogCapture

from statemachine import Agent, Budget, Runner
from statemachine._observe import _levels_of, _plain_of
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

_CALLS = 3  # three tool calls and an answer: 12 transitions
_TRANSITIONS = 3 * _CALLS + 3


def _runner(on_transition: Callable[[Any, Any], None], *, keep: bool = False) -> Runner[None]:
    agent = Agent[None](name="a", tools=[quick_cases.lookup], budget=Budget(), max_steps=100)
    turns = [tool_call("lookup", f'{{"key": "k{n}"}}') for n in range(_CALLS)]
    return Runner(
        agent,
        model=ScriptedModel([*turns, reply("done")]),
        gate=AutoDenyGate(),
        on_transition=on_transition,
        keep_states=keep,
    )


class _Records(logging.Handler):
    """The records that reach the ``statemachine`` logger's handlers."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _logging_restored() -> Iterator[logging.Logger]:
    """The ``statemachine`` logger, the root logger's level and ``logging.disable`` put
    back as they were after the block."""
    logger = logging.getLogger("statemachine")
    root = logging.getLogger()
    level, root_level, disabled = logger.level, root.level, logger.disabled
    handlers, propagate = list(logger.handlers), logger.propagate
    off = logging.root.manager.disable
    try:
        yield logger
    finally:
        logger.handlers[:] = handlers
        logger.propagate = propagate
        logger.disabled = disabled
        logger.setLevel(level)
        root.setLevel(root_level)
        logging.disable(off)


def _reference(logger: logging.Logger) -> bool:
    """``isEnabledFor(INFO)`` worked out from the levels, as the standard library does on a
    cache miss, without reading or filling the cache."""
    if logger.disabled or logger.manager.disable >= logging.INFO:
        return False
    return logger.getEffectiveLevel() <= logging.INFO


_CHANGES: dict[str, Callable[[logging.Logger], None]] = {
    "none": lambda logger: None,
    "info": lambda logger: logger.setLevel(logging.INFO),
    "warning": lambda logger: logger.setLevel(logging.WARNING),
    "notset": lambda logger: logger.setLevel(logging.NOTSET),
    "debug": lambda logger: logger.setLevel(logging.DEBUG),
    "root info": lambda logger: logging.getLogger().setLevel(logging.INFO),
    "root warning": lambda logger: logging.getLogger().setLevel(logging.WARNING),
    "disabled": lambda logger: setattr(logger, "disabled", True),
    "enabled": lambda logger: setattr(logger, "disabled", False),
    "disable info": lambda logger: logging.disable(logging.INFO),
    "disable none": lambda logger: logging.disable(logging.NOTSET),
    "asked": lambda logger: _ask(logger),  # fills the cache
}


def _ask(logger: logging.Logger) -> None:
    logger.isEnabledFor(logging.INFO)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["warning", "info", "notset", "disabled"]),
    st.lists(st.sampled_from(sorted(_CHANGES)), min_size=_TRANSITIONS, max_size=_TRANSITIONS),
)
def test_the_loop_logs_exactly_while_the_logger_takes_info(first: str, changes: list[str]) -> None:
    """Levels changed, the logger disabled and enabled, ``logging.disable`` called between
    two transitions: the loop logs exactly the transitions for which the logger takes INFO
    at that time (worked out from the levels, as ``isEnabledFor`` does)."""
    with _logging_restored() as logger:
        records = _Records()
        logger.handlers[:] = [records]
        logger.propagate = False
        logging.getLogger().setLevel(logging.WARNING)
        _CHANGES[first](logger)
        expected = [_reference(logger)]  # for the first transition
        seen = [0]

        def moved(before: object, after: object) -> None:
            _CHANGES[changes[seen[0]]](logger)
            seen[0] += 1
            expected.append(_reference(logger))

        result = anyio.run(_runner(moved).run, None, "go")
    steps = [after for _kind, after in result.path[1:]]
    assert len(steps) == _TRANSITIONS
    logged = [record for record in records.records if "transition" in record.getMessage()]
    wanted = [step for step, yes in zip(steps, expected, strict=False) if yes]
    assert len(logged) == len(wanted)
    for record, step in zip(logged, wanted, strict=True):
        assert f"step={step} " in record.getMessage() or f"step={step}\x1b" in record.getMessage()


class _Counting:
    """A last processor that is not a capture: counts the events it is given."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.entries: list[dict[str, Any]] = []  # a capture's, once moved to one

    def __call__(self, logger: object, name: str, event: dict[str, Any]) -> Any:
        self.events.append(event["event"])
        raise structlog.DropEvent


class _Subclass(LogCapture):
    """A capture of a class of its own."""


class _Claims(_Counting):
    """Not a capture, but answers ``__class__`` with one: ``isinstance`` says it is."""

    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:
        return LogCapture


class _Other(_Counting):
    """Another class with the same layout, to which an object is moved in place."""


class _Moved(LogCapture):
    """A capture, to which a ``_Counting`` object is moved in place."""


def _events(last: object) -> list[str]:
    """The events ``last`` was given, as a counter or as a capture."""
    counted: list[str] = getattr(last, "events", [])
    captured: list[dict[str, Any]] = getattr(last, "entries", [])
    return [*counted, *(entry["event"] for entry in captured)]


_LASTS: dict[str, Callable[[], object]] = {
    "counting": _Counting,
    "capture": LogCapture,
    "subclass": _Subclass,
    "claims": _Claims,
}


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(sorted(_LASTS)),
    st.lists(
        st.sampled_from(["none", "counting", "capture", "subclass", "claims", "moved", "other"]),
        min_size=_TRANSITIONS,
        max_size=_TRANSITIONS,
    ),
)
def test_the_loop_asks_isinstance_of_every_last_processor_that_may_capture(
    first: str, changes: list[str]
) -> None:
    """The structlog processors' last replaced in place between two transitions (as
    ``capture_logs`` does), or its object moved to another class in place: with the
    logger off, the loop logs exactly the transitions for which ``isinstance(last,
    LogCapture)`` holds then (a capture, a subclass, a class claiming to be one)."""
    processors = structlog.get_config()["processors"]
    kept = list(processors)
    lasts: list[object] = []

    def put(name: str) -> None:
        if name == "none":
            return
        if name in ("moved", "other"):
            last = processors[-1]
            if type(last) in (_Counting, _Other, _Moved):
                last.__class__ = _Moved if name == "moved" else _Other
            return
        last = _LASTS[name]()
        lasts.append(last)
        processors[-1] = last

    try:
        with _logging_restored() as logger:
            logger.setLevel(logging.WARNING)
            logger.propagate = False
            processors[:] = [*kept[:-1], kept[-1]]
            put(first)
            expected = [isinstance(processors[-1], LogCapture)]
            seen = [0]

            def moved(before: object, after: object) -> None:
                put(changes[seen[0]])
                seen[0] += 1
                expected.append(isinstance(processors[-1], LogCapture))

            anyio.run(_runner(moved).run, None, "go")
            logged = sum(_events(last).count("transition") for last in lasts)
    finally:
        processors[:] = kept
    assert logged == sum(expected[:_TRANSITIONS])


def test_the_cached_answer_is_read_only_for_a_logger_of_the_library_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_levels_of`` gives the logger's own cache for an exact ``logging.Logger`` with
    the standard library's ``isEnabledFor``, and an empty dict for a subclass, a logger
    with an ``isEnabledFor`` of its own, or a class whose ``isEnabledFor`` was replaced."""
    logger = logging.Logger("x")
    assert _levels_of(logger) is vars(logger)["_cache"]

    class _Sub(logging.Logger):
        pass

    assert _levels_of(_Sub("y")) == {}
    own = logging.Logger("z")
    own.isEnabledFor = lambda level: True  # type: ignore[method-assign]
    assert _levels_of(own) == {}
    assert _levels_of(object()) == {}
    plain = logging.Logger.isEnabledFor
    monkeypatch.setattr(logging.Logger, "isEnabledFor", lambda self, level: plain(self, level))
    assert _levels_of(logging.Logger("w")) == {}


def test_a_class_is_plain_only_when_isinstance_cannot_answer_true() -> None:
    """``_plain_of`` names a class only when no object of exactly it is a capture by
    ``isinstance``."""
    assert _plain_of(_Counting, LogCapture) is _Counting
    assert _plain_of(_Other, LogCapture) is _Other
    assert _plain_of(_Subclass, LogCapture) is None
    assert _plain_of(LogCapture, LogCapture) is None
    assert _plain_of(_Claims, LogCapture) is None

    class _Looks(_Counting):
        def __getattribute__(self, name: str) -> Any:
            return object.__getattribute__(self, name)

    assert _plain_of(_Looks, LogCapture) is None

    class _Meta(type):
        def __instancecheck__(cls, obj: object) -> bool:
            return True

    class _AnyCapture(metaclass=_Meta):
        pass

    assert _plain_of(_Counting, _AnyCapture) is None


@pytest.mark.parametrize("keep", [False, True])
def test_the_path_is_written_as_went_add_writes_it(keep: bool) -> None:
    """The loop's path of kinds and steps, with and without the phases kept: the same as
    the phases' own kinds and steps."""
    states: list[Any] = []

    def moved(before: object, after: object) -> None:
        states.append(after)

    result = anyio.run(_runner(moved, keep=keep).run, None, "go")
    assert len(result.path) == _TRANSITIONS + 1
    assert list(result.path[1:]) == [(state.kind, state.step) for state in states]
    assert len(result.states) == (_TRANSITIONS + 1 if keep else 1)


# --- the approvals waiting, counted without a store -------------------------------------


class _DeskGate:
    """Every request is sent to a person: the run waits."""

    async def decide(self, request: Any) -> Any:
        from statemachine import Pending

        return Pending(reason="sent to the desk")


@pytest.mark.parametrize("decided", [True, False])
def test_every_transition_from_or_to_an_approval_is_counted_as_waiting(
    decided: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a store or instruments of its own, the loop hands ``Instruments.waits``
    exactly the transitions that leave or reach ``AwaitApproval`` (the library's Planning,
    ToolCalling and Observing are never asked ``isinstance``), waiting then decided."""
    from agents.travel import FakeProvider, travel_agent
    from agents.travel._scenarios import ASK, FLIGHT, TRIP
    from statemachine import AwaitApproval, Phase
    from statemachine._observe import Instruments
    from statemachine.testing import ScriptedGate

    counted: list[tuple[str, str]] = []
    plain = Instruments.waits

    def waits(self: Instruments, before: Phase[Any], after: Phase[Any]) -> None:
        counted.append((before.kind, after.kind))
        plain(self, before, after)

    monkeypatch.setattr(Instruments, "waits", waits)
    moved: list[tuple[Any, Any]] = []

    def on(before: Any, after: Any) -> None:
        moved.append((before, after))

    weather = tool_call("get_weather", {"city": "Lisbon"})
    model = ScriptedModel([weather, tool_call("book_flight", FLIGHT), reply("Booked.")])
    runner = Runner(travel_agent(FakeProvider()), model=model, gate=_DeskGate(), on_transition=on)

    async def both() -> None:
        paused = await runner.run(TRIP, ASK)
        assert paused.status == "paused"
        if decided:
            done = await runner.drive(paused.final, run_id=paused.run_id, gate=ScriptedGate([True]))
            assert done.ok

    anyio.run(both)
    expected = [
        (before.kind, after.kind)
        for before, after in moved
        if isinstance(before, AwaitApproval) or isinstance(after, AwaitApproval)
    ]
    assert ("Planning", "AwaitApproval") in expected
    assert counted == expected


# --- a transcript with messages appended, in _appended's frame -----------------------------


def _said(at: int) -> Any:
    from statemachine import Message

    return Message(role="tool", content=f"m{at}", tool_call_id=f"c{at}", name="lookup")


_MESSAGES = [_said(at) for at in range(140)]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 130),
    st.integers(1, 4),
    st.integers(0, 2),
    st.sampled_from(["made", "appended", "prefixed"]),
)
def test_a_transcript_appended_to_is_as_appended_makes_it(
    size: int, added: int, prefix: int, how: str
) -> None:
    """``_appended`` of a ``Transcript`` itself, of any length (either side of a chunk's
    bounds, made at once, grown one message at a time, or with messages put before it):
    the same head, chunks and tail, the very same objects where ``appended`` shares them,
    and the same messages read back, as ``Transcript.appended`` makes."""
    from statemachine._fast._messages import _appended
    from statemachine._model import Transcript

    messages = _MESSAGES[:size]
    if how == "made":
        transcript = Transcript(messages)
    else:
        transcript = Transcript()
        for message in messages:
            transcript = transcript.appended(message)
    if how == "prefixed":
        transcript = transcript.prefixed(*_MESSAGES[size : size + prefix])
    new = tuple(_MESSAGES[130 : 130 + added])
    before = tuple(transcript)
    mine = _appended(transcript, *new)
    theirs = transcript.appended(*new)
    assert type(mine) is Transcript
    assert mine._head is theirs._head
    assert len(mine._chunks) == len(theirs._chunks)
    for a, b in zip(mine._chunks, theirs._chunks, strict=True):
        # A chunk of the transcript appended to is shared; one cut from the new tail
        # is made anew by each call, of the very same messages.
        assert a is b or all(x is y for x, y in zip(a, b, strict=True))
    assert len(mine._tail) == len(theirs._tail)
    assert all(a is b for a, b in zip(mine._tail, theirs._tail, strict=True))
    assert tuple(mine) == tuple(theirs) == (*before, *new)
    assert tuple(transcript) == before  # the transcript appended to is unchanged


def test_a_tuple_or_a_subclass_becomes_a_transcript_of_its_messages() -> None:
    """A tuple (a phase built by hand) or a ``Transcript`` subclass is made into a
    ``Transcript`` of its messages and the new ones, as before."""
    from statemachine._fast._messages import _appended
    from statemachine._model import Transcript

    class _Mine(Transcript):
        pass

    for held in (tuple(_MESSAGES[:3]), _Mine(_MESSAGES[:3])):
        made = _appended(held, _MESSAGES[3])
        assert type(made) is Transcript
        assert tuple(made) == tuple(_MESSAGES[:4])
