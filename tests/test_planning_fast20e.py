"""The model call of ``_planning._plan`` in its own frame, pinned against ``_heard``.

``_plan`` asks the model itself (``_heard``'s and ``_reply``'s work, without their two
coroutines) when the runtime is a ``Runtime`` reading ``time.monotonic`` and the budget
a ``Budget`` with no wall-clock limit; ``_reply``'s handling of what came back is
``_unreplied`` (what the model raised) and ``_replied`` (the reply), which ``_reply``
calls too. Each case runs ``_plan`` twice on alike phases: once on that path, once with a
clock of another identity (``_heard``'s path, as before), and the two must agree: the
phase made (class, every field but the seal), the request the model got, or the error
raised. ``_reply`` itself, through ``_unreplied`` and ``_replied``, is pinned against its
form before them (``_reply_before``).
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_planning_fast import _lookup, _Said

from statemachine import (
    Agent,
    Budget,
    CircuitBreaker,
    LoopGovernor,
    ModelReply,
    ModelRequest,
    RetryPolicy,
    Runtime,
    _planning,
)
from statemachine._errors import ModelRequestError, ModelResponseError, ModelUnavailableError
from statemachine._model import ToolRequest, Usage, _checked_reply
from statemachine._planning import (
    _DEADLINE,
    _answered,
    _asked,
    _out_of_time,
    _plan,
    _timed_out,
    _usage_problem,
)
from statemachine._retry import _transient_words, _Unanswered
from statemachine.testing import AutoDenyGate, reply, tool_call


class _MyTimeout(TimeoutError):
    pass


class _Odd(Exception):
    """Neither a timeout nor a model's error: it propagates."""


class _Liar(Exception):
    """An exception whose ``__class__`` says it is a timeout: ``except`` and the fast
    path's dispatch read its real class."""

    @property  # type: ignore[misc]
    def __class__(self) -> type[Any]:
        return TimeoutError


def _turn(kind: str, tokens: int, cost: str) -> Any:
    """What the model answers (or raises) for ``kind``."""
    if kind == "call":
        return tool_call("_lookup", '{"key": "a"}', tokens=tokens, cost=cost)
    if kind == "calls":
        made = tool_call("_lookup", '{"key": "a"}', tokens=tokens, cost=cost)
        second = ToolRequest(name="_lookup", arguments='{"key": "b"}')
        return made.model_copy(update={"tool_calls": (*made.tool_calls, second)})
    if kind == "cut":
        made = tool_call("_lookup", '{"key": "a"}', tokens=tokens, cost=cost)
        return made.model_copy(update={"finish_reason": "length"})
    if kind == "answer":
        return reply("done", tokens=tokens, cost=cost)
    if kind == "empty":
        return reply("", tokens=tokens, cost=cost)
    if kind == "subclass":
        return _Said(tool_calls=(ToolRequest(name="_lookup", arguments='{"key": "b"}'),))
    if kind == "bad usage":
        usage = Usage.model_construct(input_tokens=-5, output_tokens=tokens, cost=Decimal(cost))
        return ModelReply.model_construct(**{**ModelReply(text="hi").__dict__, "usage": usage})
    if kind == "text":
        return "not a reply"
    if kind == "none":
        return None
    if kind == "deadline":
        return _DEADLINE
    errors: dict[str, BaseException] = {
        "timeout": TimeoutError("took too long"),
        "bare timeout": TimeoutError(),
        "my timeout": _MyTimeout("mine"),
        "unavailable": ModelUnavailableError("busy", url="u", status=503, retry_after=2.0),
        "unreachable": ModelUnavailableError("down", url="u"),
        "refused": ModelRequestError("no", url="u", status=400),
        "throttled": ModelRequestError("slow", url="u", status=429),
        "response": ModelResponseError("garbled", url="u", excerpt="<html>"),
        "odd": _Odd("odd"),
        "liar": _Liar("liar"),
        "value": ValueError("value"),
    }
    return errors[kind]


_KINDS = [
    "call",
    "calls",
    "cut",
    "answer",
    "empty",
    "subclass",
    "bad usage",
    "text",
    "none",
    "deadline",
    "timeout",
    "bare timeout",
    "my timeout",
    "unavailable",
    "unreachable",
    "refused",
    "throttled",
    "response",
    "odd",
    "liar",
    "value",
]


class _Runtime(Runtime):  # type: ignore[misc]
    """A runtime of a subclass (Runtime is final to the type checkers only)."""


class _Model:
    """Answers (or raises) the same turn at every call, keeping the requests."""

    def __init__(self, turn: Any) -> None:
        self.turn = turn
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        if isinstance(self.turn, BaseException):
            raise self.turn
        return self.turn


def _fields(phase: Any) -> dict[str, Any]:
    """Every field of ``phase`` but the agent and the seal (the transcript as a tuple)."""
    seen = {}
    for field in attrs.fields(type(phase)):
        if field.name in ("agent", "_ticket"):
            continue
        value = getattr(phase, field.name)
        seen[field.name] = tuple(value) if field.name == "transcript" else value
    return seen


def _request(request: ModelRequest) -> dict[str, Any]:
    values = dict(request.__dict__)
    values["messages"] = tuple(request.messages)
    return {**values, "__class__": type(request), "__fields_set__": request.model_fields_set}


async def _planned(
    agent: Agent[None], turn: Any, clock: Any, choice: int, *, runtime: Any = Runtime
) -> Any:
    """What ``_plan`` gives (or raises) for ``turn`` with ``clock``, and the requests."""
    model, other = _Model(turn), _Model(turn)
    models = (model, other) if choice == 0 else (other, model)
    rt = runtime(
        run_id="r",
        model=models[0],
        gate=AutoDenyGate(),
        clock=clock,
        fallback_models=(models[1],),
    )
    planning = agent.start(None, "go").receive("go")
    if choice:
        planning = planning._copy(model_choice=choice)
    free = agent.budget if agent.budget == Budget() else None
    try:
        made: Any = await _plan(planning, rt, free)
    except Exception as error:  # the error itself is compared
        return ("raised", type(error), str(error)), [_request(r) for r in model.requests]
    seen = (type(made), made.kind, _fields(made))
    return seen, [_request(r) for r in model.requests]


def _agent(
    budget: str, retry: bool, flagged: bool, instructions: str, breaker: bool
) -> Agent[None]:
    budgets = {"free": Budget(), "limited": Budget(tokens=10**9, cost=Decimal(100))}
    return Agent[None](
        name="t",
        tools=[_lookup],
        instructions=instructions,
        budget=budgets[budget],
        model_retry=RetryPolicy(max_attempts=3) if retry else RetryPolicy(max_attempts=1),
        governor=LoopGovernor(baseline_steps=0.1) if flagged else LoopGovernor(),
        breaker=CircuitBreaker() if breaker else None,
        max_steps=10**6,
    )


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    tokens=st.integers(0, 10**6),
    cost=st.sampled_from(["0", "0.00", "1.5", "0E+3", "12345678901234567890.123"]),
    budget=st.sampled_from(["free", "limited"]),
    retry=st.booleans(),
    flagged=st.booleans(),
    instructions=st.sampled_from(["", "Be brief."]),
    breaker=st.booleans(),
    choice=st.sampled_from([0, 1]),
)
def test_plan_asks_the_model_as_heard_does(
    kind: str,
    tokens: int,
    cost: str,
    budget: str,
    retry: bool,
    flagged: bool,
    instructions: str,
    breaker: bool,
    choice: int,
) -> None:
    """``_plan`` on ``time.monotonic`` (the model asked in its frame) makes the phase
    ``_heard``'s path makes (another clock), or raises the same error, and the model is
    asked the same request: for every kind of reply, failure, budget, retry policy,
    flagging governor, instructions, breaker and model choice."""
    agent = _agent(budget, retry, flagged, instructions, breaker)

    async def both() -> tuple[Any, Any]:
        fast = await _planned(agent, _turn(kind, tokens, cost), time.monotonic, choice)
        plain = await _planned(agent, _turn(kind, tokens, cost), lambda: time.monotonic(), choice)
        return fast, plain

    fast, plain = anyio.run(both)
    assert fast == plain


@pytest.mark.anyio
async def test_the_fast_path_is_the_one_taken_on_time_monotonic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On ``time.monotonic`` with a budget of no wall-clock limit ``_plan`` does not go
    through ``_heard`` (so the test above compares two paths); with another clock, a
    wall-clock limit or a runtime of another class it does."""
    agent = _agent("free", True, False, "", False)
    heard: list[object] = []
    original = _planning._heard

    async def counting(*args: Any, **kwargs: Any) -> Any:
        heard.append(args[0])
        return await original(*args, **kwargs)

    monkeypatch.setattr(_planning, "_heard", counting)
    await _planned(agent, _turn("call", 1, "0"), time.monotonic, 0)
    assert heard == []
    await _planned(agent, _turn("call", 1, "0"), lambda: time.monotonic(), 0)
    assert len(heard) == 1
    # A wall-clock limit: the time left goes with the request (_heard's).
    timed = attrs.evolve(agent, budget=Budget(wall_clock=60.0))
    await _planned(timed, _turn("call", 1, "0"), time.monotonic, 0)
    assert len(heard) == 2
    # A runtime of another class than Runtime: _heard's.
    await _planned(agent, _turn("call", 1, "0"), time.monotonic, 0, runtime=_Runtime)
    assert len(heard) == 3


# --- _reply against its form before _unreplied and _replied ------------------------------


async def _reply_before(
    planning: Any, rt: Runtime, model: Any, request: ModelRequest, remaining: float | None
) -> tuple[Any, Any, object]:
    """``_planning._reply`` as it was before ``_unreplied`` and ``_replied`` (its except
    clauses and its tail in its own frame): the plain version they are pinned against."""
    policy, spent = planning.agent.model_retry, planning.spent
    try:
        if remaining is None and rt.events is None:
            answered: object = await model.complete(request)
        else:
            answered = await _answered(_asked(model, request, rt, planning.step), remaining)
        if type(answered) is ModelReply:
            got: ModelReply | None = answered
        else:
            got = None if answered is _DEADLINE else _checked_reply(model, answered)
    except TimeoutError as error:
        reason = _timed_out(error, remaining, rt.remaining(planning.agent.budget))
        if reason.startswith("wall-clock"):
            return reason, spent, _DEADLINE
        said = _Unanswered(reason, error if policy.retries(error) else None)
        return said, spent.add(model_calls=1), said.transient
    except (ModelUnavailableError, ModelRequestError) as error:
        said = _transient_words(error, policy)
        return said, spent.add(model_calls=1), said.transient
    except ModelResponseError as error:
        return f"the model's reply could not be used: {error}", spent, None
    if got is None:
        return _out_of_time(remaining), spent, _DEADLINE
    usage = got.usage
    problem = _usage_problem(usage)
    if problem is not None:
        return f"the model's reply could not be used: {problem}", spent, None
    return got, spent.add(tokens=usage.tokens, cost=usage.cost, model_calls=1), None


def _heard_as(outcome: tuple[Any, Any, object], turn: Any) -> tuple[Any, ...]:
    """What a ``_reply`` answer says: the reason's class and text (or the very reply),
    what made it transient, the spend (its cost's spelling too) and the outcome."""
    said, spent, outcome_of = outcome
    text = str(said) if isinstance(said, str) else said is turn
    transient = getattr(said, "transient", None)
    made = "deadline" if outcome_of is _DEADLINE else outcome_of is turn if outcome_of else None
    return (
        type(said),
        text,
        transient is turn if transient is not None else None,
        getattr(said, "retry_after", None),
        spent,
        str(spent.cost),
        made,
    )


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(_KINDS),
    tokens=st.integers(0, 10**6),
    cost=st.sampled_from(["0", "0.00", "1.5", "0E+3"]),
    retry=st.booleans(),
    timing=st.sampled_from(["none", "time left", "out of time"]),
)
def test_reply_answers_as_before(
    kind: str, tokens: int, cost: str, retry: bool, timing: str
) -> None:
    """``_reply`` (through ``_unreplied`` and ``_replied``) answers what its form before
    answered, or raises the same error: every kind of reply and failure, with no time
    limit, time left, and the run's time out when the model's own timeout comes."""
    wall = None if timing == "none" else 60.0
    agent = _agent("free", retry, False, "", False)
    agent = attrs.evolve(agent, budget=Budget(wall_clock=wall))
    now = 100.0 if timing == "out of time" else 0.0
    remaining = None if wall is None else 60.0

    async def one(how: Any) -> Any:
        turn = _turn(kind, tokens, cost)
        model = _Model(turn)
        rt = Runtime(run_id="r", model=model, gate=AutoDenyGate(), clock=lambda: now, started=0.0)
        planning = agent.start(None, "go").receive("go")
        request = ModelRequest(messages=planning.messages())
        try:
            return _heard_as(await how(planning, rt, model, request, remaining), turn)
        except Exception as error:  # the error itself is compared
            return ("raised", type(error), str(error))

    async def both() -> tuple[Any, Any]:
        return await one(_planning._reply), await one(_reply_before)

    fast, plain = anyio.run(both)
    assert fast == plain
