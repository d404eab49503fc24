"""statemachine.models._openai: ``stream`` over server-sent events, against a loopback server.

The server is a real ``http.server`` on 127.0.0.1 in a thread, writing the event stream
an OpenAI-compatible server writes, so the adapter's HTTP and SSE reading are tested as
they run, not through a mock transport.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from statemachine import (
    Agent,
    Message,
    ModelChunk,
    ModelReply,
    ModelRequest,
    ModelResponseError,
    ModelUnavailableError,
    OpenAICompatibleModel,
    RunFinished,
    Runner,
    StreamingModel,
    TextDelta,
    TokenPrices,
)
from statemachine.testing import AutoDenyGate

pytestmark = pytest.mark.anyio


class Script:
    """What the loopback server answers next, and the bodies it was sent."""

    def __init__(self) -> None:
        # (status, content type, parts): a part is text written at once, or seconds to wait.
        self.answers: list[tuple[int, str, list[str | float]]] = []
        self.bodies: list[dict[str, Any]] = []


def event_stream(*chunks: dict[str, Any] | str, done: bool = True) -> list[str | float]:
    """The lines of an event stream: each chunk as ``data:`` (a string starting with
    ``:`` as the comment it is), then ``[DONE]``."""
    lines: list[str | float] = [
        f"{c}\n\n" if isinstance(c, str) and c.startswith(":") else f"data: {_text(c)}\n\n"
        for c in chunks
    ]
    return [*lines, "data: [DONE]\n\n"] if done else lines


def _text(chunk: dict[str, Any] | str) -> str:
    return chunk if isinstance(chunk, str) else json.dumps(chunk)


def delta(**fields: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": fields}]}


def finish(reason: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["content-length"])
            script.bodies.append(json.loads(self.rfile.read(length)))
            status, kind, parts = script.answers.pop(0)
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("connection", "close")
            self.end_headers()
            for part in parts:  # one write each, flushed: the client sees them one by one
                if isinstance(part, float):
                    time.sleep(part)
                    continue
                self.wfile.write(part.encode())
                self.wfile.flush()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    finally:
        httpd.shutdown()
        httpd.server_close()


def asking(text: str = "Weather in Oslo?", **fields: Any) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),), **fields)


async def chunks_of(model: OpenAICompatibleModel, request: ModelRequest) -> list[ModelChunk]:
    return [chunk async for chunk in model.stream(request)]


async def test_text_streams_as_deltas_and_the_reply_has_the_whole_text_and_usage(
    server: tuple[str, Script],
) -> None:
    """Each content delta is a chunk as it comes; the last carries the reply, with the
    usage of the server's usage-only chunk priced; the request asked for a stream."""
    url, script = server
    usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4}}
    lines = event_stream(
        delta(role="assistant", content=""),
        delta(content="Sunny "),
        ": a comment the client skips",
        delta(content="in Oslo."),
        finish("stop"),
        usage,
    )
    script.answers.append((200, "text/event-stream", lines))
    prices = TokenPrices(input=Decimal(1), output=Decimal(2))
    model = OpenAICompatibleModel(url, "m", api_key="k", prices=prices)
    assert isinstance(model, StreamingModel)
    got = await chunks_of(model, asking())
    assert [chunk.text for chunk in got] == ["Sunny ", "in Oslo.", ""]
    final = got[-1].reply
    assert final is not None
    assert (final.text, final.finish_reason, final.tool_calls) == ("Sunny in Oslo.", "stop", ())
    assert (final.usage.input_tokens, final.usage.output_tokens) == (10, 4)
    assert final.usage.cost == Decimal("0.000018")
    (body,) = script.bodies
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "Weather in Oslo?"}]


async def test_tool_call_deltas_are_put_together_by_index(server: tuple[str, Script]) -> None:
    """Two tool calls streamed in pieces, interleaved: each is whole, in index order."""
    url, script = server

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return delta(tool_calls=[{"index": index, **fields}])

    lines = event_stream(
        call(0, id="call_a", type="function", function={"name": "weather", "arguments": ""}),
        call(0, function={"arguments": '{"city": '}),
        call(1, id="call_b", type="function", function={"name": "weather", "arguments": '{"ci'}),
        call(0, function={"arguments": '"Oslo"}'}),
        call(1, function={"arguments": 'ty": "Bergen"}'}),
        finish("tool_calls"),
    )
    script.answers.append((200, "text/event-stream", lines))
    model = OpenAICompatibleModel(url, "m", api_key="k")
    got = await chunks_of(model, asking())
    assert [chunk.text for chunk in got] == [""]
    final = got[-1].reply
    assert final is not None
    assert final.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("call_a", "weather", '{"city": "Oslo"}'),
        ("call_b", "weather", '{"city": "Bergen"}'),
    ]


async def test_an_error_event_mid_stream_is_the_model_unavailable(
    server: tuple[str, Script],
) -> None:
    """An error the server sends after some text ends the stream with ModelUnavailableError
    (a failure that may pass), after the text that came before it."""
    url, script = server
    lines = event_stream(
        delta(content="Sunny"),
        {"error": {"message": "the server is overloaded", "type": "server_error"}},
        done=False,
    )
    script.answers.append((200, "text/event-stream", lines))
    model = OpenAICompatibleModel(url, "m", api_key="k")
    seen: list[str] = []

    async def read() -> None:
        async for chunk in model.stream(asking()):
            seen.append(chunk.text)

    with pytest.raises(ModelUnavailableError, match="the server is overloaded") as caught:
        await read()
    assert seen == ["Sunny"]
    assert caught.value.retryable is True


async def test_a_stream_cut_off_before_the_answer_ends_is_the_model_unavailable(
    server: tuple[str, Script],
) -> None:
    """A connection closed with neither a finish reason nor [DONE] is no reply."""
    url, script = server
    script.answers.append(
        (200, "text/event-stream", event_stream(delta(content="Sun"), done=False))
    )
    model = OpenAICompatibleModel(url, "m", api_key="k")
    with pytest.raises(ModelUnavailableError, match="the stream ended before the answer did"):
        await chunks_of(model, asking())


async def test_a_stream_that_stalls_is_cut_at_the_models_time_limit(
    server: tuple[str, Script],
) -> None:
    """The adapter's ``timeout`` bounds the whole stream, not each read: a server that
    stops writing after the first delta is cut off (TimeoutError naming the limit)."""
    url, script = server
    script.answers.append(
        (200, "text/event-stream", [*event_stream(delta(content="Sun"))[:1], 3.0])
    )
    model = OpenAICompatibleModel(url, "m", api_key="k", timeout=0.3)
    seen: list[str] = []
    started = time.monotonic()

    async def read() -> None:
        async for chunk in model.stream(asking()):
            seen.append(chunk.text)

    with pytest.raises(TimeoutError, match=r"did not answer within 0\.30s"):
        await read()
    assert seen == ["Sun"]
    assert time.monotonic() - started < 2


async def test_an_event_that_is_not_json_is_a_model_response_error(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.answers.append((200, "text/event-stream", event_stream("{not json")))
    model = OpenAICompatibleModel(url, "m", api_key="k")
    with pytest.raises(ModelResponseError, match="an event's data is not JSON"):
        await chunks_of(model, asking())


async def test_an_http_error_and_a_plain_completion_are_read_as_complete_reads_them(
    server: tuple[str, Script],
) -> None:
    """A 503 before any event is ModelUnavailableError with its status; a server that
    ignores ``stream`` and answers one JSON completion gives one chunk with the reply."""
    url, script = server
    error = json.dumps({"error": {"message": "overloaded"}})
    script.answers.append((503, "application/json", [error]))
    completion = {"choices": [{"message": {"content": "Sunny."}, "finish_reason": "stop"}]}
    script.answers.append((200, "application/json", [json.dumps(completion)]))
    model = OpenAICompatibleModel(url, "m", api_key="k")
    with pytest.raises(ModelUnavailableError, match="HTTP 503: overloaded"):
        await chunks_of(model, asking())
    (only,) = await chunks_of(model, asking())
    assert only == ModelChunk(text="Sunny.", reply=ModelReply(text="Sunny."))


async def test_a_run_streams_an_openai_models_text_as_events(server: tuple[str, Script]) -> None:
    """End to end: Runner.events over a loopback server shows the text as it came, and
    the run's answer is the reply the stream made up."""
    url, script = server
    lines = event_stream(delta(content="Sunny "), delta(content="in Oslo."), finish("stop"))
    script.answers.append((200, "text/event-stream", lines))
    model = OpenAICompatibleModel(url, "m", api_key="k")
    runner = Runner(Agent[None](name="travel"), model=model, gate=AutoDenyGate())
    async with runner.events(None, "Weather in Oslo?") as events:
        seen = [event async for event in events]
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["Sunny ", "in Oslo."]
    finished = seen[-1]
    assert isinstance(finished, RunFinished)
    assert finished.result.ok
    assert finished.result.final.answer == "Sunny in Oslo."


async def test_a_reader_that_stops_closes_the_stream_at_once(server: tuple[str, Script]) -> None:
    """Closing the stream after the first delta (a run cancelled) does not wait for the
    server to finish writing: the response is closed with the generator."""
    url, script = server
    script.answers.append(
        (200, "text/event-stream", [*event_stream(delta(content="Sun"))[:1], 3.0])
    )
    model = OpenAICompatibleModel(url, "m", api_key="k", timeout=10)
    started = time.monotonic()
    async with aclosing(model.stream(asking())) as chunks:
        async for chunk in chunks:
            assert chunk.text == "Sun"
            break
    assert time.monotonic() - started < 2


async def test_chunks_without_an_index_or_a_delta_are_read_as_zero_and_empty(
    server: tuple[str, Script],
) -> None:
    """Servers that leave out a choice's ``index``, a tool call's ``index`` or the last
    chunk's ``delta`` (only its finish reason) are read as OpenAI's would be."""
    url, script = server
    call = {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": ""}}
    lines = event_stream(
        {"choices": [{"delta": {"content": "Checking."}}]},
        {"choices": [{"delta": {"tool_calls": [call]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '{"city": "Oslo"}'}}]}}]},
        {"choices": [{"finish_reason": "tool_calls"}]},
        {"choices": None, "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
    )
    script.answers.append((200, "text/event-stream", lines))
    got = await chunks_of(OpenAICompatibleModel(url, "m", api_key="k"), asking())
    assert [chunk.text for chunk in got] == ["Checking.", ""]
    final = got[-1].reply
    assert final is not None
    assert (final.text, final.finish_reason) == ("Checking.", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in final.tool_calls] == [
        ("call_a", "weather", '{"city": "Oslo"}')
    ]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 2)
