"""statemachine.models._anthropic: ``stream`` over the Messages API's server-sent events.

A real ``http.server`` on 127.0.0.1 in a thread answers ``POST /v1/messages`` with the
event streams in ``tests/data/anthropic/`` (written in the shapes the Messages API's
streaming documentation gives: ``message_start``, content blocks with ``text_delta``
and ``input_json_delta``, ``ping``, ``message_delta``, ``message_stop``, an ``error``
event), one write per event, so that the official SDK reads them as it would the API.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from support import CityArgs, FlightArgs

from statemachine import (
    Agent,
    AnthropicModel,
    Message,
    ModelChunk,
    ModelRequest,
    ModelRequestError,
    ModelResponseError,
    ModelUnavailableError,
    Money,
    OutputGuard,
    Refusal,
    RunFinished,
    Runner,
    StreamingModel,
    TextDelta,
    TokenPrices,
    Truncated,
    read_tool,
    write_tool,
)
from statemachine.testing import AutoDenyGate

pytestmark = pytest.mark.anyio

RECORDED = Path(__file__).parent / "data" / "anthropic"


def events(name: str) -> list[str | float]:
    """The recorded stream ``name``, one part per event (each written and flushed)."""
    text = (RECORDED / f"{name}.sse").read_text()
    return [f"{block}\n\n" for block in text.split("\n\n") if block.strip()]


class Script:
    """What the loopback server answers next, and the bodies it was sent."""

    def __init__(self) -> None:
        # (status, content type, parts, headers): a part is text written at once, or
        # seconds to wait.
        self.answers: list[tuple[int, str, list[str | float], dict[str, str]]] = []
        self.bodies: list[dict[str, Any]] = []

    def stream(self, parts: list[str | float]) -> None:
        self.answers.append((200, "text/event-stream", parts, {}))

    def error(self, status: int, kind: str, said: str, **headers: str) -> None:
        body = json.dumps({"type": "error", "error": {"type": kind, "message": said}})
        self.answers.append((status, "application/json", [body], headers))


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["content-length"])
            script.bodies.append(json.loads(self.rfile.read(length)))
            status, kind, parts, headers = script.answers.pop(0)
            self.send_response(status)
            self.send_header("content-type", kind)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("connection", "close")
            self.end_headers()
            try:
                for part in parts:
                    if isinstance(part, float):
                        time.sleep(part)
                        continue
                    self.wfile.write(part.encode())
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):  # the client closed first
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(autouse=True)
def _no_proxy_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("all_proxy", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def model(url: str, **options: Any) -> AnthropicModel:
    return AnthropicModel("claude-sonnet-4-5", base_url=url, api_key="sk-ant-test", **options)


def asking(text: str = "Weather in Oslo?") -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),))


async def chunks_of(adapter: AnthropicModel, request: ModelRequest) -> list[ModelChunk]:
    return [chunk async for chunk in adapter.stream(request)]


@read_tool
async def lookup(args: CityArgs) -> dict[str, str]:
    """Today's weather in a city."""
    return {"city": args.city, "sky": "sunny"}


@write_tool(cost=lambda args: args.price)
async def book(args: FlightArgs) -> str:
    """Book a flight."""
    return f"booked {args.flight}"


class Ticket(BaseModel):
    model_config = ConfigDict(frozen=True)

    subject: str
    amount: Money


# --- replies ---------------------------------------------------------------------------


async def test_text_streams_as_deltas_and_the_reply_has_the_whole_text_and_usage(
    server: tuple[str, Script],
) -> None:
    """Each text_delta is a chunk as it comes (the ping is skipped); the last chunk carries
    the reply, its usage from message_start and message_delta, priced exactly; the
    request asked for a stream."""
    url, script = server
    script.stream(events("text"))
    prices = TokenPrices(input=Decimal(3), output=Decimal(15))
    adapter = model(url, prices=prices)
    assert isinstance(adapter, StreamingModel)
    got = await chunks_of(adapter, asking())
    assert [chunk.text for chunk in got] == ["Sunny ", "in Oslo.", ""]
    final = got[-1].reply
    assert final is not None
    assert (final.text, final.finish_reason, final.tool_calls) == ("Sunny in Oslo.", "stop", ())
    assert (final.usage.input_tokens, final.usage.output_tokens) == (25, 12)
    assert final.usage.cost == Decimal("0.000255")
    (body,) = script.bodies
    assert body["stream"] is True
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}
    ]


async def test_every_streamed_tool_use_block_is_a_tool_request_with_its_exact_input(
    server: tuple[str, Script],
) -> None:
    """Two tool_use blocks after some text, their input in input_json_delta pieces: each
    is whole, with its id, and a price keeps every digit (137.30, not 137.3)."""
    url, script = server
    script.stream(events("tool_use"))
    got = await chunks_of(model(url), asking())
    assert [chunk.text for chunk in got] == ["Checking both.", ""]
    final = got[-1].reply
    assert final is not None
    assert final.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "lookup", '{"city":"Oslo"}'),
        ("toolu_01UjhE9rYQ3CpwhHWkyJWaxb", "book", '{"flight":"AF1","price":137.30}'),
    ]


async def test_max_tokens_is_the_guards_truncation(server: tuple[str, Script]) -> None:
    url, script = server
    script.stream(events("max_tokens"))
    final = (await chunks_of(model(url), asking()))[-1].reply
    assert final is not None
    assert final.finish_reason == "length"
    assert OutputGuard(Ticket).check(final) == Truncated(text='{"subject": "Refund for ord')


async def test_a_refusal_is_the_guards_refusal(server: tuple[str, Script]) -> None:
    url, script = server
    script.stream(events("refusal"))
    final = (await chunks_of(model(url), asking()))[-1].reply
    assert final is not None
    assert final.finish_reason == "refusal"
    assert OutputGuard(Ticket).check(final) == Refusal(
        text="I can't help with that.", finish_reason="refusal"
    )


async def test_a_tool_use_cut_at_max_tokens_fails_the_run_as_a_truncation(
    server: tuple[str, Script],
) -> None:
    """End to end: the cut input comes through as the text that arrived, the reply is
    length, and the run fails saying the call was cut off; the write never runs."""
    url, script = server
    script.stream(events("tool_use_cut"))
    agent = Agent[None](name="travel", tools=[lookup, book])
    runner = Runner(agent, model=model(url), gate=AutoDenyGate())
    async with runner.events(None, "Book AF1.") as seen:
        last = [event async for event in seen][-1]
    assert isinstance(last, RunFinished)
    assert last.result.history == ("Idle", "Planning", "Failed")
    assert getattr(last.result.final, "reason", "") == (
        "the model's tool call was cut off at the token limit (finish_reason length): "
        "book with arguments '{\"flight\": \"AF'; raise max_tokens in the model's settings"
    )


# --- failures --------------------------------------------------------------------------


async def test_an_overloaded_error_event_mid_stream_is_the_model_unavailable(
    server: tuple[str, Script],
) -> None:
    """The API's error event after some text ends the stream with ModelUnavailableError
    (a failure that may pass), after the text that came before it."""
    url, script = server
    script.stream(events("overloaded"))
    seen: list[str] = []

    async def read() -> None:
        async for chunk in model(url).stream(asking()):
            seen.append(chunk.text)

    with pytest.raises(
        ModelUnavailableError, match="the stream broke off with an error: Overloaded"
    ):
        await read()
    assert seen == ["Sunny"]


async def test_an_error_event_that_will_not_pass_is_a_refused_request(
    server: tuple[str, Script],
) -> None:
    url, script = server
    refused = (
        'event: error\ndata: {"type": "error", "error": {"type": "invalid_request_error", '
        '"message": "tools.0: bad schema"}}\n\n'
    )
    script.stream([*events("text")[:1], refused])
    with pytest.raises(ModelRequestError, match=r"tools\.0: bad schema"):
        await chunks_of(model(url), asking())


async def test_a_stream_cut_off_before_message_stop_is_the_model_unavailable(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.stream(events("text")[:4])
    with pytest.raises(ModelUnavailableError, match="the stream ended before the answer did"):
        await chunks_of(model(url), asking())


@pytest.mark.parametrize(("status", "kind"), [(429, "rate_limit_error"), (529, "overloaded_error")])
async def test_a_429_or_529_before_the_stream_is_unavailable_with_its_wait(
    server: tuple[str, Script], status: int, kind: str
) -> None:
    """Refused before any event: the status, the server's words and its retry-after; one
    request (the SDK's retries are off)."""
    url, script = server
    script.error(status, kind, "Please slow down.", **{"retry-after": "4"})
    with pytest.raises(ModelUnavailableError, match="Please slow down") as raised:
        await chunks_of(model(url), asking())
    assert (raised.value.status, raised.value.retry_after) == (status, 4.0)
    assert len(script.bodies) == 1


async def test_a_400_before_the_stream_is_a_refused_request(server: tuple[str, Script]) -> None:
    url, script = server
    script.error(400, "invalid_request_error", "max_tokens: must be at most 64000")
    with pytest.raises(ModelRequestError, match="must be at most 64000") as raised:
        await chunks_of(model(url), asking())
    assert raised.value.status == 400


async def test_an_event_that_is_not_json_is_a_model_response_error(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.stream([*events("text")[:2], "event: content_block_delta\ndata: {not json\n\n"])
    with pytest.raises(ModelResponseError, match="an event's data is not JSON"):
        await chunks_of(model(url), asking())


async def test_a_stream_that_stalls_is_cut_at_the_models_time_limit(
    server: tuple[str, Script],
) -> None:
    """The adapter's ``timeout`` bounds the whole stream: a server that stops writing
    after the first delta is cut off (TimeoutError naming the limit)."""
    url, script = server
    script.stream([*events("text")[:4], 3.0, *events("text")[4:]])
    seen: list[str] = []
    started = time.monotonic()

    async def read() -> None:
        async for chunk in model(url, timeout=0.3).stream(asking()):
            seen.append(chunk.text)

    with pytest.raises(TimeoutError, match=r"did not answer within 0\.30s"):
        await read()
    assert seen == ["Sunny "]
    assert time.monotonic() - started < 2


async def test_a_reader_that_stops_closes_the_stream_at_once(server: tuple[str, Script]) -> None:
    """Closing the stream after the first delta (a run cancelled) does not wait for the
    server to finish writing."""
    url, script = server
    script.stream([*events("text")[:4], 3.0, *events("text")[4:]])
    started = time.monotonic()
    async with aclosing(model(url, timeout=10).stream(asking())) as chunks:
        async for chunk in chunks:
            assert chunk.text == "Sunny "
            break
    assert time.monotonic() - started < 2


# --- a run -----------------------------------------------------------------------------


async def test_a_run_streams_an_anthropic_models_text_as_events(
    server: tuple[str, Script],
) -> None:
    """End to end: Runner.events shows the text as it came, and the run's answer is the
    reply the stream made up."""
    url, script = server
    script.stream(events("text"))
    runner = Runner(Agent[None](name="travel"), model=model(url), gate=AutoDenyGate())
    async with runner.events(None, "Weather in Oslo?") as seen:
        got = [event async for event in seen]
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["Sunny ", "in Oslo."]
    finished = got[-1]
    assert isinstance(finished, RunFinished)
    assert finished.result.ok
    assert getattr(finished.result.final, "answer", None) == "Sunny in Oslo."


@pytest.mark.parametrize(
    "parts",
    [
        # A delta for a content block that was never started.
        [
            *events("text")[:1],
            'event: content_block_delta\ndata: {"type":"content_block_delta","index":3,'
            '"delta":{"type":"text_delta","text":"x"}}\n\n',
        ],
        # A message_stop with no message_start before it.
        ['event: message_stop\ndata: {"type":"message_stop"}\n\n'],
    ],
)
async def test_events_that_make_no_message_are_a_model_response_error(
    server: tuple[str, Script], parts: list[str | float]
) -> None:
    url, script = server
    script.stream(parts)
    with pytest.raises(ModelResponseError, match="not a Messages API message"):
        await chunks_of(model(url), asking())
