"""statemachine._model.ModelSettings: how a model is told to answer, and how settings merge."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import CityArgs

from statemachine import (
    Agent,
    Message,
    ModelReply,
    ModelRequest,
    ModelSettings,
    Runner,
    SetupError,
    ToolRegistry,
    read_tool,
)
from statemachine.models._llamacpp import chat_messages, chosen_tools, reply_schema
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


settings_strategy = st.builds(
    ModelSettings,
    temperature=st.none() | st.floats(min_value=0, max_value=2),
    max_tokens=st.none() | st.integers(min_value=1, max_value=10**6),
    seed=st.none() | st.integers(),
    tool_choice=st.none() | st.sampled_from(["auto", "required", "none", "lookup"]),
    parallel_tool_calls=st.none() | st.booleans(),
    stop=st.none() | st.lists(st.text(min_size=1), max_size=3).map(tuple),
    extra=st.dictionaries(st.sampled_from(["top_k", "min_p", "user"]), st.integers()),
)


@given(settings_strategy, settings_strategy, settings_strategy)
def test_merging_is_field_by_field_and_associative(
    base: ModelSettings, middle: ModelSettings, top: ModelSettings
) -> None:
    """Each field is the override's when it sets one, else the base's; extra merges by key;
    merging agent, model and call settings in either grouping gives the same settings."""
    merged = base.merged(top)
    for name in ModelSettings.model_fields:
        if name != "extra":
            mine, theirs = getattr(base, name), getattr(top, name)
            assert getattr(merged, name) == (mine if theirs is None else theirs), name
    assert merged.extra == {**base.extra, **top.extra}
    assert base.merged(middle).merged(top) == base.merged(middle.merged(top))
    assert base.merged(ModelSettings()) == base == ModelSettings().merged(base)


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


# --- the llama.cpp adapter's share (no model needed) -----------------------------------


@read_tool
async def lookup(args: CityArgs) -> dict[str, str]:
    """Today's weather in a city."""
    return {"city": args.city, "sky": "sunny"}


@read_tool
async def forecast(args: CityArgs) -> dict[str, str]:
    """Tomorrow's weather in a city."""
    return {"city": args.city, "sky": "rain"}


def asking(**settings: Any) -> ModelRequest:
    return ModelRequest(
        messages=(Message(role="user", content="Weather in Paris?"),),
        tools=ToolRegistry([lookup, forecast]).schemas(),
        settings=ModelSettings(**settings),
    )


def shapes(request: ModelRequest, answer: bool) -> list[str | None]:
    """The tool each alternative of the reply schema calls (None: the answer)."""
    schema = reply_schema(request, answer=answer)
    return [choice["properties"].get("name", {}).get("const") for choice in schema["oneOf"]]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, ["lookup", "forecast", None]),
        ("auto", ["lookup", "forecast", None]),
        ("none", [None]),
        ("required", ["lookup", "forecast"]),
        ("forecast", ["forecast"]),
    ],
)
def test_tool_choice_narrows_the_local_models_reply_shape(
    choice: str | None, expected: list[str | None]
) -> None:
    """The grammar's alternatives follow tool_choice, and so do the model's instructions."""
    request, answer = chosen_tools(asking(tool_choice=choice))
    assert shapes(request, answer) == expected
    told = chat_messages(request, answer=answer)[0]["content"]
    assert ("You must call a tool." in told) == (choice in ("required", "forecast"))


def test_the_local_model_refuses_what_it_cannot_honour() -> None:
    """A tool it was not offered, and extra (there is no request body)."""
    with pytest.raises(SetupError, match="tool_choice names the tool 'book'"):
        chosen_tools(asking(tool_choice="book"))
    with pytest.raises(SetupError) as raised:
        chosen_tools(asking(extra={"top_k": 40}))
    assert str(raised.value) == (
        "LlamaCppModel runs in this process and has no request body for the settings' "
        "extra ['top_k']; leave extra out of its settings"
    )


async def test_an_agents_model_settings_go_with_every_request_of_its_runs() -> None:
    """Agent(model_settings=...) is in each ModelRequest the run makes (issue 20)."""
    settings = ModelSettings(temperature=0, max_tokens=64, seed=7, stop=("END",))
    seen: list[ModelSettings] = []

    def answer(request: ModelRequest) -> ModelReply:
        seen.append(request.settings)
        return ModelReply(text="Hello.")

    agent = Agent[None](name="set", model_settings=settings)
    result = await Runner(agent, model=FunctionModel(answer), gate=AutoDenyGate()).run(None, "Hi")
    assert result.ok
    assert seen == [settings]
    plain = Agent[None](name="plain")
    seen.clear()
    await Runner(plain, model=FunctionModel(answer), gate=AutoDenyGate()).run(None, "Hi")
    assert seen == [ModelSettings()]
