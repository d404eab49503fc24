"""A model in this process that answers the wrong thing: the error names the model and says
what ``complete()`` must return, and a sync FunctionModel's wrong answer fails the run."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from statemachine import (
    Agent,
    Failed,
    ModelReply,
    ModelRequest,
    ModelResponseError,
    Runner,
    StatemachineError,
)
from statemachine.testing import AutoDenyGate, FunctionModel, reply

pytestmark = pytest.mark.anyio

AGENT = Agent[None](name="a")
MUST_RETURN = (
    "where a ModelReply was expected: its complete() must return a statemachine.ModelReply "
    "(text or tool calls, and usage), e.g. ModelReply(text=...)"
)


async def run(model: Any) -> Failed[None]:
    with anyio.fail_after(5):
        result = await Runner(AGENT, model=model, gate=AutoDenyGate()).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    return result.final


async def test_a_sync_function_model_returning_none_fails_the_run_naming_the_model() -> None:
    """No TypeError escapes: the runner's boundary check turns None into a failed run."""

    def forgets_to_return(request: ModelRequest) -> Any:
        return None

    model = FunctionModel(forgets_to_return)
    failed = await run(model)
    assert failed.reason == (
        "the model's reply could not be used: the model statemachine.testing.FunctionModel "
        f"answered None {MUST_RETURN}"
    )
    assert len(model.requests) == 1


async def test_a_sync_function_model_returning_text_fails_the_run_showing_it() -> None:
    """A string where a reply belongs is named with its start."""
    failed = await run(FunctionModel(lambda request: "Paris is sunny."))
    assert failed.reason == (
        "the model's reply could not be used: the model statemachine.testing.FunctionModel "
        f"answered a str ('Paris is sunny.') {MUST_RETURN}"
    )


async def test_a_function_model_passes_replies_from_sync_and_async_functions() -> None:
    """A ModelReply, returned or awaited, is the model's answer."""

    async def later(request: ModelRequest) -> ModelReply:
        return reply("later")

    request = ModelRequest(messages=())
    assert (await FunctionModel(lambda request: reply("now")).complete(request)).text == "now"
    assert (await FunctionModel(later).complete(request)).text == "later"


def test_the_in_process_error_keeps_the_error_s_parts() -> None:
    """ModelResponseError.in_process: .url is the model, .detail and .excerpt what came."""
    error = ModelResponseError.in_process("shop.Model", came="a dict", excerpt="{'text': 'hi'}")
    assert type(error) is ModelResponseError
    assert isinstance(error, StatemachineError)
    assert isinstance(error, ValueError)
    assert error.url == "shop.Model"
    assert error.detail == "complete() returned a dict, not a ModelReply"
    assert error.excerpt == "{'text': 'hi'}"
    assert str(error) == f"the model shop.Model answered a dict ({{'text': 'hi'}}) {MUST_RETURN}"
    assert str(ModelResponseError.in_process("shop.Model", came="None")) == (
        f"the model shop.Model answered None {MUST_RETURN}"
    )


def test_an_http_adapter_s_message_is_unchanged() -> None:
    """Without in_process the message still points at the server and its base_url."""
    error = ModelResponseError("'choices' is empty", url="http://h/v1/chat/completions")
    assert str(error) == (
        "the server at http://h/v1/chat/completions did not answer with a chat completion: "
        "'choices' is empty. Check that base_url points at an OpenAI-compatible API (POST "
        "<base_url>/chat/completions) and that the server supports what was asked."
    )
