"""Shared by the inbox's tests: operators and their configuration, a waiting refund, log-in."""

from __future__ import annotations

import os
import re
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from agents.support import (
    WORKER_ORDERS,
    DeskModel,
    Order,
    PaymentsService,
    SupportContext,
    worker_runner,
)
from statemachine import Checkpointer, Runner
from statemachine.inbox import hash_secret

SECRET_VAR: Final = "STATEMACHINE_INBOX_TEST_SECRET"
WEBHOOK_VAR: Final = "STATEMACHINE_INBOX_TEST_WEBHOOK"
os.environ.setdefault(SECRET_VAR, "a-session-key-for-the-inbox-tests")
os.environ.setdefault(WEBHOOK_VAR, "a-webhook-key-for-the-inbox-tests")
PASSWORDS: Final = {"ana": "ana-password-1", "bo": "bo-password-22", "vic": "vic-password-333"}
ASK: Final = "Order 2077 never arrived. My code is 4417. Refund it, please."
AMOUNT: Final = Decimal("87.77")  # order 2077's price: above the policy's $50, so a person decides
_HASHES: dict[str, str] = {}


def write_config(directory: Path, *, webhook: str = "", extra: str = "") -> Path:
    """An inbox configuration: ana decides anything, bo up to $50.00, vic only views."""
    if not _HASHES:
        _HASHES.update({name: hash_secret(secret) for name, secret in PASSWORDS.items()})
    text = f"""
[inbox]
secret_env = "{SECRET_VAR}"
audit_log = "audit.jsonl"
base_url = "http://inbox.test"
{extra}

[[operators]]
name = "ana"
role = "decide"
password_hash = "{_HASHES["ana"]}"

[[operators]]
name = "bo"
role = "decide"
up_to = "50.00"
password_hash = "{_HASHES["bo"]}"

[[operators]]
name = "vic"
role = "view"
token_hash = "{_HASHES["vic"]}"
"""
    if webhook:
        text += f"""
[webhook]
url = "{webhook}"
secret_env = "{WEBHOOK_VAR}"
attempts = 4
backoff_seconds = 0.05
poll_seconds = 0.05
"""
    path = directory / "inbox.toml"
    path.write_text(text)
    return path


async def waiting_refund(
    store: Checkpointer, payments: PaymentsService, ask: str = ASK, **runner: Any
) -> str:
    """A support run that asked for a refund of order 2077 and waits for a person: its id."""
    make = worker_runner(store, payments=payments, **runner)
    run_id = await make.submit(SupportContext(customer_id="C-17"), ask)
    result = await make.resume(run_id)
    assert result.status == "paused"
    return run_id


def hostile_runner(
    store: Checkpointer, payments: PaymentsService, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> Runner[Any]:
    """A support runner whose model writes ``hostile`` as the text of every reply, and whose
    order book names order 2077's item ``hostile`` (so a tool's answer carries it too)."""

    class HostileModel(DeskModel):
        async def complete(self, request: Any) -> Any:
            reply = await super().complete(request)
            return reply.model_copy(update={"text": hostile})

    monkeypatch.setitem(WORKER_ORDERS, 2077, Order(2077, "C-17", hostile, AMOUNT))
    return worker_runner(store, payments=payments, model=HostileModel())


class Receiver:
    """A loopback HTTP server that records every POST and answers with the next status."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def __enter__(self) -> Receiver:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no CSRF token in the page"
    return found[1]


async def log_in(client: httpx.AsyncClient, name: str) -> str:
    """Log ``name`` in; the session's CSRF token."""
    page = await client.get("/login")
    answer = await client.post(
        "/login", data={"csrf": csrf_of(page.text), "name": name, "password": PASSWORDS[name]}
    )
    assert answer.status_code == 303, answer.text
    return csrf_of((await client.get("/")).text)
