"""The inbox end to end in a real browser: Debian's chromium, headless, driven by Playwright.

The inbox (``statemachine inbox``) and a worker (``statemachine worker``) run as real
processes on one SQLite store. A support run waits for a person to approve an $87.77
refund: the operator logs in, opens the inbox, opens the run and approves; the worker
goes on with the run, which pays exactly once, and the run's page shows it completed
without being reloaded. Then a second run is denied and pays nothing. A screenshot of
each page is saved under tests/artifacts/inbox/ (git-ignored).

The system's chromium is used (``executable_path``): Playwright downloads no browser.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import anyio
import pytest
from inbox_support import PASSWORDS, WEBHOOK_VAR, Receiver, waiting_refund, write_config
from playwright.sync_api import Page, expect, sync_playwright

from agents.support import PaymentsService
from statemachine import RunStatus, SQLiteCheckpointer
from statemachine.inbox import SIGNATURE_HEADER, verify

CHROMIUM: Final = Path("/usr/bin/chromium")
ARTIFACTS: Final = Path(__file__).parent / "artifacts" / "inbox"
ROOT: Final = Path(__file__).parent.parent
ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DENY_ASK: Final = "Order 2078 never arrived. My code is 4417. Refund it, please."


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the inbox exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the inbox did not listen on port {port} within 60 s")


class Site:
    """The store, the inbox's address, and the two processes serving it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.db = directory / "runs.db"
        self.payments = directory / "payments.sqlite3"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runs: list[str] = []

    async def submit(self, ask: str) -> str:
        async with SQLiteCheckpointer(self.db) as store:
            with PaymentsService(self.payments) as payments:
                return await waiting_refund(store, payments, ask)

    async def status(self, run_id: str) -> RunStatus:
        async with SQLiteCheckpointer(self.db) as store:
            return (await store.record(run_id)).status

    def paid(self) -> list[str]:
        with PaymentsService(self.payments) as payments:
            return [str(receipt.amount) for receipt in payments.receipts()]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver([]) as listening:
        yield listening


@pytest.fixture
def site(tmp_path: Path, receiver: Receiver) -> Iterator[Site]:
    """Two waiting refunds, the inbox serving them (and announcing them to ``receiver``),
    and a worker going on with decided runs."""
    if not CHROMIUM.exists():
        pytest.fail("Debian's chromium is not installed: apt-get install -y chromium (.ci/run)")
    made = Site(tmp_path)
    made.runs = [anyio.run(made.submit, waiting_ask) for waiting_ask in _ASKS]
    config = write_config(tmp_path, webhook=receiver.url)
    env = {**os.environ, "SUPPORT_PAYMENTS_DB": str(made.payments)}
    command = [sys.executable, "-m", "statemachine"]
    store = ["--db", str(made.db)]
    serve = ["--config", str(config), "--agent", "agents.support", "--port", str(made.port)]
    inbox = subprocess.Popen(
        [*command, "inbox", *store, *serve],
        cwd=ROOT,
        env=env,
    )
    worker = subprocess.Popen(
        [*command, "worker", *store, "--agent", "agents.support", "--poll", "100ms"],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_for_port(made.port, inbox)
        yield made
    finally:
        for process in (inbox, worker):
            process.terminate()
        for process in (inbox, worker):
            process.wait(timeout=30)


_ASKS: Final = ("Order 2077 never arrived. My code is 4417. Refund it, please.", DENY_ASK)


# The README's two pictures (docs/inbox.png, docs/run.png) are these, cut to their top.
_TOP: Final = {"x": 0, "y": 0, "width": 1200}


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _log_in(page: Page, site: Site) -> None:
    page.goto(f"{site.url}/")
    expect(page).to_have_url(f"{site.url}/login")  # the inbox is not shown to the anonymous
    _shot(page, "1-login")
    page.fill("input[name=name]", "ana")
    page.fill("input[name=password]", PASSWORDS["ana"])
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{site.url}/")


def _decided_and_finished(page: Page, site: Site, run_id: str) -> None:
    """The run's page goes to completed by itself (a live update, not a reload)."""
    page.evaluate("window.notReloaded = true")
    expect(page.locator("#status")).to_have_text("completed", timeout=60_000)
    assert page.evaluate("window.notReloaded === true")
    # Playwright's sync API runs a loop in this thread: the store is read in another one.
    with ThreadPoolExecutor(1) as thread:
        assert thread.submit(anyio.run, site.status, run_id).result() == RunStatus.COMPLETED


def test_an_operator_approves_then_denies_in_a_real_browser(
    site: Site, receiver: Receiver, tmp_path: Path
) -> None:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    approved, denied = site.runs
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user data directory
            executable_path=str(CHROMIUM),
            headless=True,
            args=ARGS,
            viewport={"width": 1200, "height": 820},
        )
        try:
            page = browser.new_page()
            _log_in(page, site)
            rows = page.locator("table.runs tbody tr")
            expect(rows).to_have_count(2)
            expect(page.locator(f'a[href="/runs/{approved}"]')).to_be_visible()
            expect(page.get_by_text("$87.77")).to_be_visible()
            _shot(page, "2-inbox")
            page.screenshot(
                path=str(ARTIFACTS / "readme-inbox.png"),
                clip=_TOP | {"height": 250},
                full_page=True,
            )

            page.click(f'a[href="/runs/{approved}"]')
            expect(page.locator("#status")).to_have_text("interrupted")
            expect(page.locator(".pending")).to_contain_text("refund")
            expect(page.locator("svg .node.current")).to_have_count(1)
            _shot(page, "3-run-waiting")
            page.screenshot(
                path=str(ARTIFACTS / "readme-run.png"), clip=_TOP | {"height": 1140}, full_page=True
            )
            page.click("#approve")
            expect(page.locator(".flash")).to_contain_text("approved refund(")
            _decided_and_finished(page, site, approved)
            expect(page.locator(".summary")).to_contain_text("Refunded $87.77")
            _shot(page, "4-run-approved-and-paid")
            assert site.paid() == ["87.77"]  # exactly once

            page.goto(f"{site.url}/")
            expect(rows).to_have_count(1)  # the inbox holds only the run still waiting
            page.click(f'a[href="/runs/{denied}"]')
            page.fill("#deny-reason", "the parcel was delivered; the carrier has a signature")
            _shot(page, "5-run-denying")
            page.click("#deny")
            expect(page.locator(".flash")).to_contain_text("denied refund(")
            _decided_and_finished(page, site, denied)
            expect(page.locator(".summary")).to_contain_text("Nothing was refunded")
            _shot(page, "6-run-denied")
            assert site.paid() == ["87.77"]  # the denied refund paid nothing

            page.goto(f"{site.url}/audit")
            expect(page.locator("table.runs tbody tr")).to_have_count(2)
            _shot(page, "7-audit")
        finally:
            browser.close()
    # The inbox process announced both waiting runs to the webhook, each once, signed.
    announced = sorted(json.loads(body)["run_id"] for _, body in receiver.received)
    assert announced == sorted(site.runs)
    secret = os.environ[WEBHOOK_VAR].encode()
    for headers, body in receiver.received:
        assert verify(secret, body, headers[SIGNATURE_HEADER.lower()])
    assert sorted(path.name for path in ARTIFACTS.iterdir()) == [
        "1-login.png",
        "2-inbox.png",
        "3-run-waiting.png",
        "4-run-approved-and-paid.png",
        "5-run-denying.png",
        "6-run-denied.png",
        "7-audit.png",
        "readme-inbox.png",
        "readme-run.png",
    ]
