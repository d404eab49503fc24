"""What a run makes of a model that answers the wrong thing, or too late, at the model boundary."""

from __future__ import annotations

import re
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import httpx
import openai  # noqa: F401 - loaded here, not inside a timed run (see below)
import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    Failed,
    ModelReply,
    ModelRequest,
    ModelResponseError,
    ModelRetriesExhaustedError,
    OutputGuard,
    RetryPolicy,
    Runner,
)
from statemachine._model import _checked_reply
from statemachine.models import OpenAICompatibleModel
from statemachine.testing import AutoDenyGate, FunctionModel

pytestmark = pytest.mark.anyio

AGENT = Agent[None](name="a")
LIMITED = Agent[None](name="a", budget=Budget(wall_clock=60))
# Model calls tried once: a failure that may pass is not retried, and the run is resumable.
ONCE = RetryPolicy(max_attempts=1, retry_on=(TimeoutError,))
EXPECTED = (
    "where a ModelReply was expected: its complete() must return a statemachine.ModelReply "
    "(text or tool calls, and usage), e.g. ModelReply(text=...)"
)


class Answers:
    """A model whose complete() returns ``answer``, whatever it is."""

    def __init__(self, answer: object) -> None:
        self.answer = answer

    async def complete(self, request: ModelRequest) -> Any:
        return self.answer


async def run(agent: Agent[None], model: Any) -> Failed[None]:
    """Run ``agent`` once with ``model``; the run must end in ``Failed``, with no exception."""
    with anyio.fail_after(5):
        result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    assert result.status == "failed"
    return result.final


async def exhausted(agent: Agent[None], model: Any) -> str:
    """Run ``agent`` (its model calls tried once) with ``model``; the words of the raised
    :class:`ModelRetriesExhaustedError`, which leaves the run to resume."""
    once = attrs.evolve(agent, model_retry=ONCE)
    with anyio.fail_after(5), pytest.raises(ModelRetriesExhaustedError) as raised:
        await Runner(once, model=model, gate=AutoDenyGate()).run(None, "Hi.")
    return raised.value.error


# --- a reply of the wrong type --------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "came"),
    [
        (None, "None"),
        ("Paris is sunny.", "a str ('Paris is sunny.')"),
        ({"text": "hi"}, "a dict ({'text': 'hi'})"),
    ],
)
async def test_a_reply_that_is_not_a_model_reply_fails_the_run_naming_the_model(
    answer: object, came: str
) -> None:
    """None, a string or a dict from complete() is a ModelResponseError; the run fails with it."""
    failed = await run(AGENT, Answers(answer))
    assert failed.reason == (
        f"the model's reply could not be used: the model test_model_boundary.Answers "
        f"answered {came} {EXPECTED}"
    )
    assert failed.from_phase == "Planning"


async def test_the_wrong_reply_is_a_model_response_error_with_its_parts() -> None:
    """The error names the model in ``.url``, says what came in ``.detail`` and ``.excerpt``."""
    model = Answers("x" * 200)
    with pytest.raises(ModelResponseError) as raised:
        _checked_reply(model, model.answer)
    error = raised.value
    assert type(error) is ModelResponseError
    assert isinstance(error, ValueError)
    assert error.url == "test_model_boundary.Answers"
    assert error.detail == "complete() returned a str, not a ModelReply"
    assert error.excerpt == "'" + "x" * 76 + "..."
    assert str(error).endswith(EXPECTED)


async def test_an_async_function_model_returning_none_fails_the_run() -> None:
    """statemachine.testing.FunctionModel passes an awaited None on; the run says so."""

    async def forgets_to_return(request: ModelRequest) -> Any:
        await anyio.lowlevel.checkpoint()

    failed = await run(AGENT, FunctionModel(forgets_to_return))
    assert failed.reason.startswith(
        "the model's reply could not be used: the model statemachine.testing.FunctionModel "
        "answered None where a ModelReply was expected"
    )


async def test_a_model_reply_still_goes_through() -> None:
    """The check lets a real reply by (its subclasses too)."""

    class Reply(ModelReply, frozen=True):
        pass

    model = Answers(Reply(text="ok"))
    assert _checked_reply(model, model.answer) is model.answer


# --- timeouts ---------------------------------------------------------------------------


class OwnTimeout:
    """A model with a time limit of its own that the call outlasts; it raises TimeoutError."""

    def __init__(self, limit: float, *, cut_to_request: bool = False) -> None:
        self.limit = limit
        self.cut_to_request = cut_to_request

    async def complete(self, request: ModelRequest) -> ModelReply:
        limit = self.limit
        if self.cut_to_request and request.timeout is not None:
            limit = min(limit, request.timeout)  # as the OpenAI-compatible adapter does
        try:
            with anyio.fail_after(limit):
                await anyio.sleep(5)
        except TimeoutError:
            raise TimeoutError(f"the model took longer than its {limit:.2f}s") from None
        raise AssertionError("not reached")


async def test_the_models_own_timeout_without_a_deadline_fails_the_run_clearly() -> None:
    """No wall-clock budget: the model's own TimeoutError is the reason, not a TypeError."""
    reason = await exhausted(AGENT, OwnTimeout(0.05))
    assert reason == (
        "the model did not answer within its own time limit (the model took longer than "
        "its 0.05s); the run has no wall-clock budget"
    )


async def test_the_models_own_timeout_inside_a_deadline_says_the_time_the_run_had() -> None:
    """A wall-clock budget with time to spare: the model's own limit is still the reason."""
    reason = await exhausted(LIMITED, OwnTimeout(0.05))
    assert re.fullmatch(
        r"the model did not answer within its own time limit \(the model took longer than "
        r"its 0\.05s\); the run had 59\.\d\ds left",
        reason,
    ), reason


@pytest.mark.parametrize("cut_to_request", [False, True])
async def test_a_deadline_shorter_than_the_models_limit_is_the_wall_clock_reason(
    cut_to_request: bool,
) -> None:
    """The run's deadline comes first: the call is cancelled, or the model, cut to the
    run's time, raises at the same moment; either way the reason is the wall clock's."""
    agent = Agent[None](name="a", budget=Budget(wall_clock=0.1))
    failed = await run(agent, OwnTimeout(5, cut_to_request=cut_to_request))
    assert re.fullmatch(
        r"wall-clock budget: the model did not answer within the 0\.\d\ds left", failed.reason
    ), failed.reason


async def test_the_openai_adapters_timeout_without_a_deadline_fails_the_run() -> None:
    """The case reported: the adapter's own timeout, no wall-clock budget, no TypeError.

    The adapter imports the openai SDK on its first call, which takes a second or more on
    a loaded machine and cannot be cancelled; the module imports it first, so that the
    run timed here is the model call and not the import.
    """

    async def never_answers(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(5)
        raise AssertionError("not reached")

    async with httpx.AsyncClient(transport=httpx.MockTransport(never_answers)) as client:
        model = OpenAICompatibleModel("https://example.test/v1", "m", timeout=0.1, client=client)
        reason = await exhausted(AGENT, model)
    assert reason == (
        "the model did not answer within its own time limit (the model at "
        "https://example.test/v1/chat/completions did not answer within 0.10s; the request "
        "was cancelled); the run has no wall-clock budget"
    )


class Ticket(BaseModel, frozen=True):
    summary: str


class InvalidThenLate:
    """A model whose first answer fails the guard's schema and whose second is too late."""

    def __init__(self) -> None:
        self.asked = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.asked += 1
        if self.asked == 1:
            return ModelReply(text='{"title": "no summary"}')
        return await OwnTimeout(0.05).complete(request)


async def test_a_timeout_while_the_guard_asks_again_goes_to_model_retrying() -> None:
    """The validation loop's retry meets the model's own time limit, which the policy
    retries: the run goes to ModelRetrying as a planning call does, and when the attempts
    run out it is left to resume, the timeout as the reason."""
    agent = Agent[None](name="a", answer_guard=OutputGuard(Ticket))
    model = InvalidThenLate()
    said = await exhausted(agent, model)
    assert said == (
        "the model did not answer within its own time limit (the model took longer than "
        "its 0.05s); the run has no wall-clock budget"
    )
    assert model.asked == 2


async def test_a_timeout_the_policy_does_not_retry_while_the_guard_asks_again_is_the_reason() -> (
    None
):
    """The same timeout, with a policy that does not retry timeouts: the run fails saying
    so, not "cut off at the limit", keeping the answer it had."""
    policy = RetryPolicy(max_attempts=3, retry_on=())
    agent = Agent[None](name="a", answer_guard=OutputGuard(Ticket), model_retry=policy)
    failed = await run(agent, InvalidThenLate())
    assert failed.reason == (
        "the model did not answer within its own time limit (the model took longer than "
        "its 0.05s); the run has no wall-clock budget (asked again for its answer)"
    )
    assert failed.partial == '{"title": "no summary"}'
