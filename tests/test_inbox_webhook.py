"""The webhook against a real loopback receiver: each run that starts waiting for a person is
announced once, signed with HMAC; a 500 is retried with back-off; and a receiver that is
down has no effect on the run, which waits, is approved and pays as it would without it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from inbox_support import WEBHOOK_VAR, Receiver, waiting_refund, write_config

from agents.support import PaymentsService, worker_runner
from statemachine import Approve, RunStatus, SQLiteCheckpointer, dump_decision
from statemachine.inbox import SIGNATURE_HEADER, WaitingNotifier, load_config, verify

pytestmark = pytest.mark.anyio


@pytest.fixture
def closed_port() -> str:
    """An address on loopback where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


async def _until(condition: Any, what: str) -> None:
    """Wait (20 s at most) until ``condition()`` holds: the notifier is another task."""
    with anyio.move_on_after(20):
        for _ in range(1000):
            if condition():
                break
            await anyio.sleep(0.02)
    assert condition(), what


async def test_a_waiting_run_is_announced_once_signed(tmp_path: Path) -> None:
    secret = os.environ[WEBHOOK_VAR].encode()
    with Receiver([]) as receiver:
        config = load_config(write_config(tmp_path, webhook=receiver.url))
        assert config.webhook is not None
        async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
            with PaymentsService(tmp_path / "payments.sqlite3") as payments:
                notifier = WaitingNotifier(store, config.webhook, link=config.link)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(notifier.run)
                    run_id = await waiting_refund(store, payments)
                    await _until(lambda: notifier.delivered, "announced")
                    await anyio.sleep(0.3)  # more polls: still one announcement
                    tasks.cancel_scope.cancel()
    assert len(receiver.received) == 1
    headers, body = receiver.received[0]
    # The signature, recomputed here from the key and the body as a receiver would.
    stamp, digest = (part.split("=", 1)[1] for part in headers[SIGNATURE_HEADER.lower()].split(","))
    expected = hmac.new(secret, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(digest, expected)
    assert verify(secret, body, headers[SIGNATURE_HEADER.lower()])
    assert not verify(b"another key, not the inbox's own", body, headers[SIGNATURE_HEADER.lower()])
    assert not verify(secret, body.replace(b"87.77", b"8.77"), headers[SIGNATURE_HEADER.lower()])
    payload = json.loads(body)
    assert payload == {
        "event": f"{run_id}:{payload['event'].split(':')[1]}",
        "run_id": run_id,
        "agent": "support",
        "status": "interrupted",
        "waiting_for": "approval of refund",
        "tool": "refund",
        "amount": "87.77",
        "link": f"http://inbox.test/runs/{run_id}",
    }
    assert headers["x-statemachine-event"] == payload["event"]


async def test_a_500_is_retried_with_back_off_until_delivered(tmp_path: Path) -> None:
    with Receiver([500, 500]) as receiver:
        config = load_config(write_config(tmp_path, webhook=receiver.url))
        assert config.webhook is not None
        async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
            with PaymentsService(tmp_path / "payments.sqlite3") as payments:
                slept: list[float] = []

                async def sleep(seconds: float) -> None:
                    slept.append(seconds)
                    await anyio.sleep(seconds)

                notifier = WaitingNotifier(store, config.webhook, link=config.link, sleep=sleep)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(notifier.run)
                    await waiting_refund(store, payments)
                    await _until(lambda: notifier.delivered, "delivered at the third try")
                    tasks.cancel_scope.cancel()
    bodies = [body for _, body in receiver.received]
    assert len(bodies) == 3
    assert len(set(bodies)) == 1  # the same announcement, tried again
    assert notifier.failed == []
    assert slept == [0.05, 0.1]  # backoff_seconds, then doubled


async def test_a_receiver_that_is_down_has_no_effect_on_the_run(
    tmp_path: Path, closed_port: str
) -> None:
    """With the receiver down, the run waits, is approved and pays once, as it would without."""
    config = load_config(write_config(tmp_path, webhook=closed_port))
    assert config.webhook is not None
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        with PaymentsService(tmp_path / "payments.sqlite3") as payments:
            notifier = WaitingNotifier(store, config.webhook, link=config.link)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(notifier.run)
                run_id = await waiting_refund(store, payments)
                await _until(lambda: notifier.tries, "a first try, which finds no one")
                record = await store.record(run_id)
                assert (record.status, record.waiting_for) == (
                    RunStatus.INTERRUPTED,
                    "approval of refund",
                )
                _, document = await store.load(run_id)
                call = document["fields"]["call"]
                approval = Approve(
                    by="ana",
                    run_id=run_id,
                    call_id=document["fields"]["call_id"],
                    tool="refund",
                    args_hash=call["args_hash"],
                )
                await store.submit_decision(run_id, dump_decision(approval))
                result = await worker_runner(store, payments=payments).resume(run_id)
                assert result.status == "done"
                await _until(lambda: notifier.failed, "given up after every attempt")
                tasks.cancel_scope.cancel()
            assert payments.count() == 1
            assert (await store.record(run_id)).status == RunStatus.COMPLETED
    assert notifier.delivered == []
    assert len(notifier.tries) == 4  # every attempt made, none of them in the run's way
