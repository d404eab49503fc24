"""statemachine.models._openai: the chat-completions adapter against a real HTTP server on loopback.

Every test starts its own small HTTP/1.1 server on 127.0.0.1 (a free port), which
answers ``POST /v1/chat/completions`` with recorded replies chosen by the test and
records every request it receives; the server is stopped when the test ends.
"""

from __future__ import annotations

import http
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import anyio
import attrs
import httpx
import pytest
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import BaseModel, ConfigDict
from support import CityArgs, FlightArgs, exactly

from statemachine import (
    Agent,
    Budget,
    Failed,
    Message,
    ModelReply,
    ModelRequest,
    ModelRequestError,
    ModelResponseError,
    ModelSettings,
    ModelUnavailableError,
    Money,
    OpenAICompatibleModel,
    OutputGuard,
    Refusal,
    Runner,
    SetupError,
    StatemachineError,
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

MAX_BODY = 1_000_000


# --- the server ------------------------------------------------------------------------


@attrs.frozen
class Recorded:
    """One reply the server sends: status, JSON document (or raw bytes), delay, headers."""

    body: Any
    status: int = 200
    delay: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()
    hang_up: bool = False  # close the connection instead of answering

    def payload(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else dumps(self.body).encode()


@attrs.frozen
class Received:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return loads(self.body)


@attrs.define
class ChatServer:
    """Answers each request with the next recorded reply and records what it was sent."""

    port: int
    replies: list[Recorded]
    requests: list[Received] = attrs.field(factory=list)
    connections: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def next_reply(self, request: Received) -> Recorded:
        if (request.method, request.path) != ("POST", "/v1/chat/completions"):
            return Recorded({"error": {"message": f"no route {request.path}"}}, status=404)
        if len(self.requests) > len(self.replies):
            return Recorded({"error": {"message": "no reply recorded"}}, status=500)
        return self.replies[len(self.requests) - 1]

    async def handle(self, stream: SocketStream) -> None:
        self.connections += 1
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            try:
                while True:  # keep-alive: one connection may carry several requests
                    head = (await reader.receive_until(b"\r\n\r\n", 65_536)).decode("latin-1")
                    request_line, *lines = head.split("\r\n")
                    method, path, _ = request_line.split(" ", 2)
                    headers = {}
                    for line in lines:
                        key, _, value = line.partition(":")
                        headers[key.strip().lower()] = value.strip()
                    length = int(headers.get("content-length", "0"))
                    if length > MAX_BODY:
                        return
                    body = await reader.receive_exactly(length) if length else b""
                    received = Received(method, path, headers, body)
                    self.requests.append(received)
                    recorded = self.next_reply(received)
                    await anyio.sleep(recorded.delay)
                    if recorded.hang_up:
                        return
                    payload = recorded.payload()
                    known = recorded.status in http.HTTPStatus._value2member_map_
                    phrase = http.HTTPStatus(recorded.status).phrase if known else "Overloaded"
                    response = [
                        f"HTTP/1.1 {recorded.status} {phrase}",
                        "content-type: application/json",
                        f"content-length: {len(payload)}",
                        *(f"{key}: {value}" for key, value in recorded.headers),
                    ]
                    await stream.send(("\r\n".join(response) + "\r\n\r\n").encode() + payload)
            except (
                anyio.EndOfStream,
                anyio.IncompleteRead,
                anyio.DelimiterNotFound,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ):
                return


@asynccontextmanager
async def chat_server(*replies: Recorded) -> AsyncIterator[ChatServer]:
    """A chat-completions server on 127.0.0.1 for the block, stopped when it ends."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as group:
        server = ChatServer(listener.extra(SocketAttribute.local_port), list(replies))
        group.start_soon(listener.serve, server.handle)
        try:
            yield server
        finally:
            group.cancel_scope.cancel()


@pytest.fixture(autouse=True)
def _no_proxy_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback stays loopback, and no key from the environment leaks into a test."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


# --- recorded replies ------------------------------------------------------------------


def completion(
    message: dict[str, Any],
    finish_reason: str | None = "stop",
    usage: dict[str, int] | None = None,
) -> Recorded:
    """A chat completion as OpenAI's API records it."""
    document: dict[str, Any] = {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1741569952,
        "model": "gpt-4.1-2025-04-14",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": None, **message},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "system_fingerprint": "fp_a1102cf978",
    }
    if usage is not None:
        document["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return Recorded(document)


def text(content: str, **usage: int) -> Recorded:
    return completion({"content": content}, "stop", usage or None)


def calls(name: str, arguments: Any, call_id: str = "call_Dnx7Ej2bVT0mtF7vN6tS0Ff8") -> Recorded:
    return completion(
        {
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ]
        },
        "tool_calls",
        {"prompt_tokens": 82, "completion_tokens": 17},
    )


def error(status: int, message: str, **headers: str) -> Recorded:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Recorded(body, status=status, headers=tuple(headers.items()))


USER = (Message(role="user", content="What is the weather in Paris?"),)


def adapter(server: ChatServer, **options: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(server.url, "gpt-4.1", **options)


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
    """Text, finish reason and tokens come through; cost is priced per million, exactly."""
    prices = TokenPrices(input=Decimal("2.50"), output=Decimal("10.00"), per=1_000_000)
    async with chat_server(text("Sunny, 21 °C.", prompt_tokens=1234, completion_tokens=567)) as s:
        got = await adapter(s, prices=prices, api_key="sk-test").complete(
            ModelRequest(messages=USER)
        )
    assert got == ModelReply(
        text="Sunny, 21 °C.",
        finish_reason="stop",
        usage=Usage(input_tokens=1234, output_tokens=567, cost=Decimal("0.008755")),
    )
    assert isinstance(got.usage.cost, Decimal)
    assert s.requests[0].headers["authorization"] == "Bearer sk-test"


def test_token_prices_are_exact_per_thousand_and_refuse_floats() -> None:
    """Per-1K prices multiply exactly; a float price is refused like any Money."""
    prices = TokenPrices(input=Decimal("0.0005"), output=Decimal("0.0015"), per=1_000)
    assert prices.cost(1, 1) == Decimal("0.000002")
    assert prices.cost(3_000_000, 1_000_000) == Decimal("3.0")
    assert TokenPrices().cost(10**9, 10**9) == 0
    with pytest.raises(ValueError, match="money must be exact"):
        TokenPrices(input=0.1)
    with pytest.raises(ValueError, match="per"):
        TokenPrices(per=1_024)


async def test_the_api_key_comes_from_the_environment_when_not_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OPENAI_API_KEY is the fallback; with no key at all, no Authorization is sent."""
    async with chat_server(text("a"), text("b")) as server:
        await adapter(server).complete(ModelRequest(messages=USER))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        await adapter(server).complete(ModelRequest(messages=USER))
    assert "authorization" not in server.requests[0].headers
    assert server.requests[1].headers["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(adapter(server))


async def test_a_tool_call_comes_back_as_a_tool_request() -> None:
    """Name, raw arguments and the server's call id; the finish reason says tool_calls."""
    async with chat_server(calls("lookup", '{"city": "Paris"}')) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got.tool_calls == (
        ToolRequest(
            name="lookup", arguments='{"city": "Paris"}', id="call_Dnx7Ej2bVT0mtF7vN6tS0Ff8"
        ),
    )
    assert (got.text, got.finish_reason) == ("", "tool_calls")
    assert got.usage == Usage(input_tokens=82, output_tokens=17)


async def test_arguments_sent_as_an_object_are_written_back_exactly() -> None:
    """A server that sends the arguments object itself: numbers keep every digit."""
    async with chat_server(calls("book", {"flight": "AF1", "price": Decimal("137.30")})) as s:
        got = await adapter(s).complete(ModelRequest(messages=USER))
    assert got.tool_calls[0].arguments == '{"flight":"AF1","price":137.30}'


async def test_the_request_body_maps_messages_and_tools() -> None:
    """The protocol's roles, tool calls and ids; tools as functions, Money as a number."""
    conversation = (
        Message(role="system", content="Be brief."),
        Message(role="user", content="Book AF1."),
        Message(
            role="assistant",
            tool_calls=(ToolRequest(name="book", arguments='{"flight":"AF1"}', id="call-1"),),
        ),
        Message(role="tool", content="booked AF1", tool_call_id="call-1", name="book"),
        Message(role="assistant", content="Booked."),
    )
    request = ModelRequest(messages=conversation, tools=ToolRegistry([lookup, book]).schemas())
    async with chat_server(text("ok")) as server:
        await adapter(server).complete(request)
    sent = server.requests[0]
    assert (sent.method, sent.path, sent.headers["content-type"]) == (
        "POST",
        "/v1/chat/completions",
        "application/json",
    )
    body = sent.json()
    assert body["model"] == "gpt-4.1"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Book AF1."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "book", "arguments": '{"flight":"AF1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call-1", "content": "booked AF1"},
        {"role": "assistant", "content": "Booked."},
    ]
    assert [tool["type"] for tool in body["tools"]] == ["function", "function"]
    booking = body["tools"][1]["function"]
    assert (booking["name"], booking["description"]) == ("book", "Book a flight.")
    assert booking["parameters"]["properties"]["price"] == {"title": "Price", "type": "number"}
    assert booking["parameters"]["required"] == ["flight", "price"]
    assert "response_format" not in body
    assert "tool_choice" not in body


# --- constrained mode ------------------------------------------------------------------


async def test_constrained_mode_sends_a_strict_json_schema_and_the_guard_accepts_it() -> None:
    """A constrained guard passes start-up; the schema goes out as a strict response_format."""
    guard = OutputGuard(Ticket, mode="constrained")
    answer = text('{"subject": "Refund", "amount": 12.50}')
    async with chat_server(answer) as server:
        model = adapter(server, constrained=True)
        result = await validate_with_retries(
            guard, guard.ask_model(model, ModelRequest(messages=USER))
        )
    assert result.status == "ok"
    assert result.value == Ticket(subject="Refund", amount=Decimal("12.50"))
    assert server.requests[0].json()["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Ticket", "schema": Ticket.model_json_schema(), "strict": True},
    }


def test_a_constrained_guard_refuses_an_unconstrained_adapter_at_start_up() -> None:
    """Without constrained=True the guard fails at start-up, and so does a schema sent anyway."""
    model = OpenAICompatibleModel("http://127.0.0.1:9/v1", "gpt-4.1")
    guard = OutputGuard(Ticket, mode="constrained")
    with pytest.raises(SetupError, match="OpenAICompatibleModel does not declare constrained"):
        guard.check_backend(model)
    with pytest.raises(SetupError, match="OpenAICompatibleModel does not declare constrained"):
        guard.ask_model(model, ModelRequest(messages=USER))
    message = (
        "OpenAICompatibleModel('http://127.0.0.1:9/v1', 'gpt-4.1', constrained=False) was "
        "asked to enforce an output schema but is not constrained; pass constrained=True if "
        "the server supports strict response_format, or use guard mode 'auto_repair' or 'reject'"
    )
    with pytest.raises(SetupError, match=exactly(message)):
        model.body(ModelRequest(messages=USER, output_schema=Ticket.model_json_schema()))


async def test_a_server_that_refuses_json_schema_is_asked_again_with_json_object() -> None:
    """A 500 naming response_format (llama-cpp-python's server): one more request, with
    json_object and the schema; the model remembers, so the next call sends json_object."""
    guard = OutputGuard(Ticket, mode="constrained")
    refused = error(500, "Unsupported response_format type: 'json_schema'")
    answer = text('{"subject": "Refund", "amount": 12.50}')
    async with chat_server(refused, answer, answer) as server:
        model = adapter(server, constrained=True)
        first = model.structured_output
        for _ in range(2):
            result = await validate_with_retries(
                guard, guard.ask_model(model, ModelRequest(messages=USER))
            )
            assert result.value == Ticket(subject="Refund", amount=Decimal("12.50"))
    assert (first, model.structured_output) == ("json_schema", "json_object")
    formats = [request.json()["response_format"] for request in server.requests]
    assert [sent["type"] for sent in formats] == ["json_schema", "json_object", "json_object"]
    assert formats[1] == {"type": "json_object", "schema": Ticket.model_json_schema()}


@pytest.mark.parametrize(
    ("status", "said", "raised"),
    [
        (503, "The server is overloaded.", ModelUnavailableError),
        (400, "Unsupported response_format type: 'json_schema'", ModelRequestError),
        (500, "response_format: unsupported type 'json_object'", ModelRequestError),
    ],
)
async def test_only_a_json_schema_refusal_is_asked_again_and_only_once(
    status: int, said: str, raised: type[Exception]
) -> None:
    """Another failure is not asked again; a refusal of json_object too is raised, and a 5xx
    that names response_format is a refused request, not a passing failure to retry."""
    refusal = error(status, said)
    async with chat_server(refusal, refusal, text("never")) as server:
        model = adapter(server, constrained=True)
        request = ModelRequest(messages=USER, output_schema=Ticket.model_json_schema())
        with pytest.raises(raised, match=said):
            await model.complete(request)
    assert len(server.requests) == (1 if status == 503 else 2)


# --- settings --------------------------------------------------------------------------


async def test_settings_go_out_under_the_protocols_names() -> None:
    """The model's settings with the request's over them; extra is added as it is."""
    model_settings = ModelSettings(temperature=0.7, max_tokens=256, extra={"top_k": 40})
    call = ModelSettings(
        temperature=0.0,
        seed=7,
        stop=("END",),
        tool_choice="required",
        parallel_tool_calls=False,
        extra={"min_p": Decimal("0.05")},
    )
    request = ModelRequest(messages=USER, tools=ToolRegistry([lookup]).schemas(), settings=call)
    async with chat_server(text("ok")) as server:
        await adapter(server, settings=model_settings).complete(request)
    body = server.requests[0].json()
    assert {key: value for key, value in body.items() if key not in ("messages", "tools")} == {
        "model": "gpt-4.1",
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "temperature": Decimal("0.0"),
        "max_tokens": 256,
        "seed": 7,
        "stop": ["END"],
        "top_k": 40,
        "min_p": Decimal("0.05"),
    }


async def test_tool_settings_go_only_with_tools_and_a_tool_name_forces_that_tool() -> None:
    """Without tools, tool_choice and parallel_tool_calls are left out (servers refuse them)."""
    settings = ModelSettings(tool_choice="lookup", parallel_tool_calls=True)
    model = OpenAICompatibleModel("http://127.0.0.1:9/v1", "gpt-4.1", settings=settings)
    tools = ToolRegistry([lookup, book]).schemas()
    with_tools = model.body(ModelRequest(messages=USER, tools=tools))
    assert with_tools["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert with_tools["parallel_tool_calls"] is True
    alone = model.body(ModelRequest(messages=USER))
    assert "tool_choice" not in alone
    assert "parallel_tool_calls" not in alone


def test_settings_the_adapter_cannot_send_are_refused_before_sending() -> None:
    """A tool_choice naming a tool not offered, or an extra key the adapter writes itself."""
    model = OpenAICompatibleModel("http://127.0.0.1:9/v1", "gpt-4.1")
    tools = ToolRegistry([lookup]).schemas()
    unknown = ModelRequest(messages=USER, tools=tools, settings=ModelSettings(tool_choice="book"))
    with pytest.raises(SetupError) as raised:
        model.body(unknown)
    assert str(raised.value) == (
        "tool_choice names the tool 'book', which this request does not offer (it offers "
        "'lookup'); name one of those, or use one of 'auto', 'required', 'none'"
    )
    clash = ModelRequest(messages=USER, settings=ModelSettings(extra={"model": "other"}))
    with pytest.raises(SetupError, match="the settings' extra would replace 'model'"):
        model.body(clash)


# --- refusal and truncation ------------------------------------------------------------


async def test_a_refusal_becomes_the_guards_refusal() -> None:
    """message.refusal sets finish_reason 'refusal' with the refusal's words; no usage, no cost."""
    said = "I'm sorry, I can't help with that request."
    async with chat_server(completion({"refusal": said}, "stop")) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got == ModelReply(text=said, finish_reason="refusal", usage=Usage())
    assert OutputGuard(Ticket).check(got) == Refusal(text=said, finish_reason="refusal")


async def test_a_truncation_becomes_the_guards_truncation() -> None:
    """finish_reason 'length' stays 'length', and the guard reports what arrived as Truncated."""
    cut = '{"subject": "Refund for ord'
    async with chat_server(completion({"content": cut}, "length")) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert (got.text, got.finish_reason) == (cut, "length")
    assert OutputGuard(Ticket).check(got) == Truncated(text=cut)


@pytest.mark.parametrize(
    ("stated", "message", "expected"),
    [
        ("content_filter", {"content": None}, "content_filter"),
        ("function_call", {"content": None}, "tool_calls"),
        (None, {"content": "hi"}, "stop"),
        ("eos", {"content": "hi"}, "stop"),
    ],
)
async def test_other_finish_reasons_are_mapped(
    stated: str | None, message: dict[str, Any], expected: str
) -> None:
    """The filter passes through, the old name for a tool call is mapped, others mean stop."""
    async with chat_server(completion(message, stated)) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got.finish_reason == expected


# --- malformed tool arguments ----------------------------------------------------------

BROKEN = '{"city": "Paris"'


async def test_malformed_tool_arguments_pass_through_raw() -> None:
    """The adapter neither parses nor repairs arguments: the registry's router does."""
    async with chat_server(calls("lookup", BROKEN)) as server:
        got = await adapter(server).complete(ModelRequest(messages=USER))
    assert got.tool_calls[0].arguments == BROKEN


async def test_malformed_tool_arguments_become_feedback_in_a_run() -> None:
    """End to end: the bad call is an InvalidCall told to the model, which then answers."""
    agent = Agent[None](name="weather", tools=[lookup], instructions="Be brief.")
    expected = agent.tools.route("lookup", BROKEN)
    async with chat_server(calls("lookup", BROKEN), text("It is sunny in Paris.")) as server:
        result = await Runner(agent, model=adapter(server), gate=AutoDenyGate()).run(
            None, "Weather in Paris?"
        )
    assert result.ok, result.final
    assert result.history == ("Idle", "Planning", "Planning", "Responding", "Done")
    assert len(server.requests) == 2
    first, second = (request.json() for request in server.requests)
    assert first["tools"][0]["function"]["name"] == "lookup"
    asked, told = second["messages"][-2:]
    assert asked["tool_calls"][0]["function"] == {"name": "lookup", "arguments": BROKEN}
    assert told == {
        "role": "tool",
        "tool_call_id": asked["tool_calls"][0]["id"],
        "content": getattr(expected, "feedback", None),
    }
    assert "not valid JSON" in told["content"]


# --- HTTP errors -----------------------------------------------------------------------


async def test_a_503_raises_model_unavailable_after_exactly_one_request() -> None:
    """No retry by the client: one request reaches the server, and the error says try later."""
    async with chat_server(error(503, "The server is overloaded.", **{"retry-after": "2"})) as s:
        with pytest.raises(ModelUnavailableError) as raised:
            await adapter(s).complete(ModelRequest(messages=USER))
    assert len(s.requests) == 1
    error_ = raised.value
    assert (error_.status, error_.retry_after, error_.retryable) == (503, 2.0, True)
    assert isinstance(error_, RuntimeError)
    assert str(error_) == (
        f"the model at {s.url}/chat/completions is unavailable (HTTP 503: The server is "
        "overloaded.). This is usually temporary: try again later (the server asked to wait 2s)"
    )


async def test_a_429_is_unavailable_too() -> None:
    """Rate limited: retryable, and the server's words are kept."""
    async with chat_server(error(429, "Rate limit reached for gpt-4.1.")) as s:
        with pytest.raises(ModelUnavailableError, match="HTTP 429: Rate limit reached"):
            await adapter(s).complete(ModelRequest(messages=USER))
    assert len(s.requests) == 1


async def test_a_server_that_is_not_listening_is_unavailable() -> None:
    """A refused connection is a ModelUnavailableError without a status, not an httpx error."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAICompatibleModel(f"http://127.0.0.1:{port}/v1", "gpt-4.1")
    with pytest.raises(ModelUnavailableError, match="could not reach the model") as raised:
        await model.complete(ModelRequest(messages=USER))
    assert raised.value.status is None


async def test_a_400_raises_model_request_error_with_the_servers_message() -> None:
    """Not retryable; the message quotes the server and says what to fix."""
    said = "Invalid schema for response_format 'Ticket': 'additionalProperties' is required."
    async with chat_server(error(400, said)) as server:
        with pytest.raises(ModelRequestError) as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert (raised.value.status, raised.value.detail, raised.value.retryable) == (400, said, False)
    assert isinstance(raised.value, ValueError)
    assert str(raised.value) == (
        f"the model at {server.url}/chat/completions refused the request with HTTP 400: "
        f"{said}. Fix the request (the model name, the tools' schemas, or an output schema "
        "the server's strict mode does not support); the same request fails again."
    )


async def test_a_401_says_to_check_the_key() -> None:
    """The advice fits the status."""
    async with chat_server(error(401, "Incorrect API key provided.")) as server:
        with pytest.raises(ModelRequestError, match="Check the API key"):
            await adapter(server).complete(ModelRequest(messages=USER))


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<html><body>Bad Gateway</body></html>", "the body is not JSON"),
        ({"choices": []}, "'choices' is empty"),
        ({"object": "list"}, "the body has no 'choices'"),
        ({"choices": [{"message": {"content": 5}}]}, "the message's 'content' is 5"),
    ],
)
async def test_a_body_that_is_not_a_chat_completion_is_a_clear_error(
    body: Any, detail: str
) -> None:
    """A 200 whose body cannot be read raises ModelResponseError naming what was wrong."""
    async with chat_server(Recorded(body)) as server:
        with pytest.raises(ModelResponseError, match=detail) as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert isinstance(raised.value, StatemachineError)
    assert "Check that base_url points at an OpenAI-compatible API" in str(raised.value)


# --- deadlines -------------------------------------------------------------------------


async def test_a_reply_past_the_deadline_is_cancelled_with_timeout_error() -> None:
    """The run's time left bounds the call: TimeoutError at the deadline, not at the reply."""
    async with chat_server(Recorded(text("late").body, delay=5.0)) as server:
        started = time.monotonic()
        late = exactly(
            f"the model at {server.url}/chat/completions did not answer within 0.30s; "
            "the request was cancelled"
        )
        with anyio.fail_after(2), pytest.raises(TimeoutError, match=late):
            await adapter(server, timeout=60).complete(ModelRequest(messages=USER, timeout=0.3))
        assert time.monotonic() - started < 1.5
    assert len(server.requests) == 1


async def test_the_adapters_own_timeout_bounds_a_call_without_a_deadline() -> None:
    """With no run deadline, the adapter's timeout is the limit."""
    async with chat_server(Recorded(text("late").body, delay=5.0)) as server:
        late = exactly(
            f"the model at {server.url}/chat/completions did not answer within 0.20s; "
            "the request was cancelled"
        )
        with anyio.fail_after(2), pytest.raises(TimeoutError, match=late):
            await adapter(server, timeout=0.2).complete(ModelRequest(messages=USER))


async def test_a_slow_model_fails_the_run_with_the_wall_clock_reason() -> None:
    """End to end: Budget(wall_clock=) ends the run in Failed, within the budget."""
    agent = Agent[None](name="weather", tools=[lookup], budget=Budget(wall_clock=0.5))
    async with chat_server(Recorded(text("late").body, delay=5.0)) as server:
        started = time.monotonic()
        with anyio.fail_after(3):
            result = await Runner(agent, model=adapter(server), gate=AutoDenyGate()).run(
                None, "Weather in Paris?"
            )
        assert time.monotonic() - started < 2
    assert result.status == "failed"
    assert getattr(result.final, "reason", "").startswith(
        "wall-clock budget: the model did not answer within the 0."
    )


# --- the client ------------------------------------------------------------------------


async def test_async_with_keeps_one_connection_and_closes_it() -> None:
    """Inside ``async with`` calls share a pool; outside, each call has its own client."""
    async with chat_server(text("a"), text("b"), text("c"), text("d")) as server:
        async with adapter(server) as model:
            await model.complete(ModelRequest(messages=USER))
            await model.complete(ModelRequest(messages=USER))
        assert server.connections == 1
        await model.complete(ModelRequest(messages=USER))
        await model.complete(ModelRequest(messages=USER))
        assert server.connections == 3


async def test_an_injected_client_is_used_and_left_open() -> None:
    """Tests and users may bring their own client (here a mock transport); it stays theirs."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=text("mocked").payload())

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        async with OpenAICompatibleModel("https://example.test/v1/", "m", client=client) as model:
            got = await model.complete(ModelRequest(messages=USER))
        assert not client.is_closed
    assert got.text == "mocked"
    assert str(seen[0].url) == "https://example.test/v1/chat/completions"


def test_bad_settings_fail_at_construction() -> None:
    """An address that is not http(s), an empty model name or a non-positive timeout."""
    with pytest.raises(SetupError, match="base_url must be an http"):
        OpenAICompatibleModel("127.0.0.1:8080", "m")
    with pytest.raises(SetupError, match="model must name"):
        OpenAICompatibleModel("http://127.0.0.1:8080/v1", " ")
    with pytest.raises(SetupError, match="timeout must be a positive"):
        OpenAICompatibleModel("http://127.0.0.1:8080/v1", "m", timeout=0)


# --- failure classes through the SDK ---------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
async def test_a_failure_that_may_pass_is_unavailable_after_one_request(status: int) -> None:
    """A request timeout, a conflict, rate limiting and every 5xx but 501: retryable, and
    the SDK sends the request once (its own retries are off)."""
    async with chat_server(error(status, "try later"), text("never")) as server:
        with pytest.raises(ModelUnavailableError) as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert (raised.value.status, raised.value.retryable) == (status, True)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422, 501])
async def test_a_refused_request_is_permanent_after_one_request(status: int) -> None:
    """A 4xx (but 408, 409, 429) and a 501 (the server cannot do it): the same request
    fails again, so it is a ModelRequestError, not retryable."""
    async with chat_server(error(status, "no such thing"), text("never")) as server:
        with pytest.raises(ModelRequestError) as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert (raised.value.status, raised.value.retryable) == (status, False)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
async def test_the_wait_the_server_asks_for_is_read_from_its_headers(
    headers: dict[str, str], wait: float | None
) -> None:
    """Seconds, OpenAI's milliseconds (which win), or an HTTP date (one in the past asks
    for no wait); anything unreadable is no ask."""
    async with chat_server(error(429, "slow down", **headers)) as server:
        with pytest.raises(ModelUnavailableError) as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert raised.value.retry_after == wait


def test_an_http_date_is_read_as_the_seconds_until_it() -> None:
    """retry-after as an HTTP date: the seconds from now until then."""
    from statemachine.models._wire import retry_after

    now = 1_445_412_450.0  # 07:27:30 GMT, 30s before the date
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now) == 30.0
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00"}, now) is None


async def test_a_connection_reset_before_the_answer_is_unavailable() -> None:
    """A server that closes the connection on the request: no status, retryable."""
    async with chat_server(Recorded(b"", hang_up=True)) as server:
        with pytest.raises(ModelUnavailableError, match="could not reach the model") as raised:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert raised.value.status is None


# --- tool_choice "required", refused ---------------------------------------------------

# What llama-cpp-python's server answers to tool_choice "required": a 500, no message.
REQUIRED_REFUSED = Recorded(
    {"error": {"message": "", "type": "internal_server_error", "param": None, "code": None}},
    status=500,
)


async def test_a_server_that_refuses_required_is_asked_again_with_the_tool_named() -> None:
    """tool_choice "required" answered by a 500 with no message: asked again at once with
    the one tool offered named; the model remembers, and asks so from then on."""
    request = ModelRequest(
        messages=USER,
        tools=ToolRegistry([lookup]).schemas(),
        settings=ModelSettings(tool_choice="required"),
    )
    answer = calls("lookup", '{"city": "Paris"}')
    async with chat_server(REQUIRED_REFUSED, answer, answer) as server:
        model = adapter(server)
        assert model.required_tool_choice
        first = await model.complete(request)
        second = await model.complete(request)
    assert first.tool_calls[0].name == second.tool_calls[0].name == "lookup"
    assert not model.required_tool_choice
    choices = [sent.json()["tool_choice"] for sent in server.requests]
    named = {"type": "function", "function": {"name": "lookup"}}
    assert choices == ["required", named, named]


async def test_with_several_tools_a_refused_required_becomes_auto() -> None:
    """With more than one tool, no one tool can be named: "auto"."""
    request = ModelRequest(
        messages=USER,
        tools=ToolRegistry([lookup, book]).schemas(),
        settings=ModelSettings(tool_choice="required"),
    )
    async with chat_server(REQUIRED_REFUSED, text("ok")) as server:
        got = await adapter(server).complete(request)
    assert got.text == "ok"
    assert [sent.json()["tool_choice"] for sent in server.requests] == ["required", "auto"]


@pytest.mark.parametrize(
    ("first", "raised", "sent"),
    [
        # A 5xx with words of its own is a failure of the server, not of the request.
        (error(503, "The server is overloaded."), ModelUnavailableError, 1),
        # A 4xx naming tool_choice is a refusal of "required": asked again; refused twice.
        (error(400, "tool_choice 'required' is not supported"), ModelRequestError, 2),
        # A 4xx about something else is the request's own fault: not asked again.
        (error(400, "'messages' is a required property"), ModelRequestError, 1),
    ],
)
async def test_only_a_refusal_of_required_is_asked_again(
    first: Recorded, raised: type[Exception], sent: int
) -> None:
    request = ModelRequest(
        messages=USER,
        tools=ToolRegistry([lookup]).schemas(),
        settings=ModelSettings(tool_choice="required"),
    )
    async with chat_server(first, error(400, "still no"), text("never")) as server:
        with pytest.raises(raised):
            await adapter(server).complete(request)
    assert len(server.requests) == sent


# --- a tool call cut at max_tokens -----------------------------------------------------


async def test_a_tool_call_cut_at_max_tokens_is_a_truncation() -> None:
    """A forced call whose arguments stop mid-JSON after every token max_tokens allowed
    (llama-cpp-python's server says tool_calls) is reported as finish_reason length."""
    cut = completion(
        {"tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "lookup", "arguments": '{"city": "Pa'}}]},
        "tool_calls",
        {"prompt_tokens": 40, "completion_tokens": 3},
    )  # fmt: skip
    whole = calls("lookup", '{"city": "Paris"}')  # 17 tokens, whole arguments
    settings = ModelSettings(max_tokens=3)
    async with chat_server(cut, whole) as server:
        model = adapter(server, settings=settings)
        got = await model.complete(ModelRequest(messages=USER))
        kept = await model.complete(ModelRequest(messages=USER))
    assert (got.finish_reason, got.tool_calls[0].arguments) == ("length", '{"city": "Pa')
    assert kept.finish_reason == "tool_calls"


async def test_a_run_whose_tool_call_is_cut_fails_as_a_truncation() -> None:
    """End to end: the cut call is not routed as an invalid call; the run fails saying
    that the model's tool call was cut off at the token limit, and nothing runs."""
    cut = completion(
        {"tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "book", "arguments": '{"flight": "AF'}}]},
        "length",
        {"prompt_tokens": 40, "completion_tokens": 3},
    )  # fmt: skip
    agent = Agent[None](name="travel", tools=[lookup, book])
    async with chat_server(cut, text("never")) as server:
        result = await Runner(agent, model=adapter(server), gate=AutoDenyGate()).run(
            None, "Book AF1."
        )
    assert result.history == ("Idle", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert result.final.reason == (
        "the model's tool call was cut off at the token limit (finish_reason length): "
        "book with arguments '{\"flight\": \"AF'; raise max_tokens in the model's settings"
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("error_", "raised", "status"),
    [
        ({"message": "Upstream overloaded", "code": 502}, ModelUnavailableError, 502),
        ({"message": "Upstream overloaded"}, ModelUnavailableError, 200),
        ({"message": "No such model", "code": 404}, ModelRequestError, 404),
    ],
)
async def test_an_error_in_a_200_body_is_read_as_the_error_it_is(
    error_: dict[str, Any], raised: type[Exception], status: int
) -> None:
    """A gateway that answers 200 with an error object, not a completion: its code says
    whether it may pass (no code: it may); the server's words are kept."""
    async with chat_server(Recorded({"error": error_})) as server:
        with pytest.raises(raised, match=error_["message"]) as caught:
            await adapter(server).complete(ModelRequest(messages=USER))
    assert getattr(caught.value, "status", None) == status


async def test_a_server_that_wants_max_completion_tokens_gets_it() -> None:
    """OpenAI's newer models refuse max_tokens with a 400 naming max_completion_tokens:
    asked again at once with the cap under that name, and so from then on; a cut call is
    still told by that cap."""
    refused = error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
    )
    cut = completion(
        {"tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "lookup", "arguments": '{"city": "Pa'}}]},
        "tool_calls",
        {"prompt_tokens": 40, "completion_tokens": 3},
    )  # fmt: skip
    async with chat_server(refused, text("ok"), cut) as server:
        model = adapter(server, settings=ModelSettings(max_tokens=3))
        first = await model.complete(ModelRequest(messages=USER))
        second = await model.complete(ModelRequest(messages=USER))
    assert (first.text, second.finish_reason) == ("ok", "length")
    sent = [request.json() for request in server.requests]
    assert [("max_tokens" in body, body.get("max_completion_tokens")) for body in sent] == [
        (True, None),
        (False, 3),
        (False, 3),
    ]
