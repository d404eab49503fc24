"""The llama.cpp adapter: its schemas and grammars, and the travel agent on a real local model.

Tests marked ``local`` run SmolLM2-135M-Instruct through llama-cpp-python (``make
test-local``; ``.ci/run`` installs the ``local`` extra first). They never skip: without
the extra, building the model raises ``SetupError`` and they fail. They do not judge the
model's choices, only that whatever it chooses is valid (constrained) or handled
(unconstrained), and that a write call always waits for approval.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import anyio
import attrs
import pytest
from pydantic import BaseModel, ConfigDict, Field

from agents.travel import FakeProvider, TripContext, travel_agent
from statemachine import (
    Agent,
    AwaitApproval,
    Budget,
    ConfigError,
    Failed,
    InvalidCall,
    LlamaCppModel,
    Message,
    ModelReply,
    ModelRequest,
    OutputGuard,
    Parsed,
    Planning,
    ReadCall,
    Responding,
    Runner,
    Runtime,
    SetupError,
    ToolCalling,
    ToolRequest,
    Usage,
    WriteCall,
    read_tool,
    validate_with_retries,
)
from statemachine.models._llamacpp import (
    chat_messages,
    grammar_from_schema,
    reply_schema,
    to_reply,
)
from statemachine.testing import AutoDenyGate

TRIP = TripContext(traveller="Ada Lovelace", destination="Lisbon")
PROMPTS = (
    "What's the weather in Lisbon?",
    "Book me flight TP1351 for Ada Lovelace at $800.",
    "Book a hotel for Ada Lovelace: Casa Azul, 3 nights, $600.",
)
# Small enough that a run of a few steps stays fast on one thread; every call's strings
# fit well inside max_tokens, so a constrained reply always closes its JSON.
SETTINGS: dict[str, Any] = {
    "max_tokens": 160,
    "max_string_length": 32,
    "max_answer_length": 120,
    "n_ctx": 2048,
}
STEPS = 4  # model calls per run, the last of which must answer


def travel_request(text: str = "hi") -> ModelRequest:
    agent = travel_agent(FakeProvider())
    return ModelRequest(messages=(Message(role="user", content=text),), tools=agent.tools.schemas())


# --- schemas, replies and messages (no model needed) ------------------------------------


def test_reply_schema_is_one_call_per_tool_or_an_answer() -> None:
    """Each tool is its own alternative, so a call's arguments are bound to the tool named."""
    schema = reply_schema(travel_request(), max_string_length=32, max_answer_length=120)
    choices = schema["oneOf"]
    names = [choice["properties"].get("name", {}).get("const") for choice in choices]
    assert names == ["get_weather", "book_flight", "book_hotel", None]
    flight = choices[1]["properties"]["arguments"]
    assert flight["required"] == ["traveller", "price", "flight"]
    assert flight["properties"]["flight"] == {
        "minLength": 1,
        "title": "Flight",
        "type": "string",
        "maxLength": 32,
    }
    assert choices[1]["required"] == ["name", "arguments"]
    assert choices[3] == {
        "type": "object",
        "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 120}},
        "required": ["text"],
    }
    # nights >= 1 becomes a named rule that has no minus sign and no zero.
    nights = choices[2]["properties"]["arguments"]["properties"]["nights"]
    assert nights == {"$ref": "#/$defs/statemachine-positive-integer"}
    assert schema["$defs"] == {"statemachine-positive-integer": {"anyOf": [{"type": "integer"}]}}


class Leg(BaseModel):
    model_config = ConfigDict(frozen=True)

    city: str


class Route(BaseModel):
    model_config = ConfigDict(frozen=True)

    legs: list[Leg]
    code: str = "X"


class WeatherNote(BaseModel):
    """A structured answer, for a guard in constrained mode."""

    model_config = ConfigDict(frozen=True)

    city: str = Field(min_length=1)
    high_c: int
    sunny: bool


def test_reply_schema_moves_each_tools_defs_to_the_root_under_its_name() -> None:
    """A tool's nested models keep working: $defs are hoisted and their references renamed."""

    @read_tool
    async def plan_route(args: Route) -> dict[str, object]:
        """Plan a route."""
        return {}

    agent = Agent(name="routes", tools=[plan_route])
    request = ModelRequest(messages=(), tools=agent.tools.schemas())
    schema = reply_schema(request, max_string_length=10)
    arguments = schema["oneOf"][0]["properties"]["arguments"]
    assert "$defs" not in arguments
    assert arguments["properties"]["legs"]["items"] == {"$ref": "#/$defs/plan_route--Leg"}
    leg = schema["$defs"]["plan_route--Leg"]
    assert leg["properties"]["city"]["maxLength"] == 10
    # A default or an enum is data, never rewritten as if it were a schema.
    assert arguments["properties"]["code"]["default"] == "X"


def test_reply_schema_with_an_output_schema_is_that_schema_bounded() -> None:
    """A guard in constrained mode sets output_schema; the grammar is made from it."""
    request = ModelRequest(messages=(), output_schema=Route.model_json_schema())
    schema = reply_schema(request, max_string_length=12)
    assert "oneOf" not in schema
    assert schema["properties"]["code"]["maxLength"] == 12
    assert schema["$defs"]["Leg"]["properties"]["city"]["maxLength"] == 12
    assert schema["properties"]["legs"]["items"] == {"$ref": "#/$defs/Leg"}


def test_grammar_post_processing_tightens_strings_and_signs() -> None:
    """llama.cpp's char rule admits raw control characters; it is replaced, as are placeholders."""

    def convert(_: str) -> str:
        return "\n".join(
            [
                'root ::= "{" space statemachine-natural "}"',
                r'char ::= [^"\\] | "\\" (["\\/bfnrt])',
                "statemachine-natural ::= integer",
                'integer ::= ("-"? integral-part) space',
                'space ::= " "?',
            ]
        )

    grammar = grammar_from_schema({}, convert)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["char"] == r'[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
    assert rules["statemachine-natural"] == "integral-part space"
    assert rules["integral-part"] == "[0-9] | [1-9] [0-9]{0,15}"


def test_a_call_becomes_a_tool_request_with_its_arguments_as_exact_json_text() -> None:
    """Arguments pass on as JSON text, numbers unchanged; the router validates them later."""
    usage = Usage(input_tokens=5, output_tokens=7)
    text = '{"name": "book_flight", "arguments": {"flight": "TP1351", "price": 800.00}}'
    reply = to_reply(text, finish="stop", usage=usage, structured=False)
    assert reply.tool_calls == (
        ToolRequest(name="book_flight", arguments='{"flight":"TP1351","price":800.00}'),
    )
    assert reply.finish_reason == "tool_calls"
    assert reply.usage == usage
    assert reply.usage.cost == Decimal(0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"text": "Sunny, 24 C."}', ModelReply(text="Sunny, 24 C.")),
        ("It is sunny.", ModelReply(text="It is sunny.")),
        ('Sure! {"text": "ok"} bye', ModelReply(text="ok")),
        ('{"text": "a", "mood": 1}', ModelReply(text='{"text": "a", "mood": 1}')),
        (
            '{"name": 7, "arguments": "{oops"}',
            ModelReply(
                tool_calls=(ToolRequest(name="7", arguments="{oops"),), finish_reason="tool_calls"
            ),
        ),
    ],
)
def test_whatever_the_model_writes_becomes_a_reply(text: str, expected: ModelReply) -> None:
    """Unconstrained output is mapped, never judged: the library validates what comes back."""
    assert to_reply(text, finish="stop", usage=Usage(), structured=False) == expected


def test_a_reply_cut_at_max_tokens_stays_truncated() -> None:
    """A reply that hit the token limit reaches the guard as a truncation, not as a call."""
    reply = to_reply(
        '{"name": "get_weather", "argu', finish="length", usage=Usage(), structured=False
    )
    assert reply == ModelReply(text='{"name": "get_weather", "argu', finish_reason="length")


def test_the_conversation_is_shown_in_the_reply_shape() -> None:
    """Past calls appear as the JSON the model is asked for; tool results as user turns."""
    request = ModelRequest(
        messages=(
            Message(role="system", content="You are a travel agent."),
            Message(role="user", content="Weather?"),
            Message(
                role="assistant",
                tool_calls=(ToolRequest(name="get_weather", arguments='{"city":"Lisbon"}'),),
            ),
            Message(role="tool", name="get_weather", content='{"forecast":"sunny"}'),
            Message(role="assistant", content="Sunny."),
        ),
        tools=travel_agent(FakeProvider()).tools.schemas(),
    )
    messages = chat_messages(request)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[0]["content"].startswith("You are a travel agent.\n\nReply with exactly one")
    assert (
        '- book_hotel: Book (and pay for) a hotel. Arguments: {"traveller": string'
        in (messages[0]["content"])
    )
    assert messages[2]["content"] == '{"name": "get_weather", "arguments": {"city":"Lisbon"}}'
    assert messages[3]["content"] == 'Result of get_weather: {"forecast":"sunny"}'
    assert messages[4]["content"] == '{"text": "Sunny."}'


def test_without_the_extra_building_a_model_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No llama-cpp-python: a SetupError that names the extra, not an ImportError deep inside."""
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(
        SetupError, match=r"install the local extra: pip install 'statemachine-agents\[local\]'"
    ):
        LlamaCppModel()


def test_a_typo_in_the_configuration_is_refused_before_loading() -> None:
    """Configuration chooses constrain vs validate; an unknown key names the one meant."""
    with pytest.raises(ConfigError, match="constrained"):
        LlamaCppModel.from_config({"constrainted": False})


# --- the real model ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def constrained() -> Iterator[LlamaCppModel]:
    model = LlamaCppModel(constrained=True, **SETTINGS)
    yield model
    model.close()


@pytest.fixture(scope="module")
def unconstrained() -> Iterator[LlamaCppModel]:
    model = LlamaCppModel.from_config({"constrained": False, **SETTINGS})
    yield model
    model.close()


class Recording:
    """Passes every request to ``model`` and keeps each request with its reply."""

    def __init__(self, model: LlamaCppModel) -> None:
        self.model = model
        self.constrained = model.constrained
        self.replies: list[tuple[ModelRequest, ModelReply]] = []

    async def complete(self, request: ModelRequest) -> ModelReply:
        reply = await self.model.complete(request)
        self.replies.append((request, reply))
        return reply


def assert_valid(agent: Agent[TripContext], request: ModelRequest, reply: ModelReply) -> None:
    """A constrained reply is a valid call of one of the agent's tools, or a non-empty answer."""
    if reply.tool_calls:
        assert request.tools, reply  # no tool is offered when the model must answer
        assert len(reply.tool_calls) == 1
        call = reply.tool_calls[0]
        assert call.name in agent.tools.names
        routed = agent.tools.route(call.name, call.arguments)
        assert isinstance(routed, ReadCall | WriteCall), (call, routed)
    else:
        assert reply.finish_reason == "stop", reply
        assert reply.text.strip(), reply


def one_planning_step(agent: Agent[TripContext], model: Recording, prompt: str) -> Any:
    async def step() -> Any:
        rt = Runtime(run_id="local", model=model, gate=AutoDenyGate())
        planning = await agent.start(TRIP, prompt).advance(rt)
        return await planning.advance(rt)

    return anyio.run(step)


def short_agent(provider: FakeProvider) -> Agent[TripContext]:
    return attrs.evolve(travel_agent(provider, budget=Budget(wall_clock=90)), max_steps=STEPS)


@pytest.mark.local
def test_a_constrained_model_passes_the_guards_backend_check(
    constrained: LlamaCppModel, unconstrained: LlamaCppModel
) -> None:
    """constrained=True is what a guard in constrained mode asks of a backend; False is refused."""
    guard = OutputGuard(Route, mode="constrained")
    guard.check_backend(constrained)
    with pytest.raises(SetupError, match="LlamaCppModel does not declare constrained = True"):
        guard.check_backend(unconstrained)


@pytest.mark.local
def test_a_constrained_guard_gets_its_output_schema_on_the_first_attempt(
    constrained: LlamaCppModel,
) -> None:
    """output_schema is compiled to a grammar: the first reply parses into the schema."""
    guard = OutputGuard(WeatherNote, mode="constrained")
    request = ModelRequest(
        messages=(
            Message(role="system", content="You write weather notes."),
            Message(role="user", content="Lisbon tomorrow: sunny, 24 C."),
        )
    )
    result = anyio.run(validate_with_retries, guard, guard.ask_model(constrained, request))
    assert result.status == "ok"
    assert result.attempts == 1
    outcome = result.outcome
    assert isinstance(outcome, Parsed)
    assert isinstance(outcome.value, WeatherNote)


@pytest.mark.local
def test_the_real_converter_builds_the_tool_call_grammar(constrained: LlamaCppModel) -> None:
    """llama-cpp-python's JSON-schema converter, tightened: the grammar the decoder enforces."""
    grammar = constrained.grammar_text(travel_request())
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert rules["root"] == "alternative-0 | alternative-1 | alternative-2 | alternative-3"
    assert rules["alternative-0-name"] == r'"\"get_weather\""'
    assert rules["char"].startswith(r'[^"\\\x7F\x00-\x1F]')
    assert rules["statemachine-positive-integer"] == "[1-9] [0-9]{0,15} space"
    # maxLength 32 with minLength 1: one char, then up to 31 optional ones.
    assert rules["alternative-1-arguments-flight"].count("char") == 32


@pytest.mark.local
@pytest.mark.parametrize("prompt", PROMPTS)
def test_constrained_planning_replies_always_validate(
    constrained: LlamaCppModel, prompt: str
) -> None:
    """At temperature 0 the grammar admits only a valid call of a real tool or an answer."""
    provider = FakeProvider()
    agent = short_agent(provider)
    model = Recording(constrained)
    after = one_planning_step(agent, model, prompt)
    assert len(model.replies) >= 1
    for request, reply in model.replies:
        assert_valid(agent, request, reply)
    first = model.replies[0][1]
    if first.tool_calls:
        routed = agent.tools.route(first.tool_calls[0].name, first.tool_calls[0].arguments)
        expected = ToolCalling if isinstance(routed, ReadCall) else AwaitApproval
        assert isinstance(after, expected), after
    else:
        assert isinstance(after, Responding), after
    assert provider.charges == []


@pytest.mark.local
@pytest.mark.parametrize("prompt", PROMPTS)
def test_constrained_run_never_books_without_approval(
    constrained: LlamaCppModel, prompt: str
) -> None:
    """Whatever the model chooses, a write call waits in AwaitApproval; denied, none is charged."""
    provider = FakeProvider()
    agent = short_agent(provider)
    model = Recording(constrained)
    gate = AutoDenyGate()
    result = anyio.run(
        Runner(agent, model=model, gate=gate, seed=7, keep_states=True).run, TRIP, prompt
    )
    for request, reply in model.replies:
        assert_valid(agent, request, reply)
    assert_no_unapproved_write(agent, model, gate, result.states)
    assert provider.charges == []


def assert_no_unapproved_write(
    agent: Agent[TripContext], model: Recording, gate: AutoDenyGate, states: tuple[Any, ...]
) -> None:
    kinds = [state.kind for state in states]
    waited = [state for state in states if isinstance(state, AwaitApproval)]
    assert len(waited) == len(gate.requests)
    for index, state in enumerate(states):
        if isinstance(state, AwaitApproval):
            assert kinds[index + 1] == "Planning"  # denied: back to planning, not run
        if isinstance(state, ToolCalling):
            assert isinstance(state.call, ReadCall), state.call
    chose_write = any(
        isinstance(agent.tools.route(call.name, call.arguments), WriteCall)
        for _, reply in model.replies
        for call in reply.tool_calls
    )
    assert not chose_write or waited, kinds


@pytest.mark.local
@pytest.mark.parametrize("prompt", PROMPTS)
def test_unconstrained_replies_are_handled_by_the_library(
    unconstrained: LlamaCppModel, prompt: str
) -> None:
    """Without a grammar anything may come back; the router and guard turn it into a phase."""
    provider = FakeProvider()
    agent = short_agent(provider)
    model = Recording(unconstrained)
    after = one_planning_step(agent, model, prompt)
    first = model.replies[0][1]
    if first.tool_calls:
        routed = agent.tools.route(first.tool_calls[0].name, first.tool_calls[0].arguments)
        match routed:
            case ReadCall():
                assert isinstance(after, ToolCalling)
            case WriteCall():
                assert isinstance(after, AwaitApproval)
            case InvalidCall():
                # fed back to the model, which plans again
                assert isinstance(after, Planning)
                assert after.transcript[-1].content == routed.feedback
    else:
        # an answer: shipped if it passes the guard, else the run fails saying why
        assert isinstance(after, Responding | Failed), after
        if isinstance(after, Failed):
            assert after.reason.startswith(("answer not accepted", "the answer was cut off"))
    assert provider.charges == []


@pytest.mark.local
def test_unconstrained_run_never_books_without_approval(unconstrained: LlamaCppModel) -> None:
    """Invalid calls are fed back, answers guarded, and a write call still waits for a person."""
    provider = FakeProvider()
    agent = short_agent(provider)
    model = Recording(unconstrained)
    gate = AutoDenyGate()
    result = anyio.run(
        Runner(agent, model=model, gate=gate, seed=7, keep_states=True).run, TRIP, PROMPTS[1]
    )
    assert result.status in ("done", "failed")
    assert_no_unapproved_write(agent, model, gate, result.states)
    assert provider.charges == []


@pytest.mark.local
def test_a_call_with_no_time_left_does_not_start(constrained: LlamaCppModel) -> None:
    """The deadline is honoured: no time, no call; too little, generation stops and says so."""
    request = travel_request("What's the weather in Lisbon?")

    async def ask(seconds: float) -> ModelReply:
        return await constrained.complete(request.model_copy(update={"timeout": seconds}))

    with pytest.raises(TimeoutError, match="it was not started"):
        anyio.run(ask, 0.0)
    with pytest.raises(TimeoutError):
        anyio.run(ask, 0.001)
    # The model is free again afterwards.
    assert anyio.run(ask, 60.0).usage.input_tokens > 0


@pytest.mark.local
def test_a_missing_model_file_is_a_setup_error() -> None:
    """A wrong path fails at start-up with the fix, not at the first call."""
    with pytest.raises(SetupError, match=r"no GGUF file at /nonexistent\.gguf"):
        LlamaCppModel("/nonexistent.gguf")
