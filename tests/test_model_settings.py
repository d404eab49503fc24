"""statemachine._model.ModelSettings: how a model is told to answer, and how settings merge."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic import ValidationError

from statemachine import Agent, Message, ModelReply, ModelRequest, ModelSettings, Runner
from statemachine.testing import AutoDenyGate, FunctionModel

pytestmark = pytest.mark.anyio


def test_every_setting_defaults_to_the_backends_own() -> None:
    """An empty ModelSettings sets nothing, and a request carries one by default."""
    settings = ModelSettings()
    assert settings.model_dump() == {
        "temperature": None,
        "max_tokens": None,
        "seed": None,
        "tool_choice": None,
        "parallel_tool_calls": None,
        "stop": None,
        "extra": {},
    }
    assert ModelRequest(messages=()).settings == settings


def test_a_calls_settings_replace_the_agents_one_by_one() -> None:
    """merged keeps what the override leaves unset, and merges extra key by key."""
    agent = ModelSettings(temperature=0.2, max_tokens=512, extra={"top_p": Decimal("0.9")})
    call = ModelSettings(temperature=0.0, tool_choice="required", extra={"top_k": 40})
    assert agent.merged(call) == ModelSettings(
        temperature=0.0,
        max_tokens=512,
        tool_choice="required",
        extra={"top_p": Decimal("0.9"), "top_k": 40},
    )
    assert agent.merged(ModelSettings()) is agent


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"temperature": -0.1}, "greater than or equal to 0"),
        ({"temperature": float("nan")}, "finite number"),
        ({"max_tokens": 0}, "greater than or equal to 1"),
        ({"tool_choice": ""}, "at least 1 character"),
        ({"stop": ("END", "")}, "a stop sequence must not be empty"),
        ({"extra": {"when": object()}}, "extra must hold JSON values"),
        ({"temprature": 0.5}, "Extra inputs are not permitted"),
    ],
)
def test_settings_that_cannot_be_sent_fail_at_construction(
    given: dict[str, object], problem: str
) -> None:
    """A negative temperature, an empty stop sequence, a value that is not JSON, a typo."""
    with pytest.raises(ValidationError, match=problem):
        ModelSettings.model_validate(given)


async def test_a_run_asks_its_model_with_a_request_that_has_settings() -> None:
    """The planning phase's request (built without validation) holds the default settings."""
    seen: list[ModelRequest] = []

    def reply(request: ModelRequest) -> ModelReply:
        seen.append(request)
        return ModelReply(text="Hello.")

    agent = Agent[None](name="greeter")
    result = await Runner(agent, model=FunctionModel(reply), gate=AutoDenyGate()).run(None, "hi")
    assert result.ok
    assert seen[0].settings == ModelSettings()
    assert seen[0] == ModelRequest(
        messages=seen[0].messages, timeout=seen[0].timeout, settings=ModelSettings()
    )
    assert seen[0].messages[-1] == Message(role="user", content="hi")
