"""What a run makes of a model that answers the wrong thing, at the model boundary."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from statemachine import (
    Agent,
    Failed,
    ModelReply,
    ModelRequest,
    ModelResponseError,
    Runner,
)
from statemachine._model import _checked_reply
from statemachine.testing import AutoDenyGate, FunctionModel

pytestmark = pytest.mark.anyio

AGENT = Agent[None](name="a")
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
