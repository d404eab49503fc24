"""statemachine.models._anthropic: the Messages API adapter against a real HTTP server on loopback.

Each test starts an ``http.server`` in a thread on 127.0.0.1 (a free port) that answers
``POST /v1/messages`` with replies the test chooses, written in the shapes the Messages
API documents, and records every request; ``base_url`` points the official SDK at it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import attrs
import pytest
from pydantic import BaseModel, ConfigDict
from support import CityArgs, FlightArgs, exactly

from statemachine import (
    Agent,
    AnthropicModel,
    Message,
    ModelReply,
    ModelRequest,
    ModelRequestError,
    ModelResponseError,
    ModelSettings,
    ModelUnavailableError,
    Money,
    OutputGuard,
    Refusal,
    Runner,
    SetupError,
    TokenPrices,
    ToolRegistry,
    ToolRequest,
    Truncated,
    Usage,
    dumps,
    loads,
    read_tool,
    validate_with_retries,
    write_tool,
)
from statemachine.testing import AutoDenyGate

pytestmark = pytest.mark.anyio


# --- the server ------------------------------------------------------------------------


@attrs.frozen
class Recorded:
    """One reply the server sends: status, JSON document (or raw bytes), delay, headers."""

    body: Any
    status: int = 200
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    def payload(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else dumps(self.body).encode()


@attrs.frozen
class Received:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return loads(self.body)


@attrs.define
class MessagesServer:
    """Answers each request with the next recorded reply and records what it was sent."""

    replies: list[Recorded]
    requests: list[Received] = attrs.field(factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, request: Received) -> Recorded:
        self.requests.append(request)
        if request.path != "/v1/messages":
            return Recorded(api_error("not_found_error", "Not found"), status=404)
        if len(self.requests) > len(self.replies):
            return Recorded(api_error("api_error", "no reply recorded"), status=500)
        return self.replies[len(self.requests) - 1]


def handler_for(server: MessagesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            headers = {key.lower(): value for key, value in self.headers.items()}
            recorded = server.answer(Received(self.path, headers, self.rfile.read(length)))
            time.sleep(recorded.delay)
            payload = recorded.payload()
            try:
                self.send_response(recorded.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in recorded.headers:
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up first
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def messages_server(*replies: Recorded) -> Iterator[MessagesServer]:
    """A Messages API server on 127.0.0.1 for the block, shut down when it ends."""
    server = MessagesServer(list(replies))
    http = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(server))
    http.daemon_threads = True
    server.port = http.server_address[1]
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        http.shutdown()
        http.server_close()
        thread.join()


@pytest.fixture(autouse=True)
def _no_proxy_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback stays loopback, and no key or address from the environment leaks in."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("all_proxy", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)


# --- recorded replies, in the shapes the Messages API documents -------------------------


def message(
    *content: dict[str, Any],
    stop_reason: str | None = "end_turn",
    input_tokens: int = 21,
    output_tokens: int = 9,
    **usage: int,
) -> Recorded:
    """A message as ``POST /v1/messages`` returns it."""
    return Recorded(
        {
            "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": list(content),
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage},
        }
    )


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(name: str, tool_input: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}


def api_error(kind: str, said: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": said}}


def failure(status: int, kind: str, said: str, **headers: str) -> Recorded:
    return Recorded(api_error(kind, said), status=status, headers=tuple(headers.items()))


USER = (Message(role="user", content="What is the weather in Paris?"),)


def adapter(server: MessagesServer, **options: Any) -> AnthropicModel:
    return AnthropicModel(
        "claude-sonnet-4-5",
        base_url=server.url,
        api_key=options.pop("api_key", "sk-ant-test"),
        **options,
    )


@read_tool
async def lookup(args: CityArgs) -> dict[str, str]:
    """Today's weather in a city."""
    return {"city": args.city, "sky": "sunny"}


@write_tool(cost=lambda args: args.price)
async def book(args: FlightArgs) -> str:
    """Book a flight."""
    return f"booked {args.flight}"


class Ticket(BaseModel):
    """A support ticket the model writes."""

    model_config = ConfigDict(frozen=True)

    subject: str
    amount: Money


# --- replies ---------------------------------------------------------------------------


async def test_a_text_reply_maps_usage_to_an_exact_decimal_cost() -> None:
    """Text blocks, end_turn and tokens come through; cache tokens are priced as input."""
    prices = TokenPrices(input=Decimal("3"), output=Decimal("15"), per=1_000_000)
    reply = message(
        text_block("Sunny, "),
        text_block("21 °C."),
        input_tokens=1000,
        output_tokens=500,
        cache_read_input_tokens=200,
        cache_creation_input_tokens=34,
    )
    with messages_server(reply) as server:
        got = await adapter(server, prices=prices).complete(ModelRequest(messages=USER))
    assert got == ModelReply(
        text="Sunny, 21 °C.",
        finish_reason="stop",
        usage=Usage(input_tokens=1234, output_tokens=500, cost=Decimal("0.011202")),
    )
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    # SDK 2.x sends the key as a bearer token; earlier ones as x-api-key.
    key = sent.headers.get("authorization") or sent.headers.get("x-api-key", "")
    assert key.removeprefix("Bearer ") == "sk-ant-test"
    assert sent.headers["x-stainless-retry-count"] == "0"


async def test_every_tool_use_block_becomes_a_tool_request_with_its_id() -> None:
    """Two tool_use blocks: two calls, in order, inputs written back exactly."""
    reply = message(
        text_block("Let me check both."),
        tool_use("lookup", {"city": "Paris"}, "toolu_01A09q90qw90lq917835lq9"),
        tool_use("book", {"flight": "AF1", "price": Decimal("137.30")}, "toolu_01B7xK"),
        stop_reason="tool_use",
    )
    with messages_server(reply) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got.tool_calls == (
        ToolRequest(
            name="lookup", arguments='{"city":"Paris"}', id="toolu_01A09q90qw90lq917835lq9"
        ),
        ToolRequest(name="book", arguments='{"flight":"AF1","price":137.30}', id="toolu_01B7xK"),
    )
    assert (got.text, got.finish_reason) == ("Let me check both.", "tool_calls")


async def test_max_tokens_is_the_guards_truncation() -> None:
    """stop_reason max_tokens is finish reason 'length', which the guard reports as Truncated."""
    cut = '{"subject": "Refund for ord'
    with messages_server(message(text_block(cut), stop_reason="max_tokens")) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert (got.text, got.finish_reason) == (cut, "length")
    assert OutputGuard(Ticket).check(got) == Truncated(text=cut)


async def test_a_refusal_is_the_guards_refusal() -> None:
    """stop_reason refusal is finish reason 'refusal', with whatever text came."""
    said = "I can't help with that."
    with messages_server(message(text_block(said), stop_reason="refusal")) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got.finish_reason == "refusal"
    assert OutputGuard(Ticket).check(got) == Refusal(text=said, finish_reason="refusal")


# --- the request -----------------------------------------------------------------------


async def test_the_request_maps_system_turns_tool_calls_and_results() -> None:
    """System text on top; a turn's tool calls as tool_use, their results in one user turn."""
    conversation = (
        Message(role="system", content="Be brief."),
        Message(role="user", content="Weather in Paris and book AF1."),
        Message(
            role="assistant",
            content="On it.",
            tool_calls=(
                ToolRequest(name="lookup", arguments='{"city":"Paris"}', id="toolu_1"),
                ToolRequest(name="book", arguments='{"flight":"AF1","price":137.30}', id="toolu_2"),
            ),
        ),
        Message(role="tool", content='{"sky":"sunny"}', tool_call_id="toolu_1", name="lookup"),
        Message(role="tool", content="booked AF1", tool_call_id="toolu_2", name="book"),
        Message(role="system", content="Answer now."),
    )
    request = ModelRequest(messages=conversation, tools=ToolRegistry([lookup, book]).schemas())
    with messages_server(message(text_block("Done."))) as server:
        await adapter(server, max_tokens=1024).complete(request)
    body = server.requests[0].json()
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 1024
    assert body["system"] == "Be brief.\n\nAnswer now."
    assert body["messages"] == [
        {"role": "user", "content": [text_block("Weather in Paris and book AF1.")]},
        {
            "role": "assistant",
            "content": [
                text_block("On it."),
                tool_use("lookup", {"city": "Paris"}, "toolu_1"),
                tool_use("book", {"flight": "AF1", "price": Decimal("137.3")}, "toolu_2"),
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"sky":"sunny"}'},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "booked AF1"},
            ],
        },
    ]
    booking = body["tools"][1]
    assert (booking["name"], booking["description"]) == ("book", "Book a flight.")
    assert booking["input_schema"]["required"] == ["flight", "price"]
    assert "tool_choice" not in body


async def test_settings_map_to_the_messages_api() -> None:
    """max_tokens, stop sequences, tool_choice (required is 'any'), parallel calls off, and
    extra as the SDK's extra_body; the request's settings win."""
    own = ModelSettings(max_tokens=300, stop=("STOP",), extra={"metadata": {"user_id": "c-42"}})
    call = ModelSettings(stop=("END",), tool_choice="required", parallel_tool_calls=False)
    request = ModelRequest(messages=USER, tools=ToolRegistry([lookup]).schemas(), settings=call)
    with messages_server(message(text_block("ok"))) as server:
        await adapter(server, settings=own).complete(request)
    body = server.requests[0].json()
    assert {key: body[key] for key in ("max_tokens", "stop_sequences", "metadata")} == {
        "max_tokens": 300,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "c-42"},
    }
    assert "temperature" not in body
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    named = request.model_copy(update={"settings": ModelSettings(tool_choice="lookup")})
    assert adapter(server).parameters(named)["tool_choice"] == {"type": "tool", "name": "lookup"}


def test_settings_the_api_cannot_honour_are_refused() -> None:
    """A temperature or seed (the API takes neither), a tool not offered, an extra key the
    adapter writes."""
    model = AnthropicModel("claude-sonnet-4-5", api_key="k")
    with pytest.raises(SetupError) as raised:
        model.parameters(ModelRequest(messages=USER, settings=ModelSettings(seed=1)))
    assert str(raised.value) == (
        "AnthropicModel('claude-sonnet-4-5', constrained=False) was given seed=1, but the "
        "Messages API takes no seed; leave it out of this model's settings"
    )
    cold = ModelRequest(messages=USER, settings=ModelSettings(temperature=0.0))
    with pytest.raises(SetupError, match=r"was given temperature=0\.0, but the Messages API"):
        model.parameters(cold)
    tools = ToolRegistry([lookup]).schemas()
    unknown = ModelRequest(messages=USER, tools=tools, settings=ModelSettings(tool_choice="book"))
    with pytest.raises(SetupError, match="tool_choice names the tool 'book'"):
        model.parameters(unknown)
    clash = ModelRequest(messages=USER, settings=ModelSettings(extra={"system": "x"}))
    with pytest.raises(SetupError, match="the settings' extra would replace 'system'"):
        model.parameters(clash)


async def test_constrained_mode_sends_the_schema_as_structured_output() -> None:
    """A constrained guard accepts the model; the schema goes as output_config.format."""
    guard = OutputGuard(Ticket, mode="constrained")
    answer = message(text_block('{"subject": "Refund", "amount": 12.50}'))
    with messages_server(answer) as server:
        model = adapter(server, constrained=True)
        result = await validate_with_retries(
            guard, guard.ask_model(model, ModelRequest(messages=USER))
        )
    assert result.value == Ticket(subject="Refund", amount=Decimal("12.50"))
    sent = server.requests[0].json()["output_config"]
    assert sent == {"format": {"type": "json_schema", "schema": Ticket.model_json_schema()}}
    unconstrained = AnthropicModel("claude-sonnet-4-5", api_key="k")
    with pytest.raises(SetupError, match="was asked to enforce an output schema"):
        unconstrained.parameters(
            ModelRequest(messages=USER, output_schema=Ticket.model_json_schema())
        )


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "said"),
    [
        (429, "rate_limit_error", "Number of request tokens has exceeded your rate limit."),
        (529, "overloaded_error", "Overloaded"),
        (500, "api_error", "Internal server error"),
    ],
)
async def test_a_429_529_or_5xx_is_unavailable_after_exactly_one_request(
    status: int, kind: str, said: str
) -> None:
    """The SDK's retries are off: one request, a retryable error with the server's words."""
    with (
        messages_server(failure(status, kind, said, **{"retry-after": "7"})) as server,
        pytest.raises(ModelUnavailableError) as raised,
    ):
        await adapter(server).complete(ModelRequest(messages=USER))
    assert len(server.requests) == 1
    error = raised.value
    assert (error.status, error.retry_after, error.detail) == (status, 7.0, said)
    assert str(error) == (
        f"the model at {server.url}/v1/messages is unavailable (HTTP {status}: {said}). "
        "This is usually temporary: try again later (the server asked to wait 7s)"
    )


@pytest.mark.parametrize(
    ("status", "kind", "advice"),
    [
        (400, "invalid_request_error", "Fix the request"),
        (401, "authentication_error", "Check the API key"),
        (403, "permission_error", "Check the API key"),
        (404, "not_found_error", "Check base_url"),
    ],
)
async def test_a_refused_request_is_a_model_request_error(
    status: int, kind: str, advice: str
) -> None:
    """Not retryable; the message quotes the API and fits the status."""
    said = "messages.0.content: text content blocks must be non-empty"
    with (
        messages_server(failure(status, kind, said)) as server,
        pytest.raises(ModelRequestError, match=advice) as raised,
    ):
        await adapter(server).complete(ModelRequest(messages=USER))
    assert (raised.value.status, raised.value.detail) == (status, said)
    assert len(server.requests) == 1


async def test_a_server_that_is_not_listening_is_unavailable() -> None:
    """A refused connection is a ModelUnavailableError without a status, not an SDK error."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = AnthropicModel("claude-sonnet-4-5", api_key="k", base_url=f"http://127.0.0.1:{port}")
    with pytest.raises(ModelUnavailableError, match="could not reach the model") as raised:
        await model.complete(ModelRequest(messages=USER))
    assert raised.value.status is None


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<html>Bad Gateway</html>", "the body is not JSON"),
        ({"type": "message", "content": []}, "id: Field required"),
        (
            json.loads(message(text_block("x")).payload()) | {"content": [{"type": "mystery"}]},
            "content.0",
        ),
    ],
)
async def test_a_body_that_is_not_a_message_is_a_clear_error(body: Any, detail: str) -> None:
    """A 200 that is not a Messages API message raises ModelResponseError naming the part."""
    with (
        messages_server(Recorded(body)) as server,
        pytest.raises(ModelResponseError, match=detail) as raised,
    ):
        await adapter(server).complete(ModelRequest(messages=USER))
    assert "did not answer with a Messages API message" in str(raised.value)


async def test_a_reply_past_the_deadline_is_cancelled_with_timeout_error() -> None:
    """The run's time left bounds the call."""
    with messages_server(Recorded(message(text_block("late")).body, delay=3.0)) as server:
        late = exactly(
            f"the model at {server.url}/v1/messages did not answer within 0.30s; "
            "the request was cancelled"
        )
        started = time.monotonic()
        with anyio.fail_after(2), pytest.raises(TimeoutError, match=late):
            await adapter(server).complete(ModelRequest(messages=USER, timeout=0.3))
        assert time.monotonic() - started < 1.5


# --- a run -----------------------------------------------------------------------------


async def test_a_run_calls_a_tool_and_answers_with_its_result() -> None:
    """End to end: the tool runs, its result goes back as the tool_result of the tool_use
    the run sent, and the model's answer ends the run."""
    agent = Agent[None](name="weather", tools=[lookup], instructions="Be brief.")
    asked = message(tool_use("lookup", {"city": "Paris"}, "toolu_P"), stop_reason="tool_use")
    with messages_server(asked, message(text_block("Sunny in Paris."))) as server:
        async with adapter(server) as model:
            result = await Runner(agent, model=model, gate=AutoDenyGate()).run(
                None, "Weather in Paris?"
            )
    assert result.ok, result.final
    assert len(server.requests) == 2
    second = server.requests[1].json()
    assert second["system"].startswith("Be brief.")
    called, answered = second["messages"][-2:]
    (use,) = [block for block in called["content"] if block["type"] == "tool_use"]
    assert (called["role"], use["name"], use["input"]) == ("assistant", "lookup", {"city": "Paris"})
    (told,) = answered["content"]
    assert (answered["role"], told["type"], told["tool_use_id"]) == (
        "user",
        "tool_result",
        use["id"],
    )
    assert loads(told["content"]) == {"city": "Paris", "sky": "sunny"}


async def test_a_run_runs_every_tool_use_of_a_reply_and_sends_each_result_back() -> None:
    """End to end: two tool_use blocks in one reply both run, and their results go back
    together in one user turn, each under the id the model gave its call."""
    agent = Agent[None](name="weather", tools=[lookup], instructions="Be brief.")
    both = message(
        tool_use("lookup", {"city": "Paris"}, "toolu_P"),
        tool_use("lookup", {"city": "Rome"}, "toolu_R"),
        stop_reason="tool_use",
    )
    with messages_server(both, message(text_block("Sunny in both."))) as server:
        async with adapter(server) as model:
            result = await Runner(agent, model=model, gate=AutoDenyGate()).run(
                None, "Weather in Paris and Rome?"
            )
    assert result.ok, result.final
    assert len(server.requests) == 2
    called, answered = server.requests[1].json()["messages"][-2:]
    assert [block["id"] for block in called["content"]] == ["toolu_P", "toolu_R"]
    assert answered["role"] == "user"
    assert [(block["type"], block["tool_use_id"]) for block in answered["content"]] == [
        ("tool_result", "toolu_P"),
        ("tool_result", "toolu_R"),
    ]
    assert [loads(block["content"])["city"] for block in answered["content"]] == ["Paris", "Rome"]


async def test_an_injected_client_is_used_with_its_retries_off_and_left_open() -> None:
    """A client built with retries still sends one request: the adapter turns them off."""
    import anthropic

    overloaded = failure(529, "overloaded_error", "Overloaded")
    with messages_server(overloaded, overloaded, overloaded) as server:
        client = anthropic.AsyncAnthropic(api_key="sk-ant-own", base_url=server.url, max_retries=3)
        async with client:
            model = AnthropicModel("claude-sonnet-4-5", client=client)
            with pytest.raises(ModelUnavailableError, match="HTTP 529: Overloaded"):
                await model.complete(ModelRequest(messages=USER))
            await model.aclose()
            assert not client.is_closed()
    assert len(server.requests) == 1


def test_building_needs_a_key_and_sane_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key at all, an address that is not http(s), a bad max_tokens or timeout."""
    with pytest.raises(
        SetupError,
        match=exactly("AnthropicModel needs an API key: pass api_key= or set ANTHROPIC_API_KEY"),
    ):
        AnthropicModel("claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert AnthropicModel("claude-sonnet-4-5").model == "claude-sonnet-4-5"
    with pytest.raises(SetupError, match="base_url must be an http"):
        AnthropicModel("m", base_url="api.anthropic.com")
    with pytest.raises(SetupError, match="max_tokens must be a positive"):
        AnthropicModel("m", max_tokens=0)
    with pytest.raises(SetupError, match="timeout must be a positive"):
        AnthropicModel("m", timeout=0)
