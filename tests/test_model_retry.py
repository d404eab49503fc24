"""Model-call failures are transitions: a real HTTP server on the loopback answers with
each failure class, and the run's phases, the requests sent, the time waited (an
injected clock) and the budget charged are asserted for each."""

from __future__ import annotations

import http.server
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    Done,
    Failed,
    ModelRetriesExhaustedError,
    ModelRetrying,
    OutputGuard,
    Runner,
)
from statemachine.models import OpenAICompatibleModel, TokenPrices
from statemachine.persist import MemoryCheckpointer
from statemachine.persist._lifecycle import RunStatus
from statemachine.testing import AutoDenyGate

pytestmark = pytest.mark.anyio

ANSWER = {
    "choices": [{"message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
}
# $1 per thousand input tokens, $2 per thousand output tokens: the answer costs $0.02.
PRICES = TokenPrices(input=Decimal("1"), output=Decimal("2"), per=1_000)
ANSWERED = ("Idle", "Planning", "Responding", "Done")


class Service:
    """A chat-completions server on 127.0.0.1 that answers from a script, one step a request.

    A step is ``"ok"`` (the answer), ``("answer", text)`` (an answer with that text), an
    HTTP status with optional headers, ``"reset"`` (the connection is reset before any
    answer), or ``("hang", seconds)`` (no answer for that long, then the answer).
    """

    def __init__(self) -> None:
        self.script: list[Any] = []
        self.requests = 0
        self.lock = threading.Lock()
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with service.lock:
                    service.requests += 1
                    step = service.script.pop(0) if service.script else "ok"
                service.answer(self, step)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, handler: http.server.BaseHTTPRequestHandler, step: Any) -> None:
        if step == "reset":
            # SO_LINGER 0: close() sends a TCP reset, not an orderly end.
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.connection.close()
            handler.close_connection = True
            return
        if isinstance(step, tuple) and step[0] == "hang":
            time.sleep(step[1])
            step = "ok"
        if isinstance(step, tuple) and step[0] == "answer":  # this text, not the usual
            content = step[1]
            step = "ok"
        else:
            content = "Hello."
        status, headers = (200, {}) if step == "ok" else (step[0], step[1])
        message = {"role": "assistant", "content": content}
        answer = {**ANSWER, "choices": [{"message": message, "finish_reason": "stop"}]}
        body = answer if status == 200 else {"error": {"message": f"service said {status}"}}
        content = json.dumps(body).encode()
        try:
            handler.send_response(status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(content)))
            handler.end_headers()
            handler.wfile.write(content)
        except OSError:  # the client gave up (its own time limit) and closed
            pass


@pytest.fixture
def service() -> Iterator[Service]:
    running = Service()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


class Clock:
    """The run's clock: it moves only when the run sleeps, and it records every sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def runner(
    service: Service,
    clock: Clock,
    *,
    budget: Budget | None = None,
    timeout: float = 5.0,
    checkpointer: MemoryCheckpointer | None = None,
) -> Runner[None]:
    agent = Agent[None](name="retrier", budget=budget or Budget())
    model = OpenAICompatibleModel(service.url, "m", timeout=timeout, prices=PRICES)
    return Runner(
        agent,
        model=model,
        gate=AutoDenyGate(),
        clock=clock,
        sleep=clock.sleep,
        seed=20,
        checkpointer=checkpointer,
    )


def retried(times: int) -> tuple[str, ...]:
    """The path of a run whose model call failed ``times`` times, then answered."""
    return ("Idle", *("Planning", "ModelRetrying") * times, "Planning", "Responding", "Done")


def within_backoff(waits: list[float]) -> bool:
    """Whether each wait is the default policy's after its attempt: 1s, 2s, 4s, jittered
    down to half."""
    return all(2 ** (n - 1) * 0.5 <= wait <= 2 ** (n - 1) for n, wait in enumerate(waits, 1))


async def test_a_503_without_retry_after_is_asked_again_after_the_backoff(
    service: Service,
) -> None:
    """One 503, then the answer: one backoff, two requests, two model calls charged."""
    service.script = [(503, {})]
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert isinstance(result.final, Done)
    assert result.history == retried(1)
    assert service.requests == 2
    assert len(clock.waits) == 1
    assert within_backoff(clock.waits)
    spent = result.final.spent
    assert (spent.model_calls, spent.tokens, spent.cost) == (2, 15, Decimal("0.02"))


async def test_a_503_with_retry_after_waits_what_the_service_asked(service: Service) -> None:
    """``Retry-After: 7`` is longer than the backoff: the run waits exactly 7s."""
    service.script = [(503, {"retry-after": "7"})]
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert result.history == retried(1)
    assert (service.requests, clock.waits) == (2, [7.0])
    assert result.final.spent.model_calls == 2


async def test_429s_with_retry_after_wait_the_longer_of_it_and_the_backoff(
    service: Service,
) -> None:
    """Two 429s asking 1.5s: the first wait is the service's, the second the backoff's
    when that is longer (after attempt 2 it is 1s to 2s)."""
    service.script = [(429, {"retry-after": "1.5"}), (429, {"retry-after": "1.5"})]
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert result.history == retried(2)
    assert service.requests == 3
    assert clock.waits[0] == 1.5
    assert 1.5 <= clock.waits[1] <= 2.0
    assert result.final.spent.model_calls == 3


async def test_429s_without_retry_after_back_off_exponentially(service: Service) -> None:
    """Three 429s, then the answer: waits of about 1s, 2s and 4s, four requests."""
    service.script = [(429, {})] * 3
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert result.history == retried(3)
    assert service.requests == 4
    assert len(clock.waits) == 3
    assert within_backoff(clock.waits)
    assert clock.now == sum(clock.waits)
    spent = result.final.spent
    assert (spent.model_calls, spent.tokens, spent.cost) == (4, 15, Decimal("0.02"))


async def test_a_408_is_asked_again(service: Service) -> None:
    """A request timeout (408) may pass: it is retried like a 5xx."""
    service.script = [(408, {})]
    result = await runner(service, Clock()).run(None, "Hi.")
    assert result.history == retried(1)
    assert service.requests == 2


async def test_500s_to_the_cap_leave_the_run_failed_resumable_and_a_resume_finishes_it(
    service: Service,
) -> None:
    """Four 500s: three waits, then ModelRetriesExhaustedError; the run is saved
    failed_resumable at ModelRetrying, listed as needing attention, and a resume once
    the service is back starts a fresh round and answers."""
    service.script = [(500, {})] * 4
    clock = Clock()
    store = MemoryCheckpointer()
    durable = runner(service, clock, checkpointer=store)
    with pytest.raises(ModelRetriesExhaustedError) as raised:
        await durable.run(None, "Hi.", run_id="r1")
    assert (raised.value.attempts, raised.value.cap) == (4, 4)
    assert "HTTP 500: service said 500" in raised.value.error
    assert service.requests == 4
    assert len(clock.waits) == 3
    assert within_backoff(clock.waits)
    record = await store.record("r1")
    assert (record.status, record.phase) == (RunStatus.FAILED_RESUMABLE, "ModelRetrying")
    assert [row.run_id for row in await store.needing_attention()] == ["r1"]

    result = await durable.resume("r1")
    assert isinstance(result.final, Done)
    assert result.history == ("ModelRetrying", "Planning", "Responding", "Done")
    assert service.requests == 5
    assert len(clock.waits) == 4
    assert within_backoff(clock.waits[3:])
    spent = result.final.spent
    assert (spent.model_calls, spent.tokens, spent.cost) == (5, 15, Decimal("0.02"))
    assert (await store.record("r1")).status is RunStatus.COMPLETED


async def test_a_retry_after_longer_than_the_cap_is_not_waited_here(service: Service) -> None:
    """``Retry-After: 120`` is more than the policy's 30s: no wait, no second request; the
    run is left to resume later, and the error says what the service asked."""
    service.script = [(503, {"retry-after": "120"})]
    clock = Clock()
    with pytest.raises(ModelRetriesExhaustedError) as raised:
        await runner(service, clock).run(None, "Hi.")
    assert raised.value.asked == 120.0
    assert str(raised.value).startswith(
        "the model's service asked to wait 120s, longer than the retry policy waits "
        "(after 1 attempt(s)); last error: "
    )
    assert (service.requests, clock.waits) == (1, [])


async def test_the_models_own_timeout_is_asked_again(service: Service) -> None:
    """The server does not answer within the adapter's 0.3s: the request is cancelled and
    sent again, which the server answers."""
    service.script = [("hang", 1.0)]
    clock = Clock()
    seen: list[Any] = []
    result = await Runner(
        Agent[None](name="retrier"),
        model=OpenAICompatibleModel(service.url, "m", timeout=0.3, prices=PRICES),
        gate=AutoDenyGate(),
        clock=clock,
        sleep=clock.sleep,
        seed=20,
        on_transition=lambda before, after: seen.append(after),
    ).run(None, "Hi.")
    assert result.history == retried(1)
    assert service.requests == 2
    assert len(clock.waits) == 1
    assert within_backoff(clock.waits)
    retrying = next(phase for phase in seen if isinstance(phase, ModelRetrying))
    assert retrying.error.startswith("the model did not answer within its own time limit")
    assert result.final.spent.model_calls == 2


async def test_a_connection_reset_is_asked_again(service: Service) -> None:
    """The connection is reset before any answer: no status, asked again."""
    service.script = ["reset"]
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert result.history == retried(1)
    assert service.requests == 2
    assert len(clock.waits) == 1


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (400, "Fix the request"),
        (401, "Check the API key"),
        (404, "Check base_url"),
    ],
)
async def test_a_refused_request_is_not_retried_and_says_what_to_fix(
    service: Service, status: int, advice: str
) -> None:
    """400, 401, 404: the same request would fail again; Failed at once, with the fix."""
    service.script = [(status, {})]
    clock = Clock()
    result = await runner(service, clock).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    assert result.history == ("Idle", "Planning", "Failed")
    assert (service.requests, clock.waits) == (1, [])
    assert result.final.reason.startswith(
        "the model could not be asked, and asking again would fail the same way (not "
        f"retried): the model at {service.url}/chat/completions refused the request with "
        f"HTTP {status}: service said {status}."
    )
    assert advice in result.final.reason
    assert result.final.spent.model_calls == 1


async def test_a_wait_past_the_deadline_fails_the_run_instead(service: Service) -> None:
    """``Retry-After: 10`` with 5s of wall clock: the run fails now, without waiting."""
    service.script = [(503, {"retry-after": "10"})]
    clock = Clock()
    result = await runner(service, clock, budget=Budget(wall_clock=5)).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    assert result.history == ("Idle", "Planning", "ModelRetrying", "Failed")
    assert result.final.reason.startswith(
        "wall-clock budget: 5.00s left, not enough to wait 10.00s and ask the model again; "
        "last error: the model at "
    )
    assert (service.requests, clock.waits) == (1, [])


async def test_the_time_each_wait_used_counts_against_the_deadline(service: Service) -> None:
    """Two 503s asking 2s, 3s of wall clock: the first wait fits, the second no longer
    does; the time waited is the run's, and each attempt is one model call charged."""
    service.script = [(503, {"retry-after": "2"})] * 2
    clock = Clock()
    result = await runner(service, clock, budget=Budget(wall_clock=3)).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    assert result.history == (
        "Idle",
        "Planning",
        "ModelRetrying",
        "Planning",
        "ModelRetrying",
        "Failed",
    )
    assert result.final.reason.startswith(
        "wall-clock budget: 1.00s left, not enough to wait 2.00s and ask the model again"
    )
    assert (service.requests, clock.waits) == (2, [2.0])
    assert result.final.spent.model_calls == 2


class Note(BaseModel, frozen=True):
    """An answer the output guard holds the model to."""

    subject: str


def guarded(service: Service, clock: Clock, guard: OutputGuard[Note] | None) -> Runner[None]:
    agent = Agent[None](name="retrier", answer_guard=guard)
    model = OpenAICompatibleModel(service.url, "m", timeout=5.0, prices=PRICES)
    return Runner(agent, model=model, gate=AutoDenyGate(), clock=clock, sleep=clock.sleep, seed=20)


async def test_a_503_while_the_output_guard_asks_again_goes_through_model_retrying(
    service: Service,
) -> None:
    """The first answer is not the guard's schema; the guard's request for a better one
    meets a 503: the run goes to ModelRetrying (not Failed), waits the backoff, and the
    model, asked afresh, answers. Three requests, three model calls charged."""
    service.script = [("answer", "no JSON here"), (503, {}), ("answer", '{"subject": "Hi"}')]
    clock = Clock()
    result = await guarded(service, clock, OutputGuard(Note)).run(None, "Hi.")
    assert isinstance(result.final, Done)
    assert result.history == ("Idle", "Planning", "ModelRetrying", "Planning", "Responding", "Done")
    assert Note.model_validate_json(result.final.answer) == Note(subject="Hi")
    assert service.requests == 3
    assert len(clock.waits) == 1
    assert within_backoff(clock.waits)
    spent = result.final.spent
    assert (spent.model_calls, spent.tokens, spent.cost) == (3, 30, Decimal("0.04"))


async def test_a_503_while_a_plain_answer_is_asked_again_goes_through_model_retrying(
    service: Service,
) -> None:
    """No guard of the agent's: an empty answer is asked for again; that request meets a
    503, and the run retries the model instead of failing."""
    service.script = [("answer", ""), (503, {"retry-after": "3"})]
    clock = Clock()
    result = await guarded(service, clock, None).run(None, "Hi.")
    assert isinstance(result.final, Done)
    assert result.history == ("Idle", "Planning", "ModelRetrying", "Planning", "Responding", "Done")
    assert result.final.answer == "Hello."
    assert (service.requests, clock.waits) == (3, [3.0])
    assert result.final.spent.model_calls == 3


async def test_a_refused_request_while_the_guard_asks_again_still_fails(
    service: Service,
) -> None:
    """A 400 on the guard's request is permanent: Failed, as before, not retried."""
    service.script = [("answer", "no JSON here"), (400, {})]
    clock = Clock()
    result = await guarded(service, clock, OutputGuard(Note)).run(None, "Hi.")
    assert isinstance(result.final, Failed)
    assert result.history == ("Idle", "Planning", "Failed")
    assert "refused the request with HTTP 400" in result.final.reason
    assert (service.requests, clock.waits) == (2, [])
