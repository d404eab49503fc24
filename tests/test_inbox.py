"""The inbox over HTTP: every route refuses the anonymous, the wrong role, a missing or wrong
CSRF token and an amount above the operator's limit; a second decision is refused; hostile
text from the model and the tools is escaped; each decision goes through the store's
decision path, reaches the runner, and lands in the audit trail.

The application is the real one (``inbox_app``) on a real SQLite store (and PostgreSQL
in the last test), spoken to through httpx's ASGI transport in the test's own loop.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from argon2 import PasswordHasher
from inbox_support import (
    AMOUNT,
    ASK,
    PASSWORDS,
    csrf_of,
    hostile_runner,
    log_in,
    waiting_refund,
    write_config,
)
from pg_cluster import Cluster
from pydantic import BaseModel

from agents.support import LaterGate, PaymentsService, SupportContext, worker_runner
from statemachine import (
    Agent,
    Checkpointer,
    Denial,
    EffectUncertainError,
    ModelReply,
    Money,
    PostgresCheckpointer,
    Runner,
    RunStatus,
    SQLiteCheckpointer,
    dump_decision,
    write_tool,
)
from statemachine.inbox import InboxConfigError, inbox_app, load_config
from statemachine.testing import ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

ACTIONS = ("approve", "deny", "resume", "stop", "abort", "settle")


class Desk:
    """A store, a payments service, a waiting refund, and a client factory for the inbox."""

    def __init__(self, store: Checkpointer, payments: PaymentsService, directory: Path) -> None:
        self.store = store
        self.payments = payments
        self.config = load_config(write_config(directory))
        runner = worker_runner(store, payments=payments)
        self.app = inbox_app(store, self.config, agents={"support": runner.agent}, notify=False)
        self.run_id = ""

    def client(self) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, client=("203.0.113.9", 50000))
        return httpx.AsyncClient(transport=transport, base_url="http://inbox.test")

    def audit(self) -> list[dict[str, Any]]:
        path = self.config.audit_log
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[Desk]:
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        with PaymentsService(tmp_path / "payments.sqlite3") as payments:
            made = Desk(store, payments, tmp_path)
            made.run_id = await waiting_refund(store, payments)
            yield made


def _routes(run_id: str) -> list[tuple[str, str]]:
    gets = ["/", "/live/inbox", "/audit", f"/runs/{run_id}", f"/live/runs/{run_id}"]
    posts = ["/logout", *(f"/runs/{run_id}/{action}" for action in ACTIONS)]
    return [("GET", path) for path in gets] + [("POST", path) for path in posts]


async def test_every_route_refuses_the_anonymous(desk: Desk) -> None:
    """Without a log-in, a page sends to the log-in page and anything else is 401; no data."""
    async with desk.client() as client:
        for method, path in _routes(desk.run_id):
            answer = await client.request(method, path, data={"csrf": "x"})
            if method == "GET" and not path.startswith("/live"):
                assert (answer.status_code, answer.headers["location"]) == (303, "/login"), path
            else:
                assert answer.status_code == 401, path
            assert desk.run_id not in answer.text, path
            assert "refund" not in answer.text, path
    record = await desk.store.record(desk.run_id)
    assert (record.status, record.decision_pending) == (RunStatus.INTERRUPTED, False)


async def test_a_wrong_password_or_a_forged_session_is_refused(desk: Desk) -> None:
    async with desk.client() as client:
        page = await client.get("/login")
        wrong = await client.post(
            "/login", data={"csrf": csrf_of(page.text), "name": "ana", "password": "guess"}
        )
        assert wrong.status_code == 401
        assert "wrong name or password" in wrong.text
        nobody = await client.post(
            "/login", data={"csrf": csrf_of(page.text), "name": "zed", "password": "guess"}
        )
        assert nobody.status_code == 401
        assert (await client.get("/")).status_code == 303
    async with desk.client() as client:
        # A session cookie not signed with the inbox's key is no session.
        client.cookies.set("statemachine_inbox", "eyJvcGVyYXRvciI6ICJhbmEifQ==.forged.sig")
        assert (await client.get("/")).status_code == 303


async def test_a_session_expires(desk: Desk, tmp_path: Path) -> None:
    """A log-in older than session_minutes is refused, however active the session was."""
    config = load_config(write_config(tmp_path, extra="session_minutes = 10"))
    now = [1_000_000.0]
    app = inbox_app(desk.store, config, notify=False, clock=lambda: now[0])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        page = await client.get("/login")
        data = {"csrf": csrf_of(page.text), "name": "ana", "password": PASSWORDS["ana"]}
        assert (await client.post("/login", data=data)).status_code == 303
        for _ in range(3):  # active all along, for 9 minutes 57 seconds
            now[0] += 199
            assert (await client.get("/")).status_code == 200
        now[0] += 4
        assert (await client.get("/")).status_code == 303  # straight back to the log-in


async def test_the_inbox_lists_the_waiting_refund_with_its_tool_and_amount(desk: Desk) -> None:
    async with desk.client() as client:
        await log_in(client, "vic")  # a token, where the others have passwords
        inbox = await client.get("/")
        assert inbox.status_code == 200
        assert f'href="/runs/{desk.run_id}"' in inbox.text
        assert "refund" in inbox.text
        assert "$87.77" in inbox.text
        page = await client.get(f"/runs/{desk.run_id}")
        call = await desk.store.load(desk.run_id)
        args_hash = call[1]["fields"]["call"]["args_hash"]
        for shown in (args_hash, "$87.77", "customer request", "lookup_order", "AwaitApproval"):
            assert shown in page.text
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        # A viewer sees no decision buttons.
        assert 'action="/runs/' not in page.text


async def test_a_viewer_may_not_decide(desk: Desk) -> None:
    async with desk.client() as client:
        csrf = await log_in(client, "vic")
        for action in ACTIONS:
            answer = await client.post(
                f"/runs/{desk.run_id}/{action}",
                data={"csrf": csrf, "args_hash": "x", "reason": "r", "outcome": "did-not"},
            )
            assert answer.status_code == 403, action
            assert "vic may view runs but not decide" in answer.text
    record = await desk.store.record(desk.run_id)
    assert (record.status, record.decision_pending) == (RunStatus.INTERRUPTED, False)
    assert {entry["outcome"] for entry in desk.audit()} == {"refused"}


async def test_a_missing_or_wrong_csrf_token_is_refused(desk: Desk) -> None:
    async with desk.client() as client:
        csrf = await log_in(client, "ana")
        for _, path in [r for r in _routes(desk.run_id) if r[0] == "POST"]:
            for token in (None, "", csrf[:-1] + ("A" if csrf[-1] != "A" else "B")):
                data = {"reason": "r", "args_hash": "x"}
                if token is not None:
                    data["csrf"] = token
                answer = await client.post(path, data=data)
                assert answer.status_code == 403, (path, token)
        assert (await client.get("/")).status_code == 200  # log-out was refused too
    async with desk.client() as client:
        await client.get("/login")
        login = {"name": "ana", "password": PASSWORDS["ana"]}
        assert (await client.post("/login", data=login)).status_code == 403
    record = await desk.store.record(desk.run_id)
    assert (record.status, record.decision_pending) == (RunStatus.INTERRUPTED, False)


async def test_an_amount_above_the_operators_limit_is_refused(desk: Desk) -> None:
    """bo may approve up to $50.00: the $87.77 refund is refused, a denial is not."""
    args_hash = (await desk.store.load(desk.run_id))[1]["fields"]["call"]["args_hash"]
    async with desk.client() as client:
        csrf = await log_in(client, "bo")
        page = await client.get(f"/runs/{desk.run_id}")
        assert "Above your limit of $50.00" in page.text
        answer = await client.post(
            f"/runs/{desk.run_id}/approve", data={"csrf": csrf, "args_hash": args_hash}
        )
        assert answer.status_code == 403
        assert "is for 87.77, above your limit of 50.00" in answer.text
        assert not (await desk.store.record(desk.run_id)).decision_pending
        denied = await client.post(
            f"/runs/{desk.run_id}/deny",
            data={"csrf": csrf, "args_hash": args_hash, "reason": "over budget"},
        )
        assert denied.status_code == 303
    decision = await desk.store.decision(desk.run_id)
    assert decision is not None
    assert (decision["kind"], decision["denied_by"]) == ("denial", "bo")


async def test_an_approval_reaches_the_runner_once_and_a_second_decision_is_refused(
    desk: Desk,
) -> None:
    args_hash = (await desk.store.load(desk.run_id))[1]["fields"]["call"]["args_hash"]
    async with desk.client() as client:
        csrf = await log_in(client, "ana")
        stale = await client.post(
            f"/runs/{desk.run_id}/approve", data={"csrf": csrf, "args_hash": "0" * 64}
        )
        assert stale.status_code == 409
        assert "not the one you were shown" in stale.text
        approve = {"csrf": csrf, "args_hash": args_hash}
        answer = await client.post(f"/runs/{desk.run_id}/approve", data=approve)
        assert (answer.status_code, answer.headers["location"]) == (303, f"/runs/{desk.run_id}")
        page = await client.get(f"/runs/{desk.run_id}")
        assert "approved refund(" in page.text
        assert "approved by ana" in page.text
        again = await client.post(f"/runs/{desk.run_id}/approve", data=approve)
        assert again.status_code == 409
        assert "refused" in again.text
        deny = {**approve, "reason": "changed my mind"}
        assert (await client.post(f"/runs/{desk.run_id}/deny", data=deny)).status_code == 409
    decision = await desk.store.decision(desk.run_id)
    assert decision is not None
    assert (decision["kind"], decision["approved_by"]) == ("approval", "ana")
    # The runner, not the page, turns the approval into the right to pay: it pays once.
    result = await worker_runner(desk.store, payments=desk.payments).resume(desk.run_id)
    assert result.status == "done"
    assert [receipt.amount for receipt in desk.payments.receipts()] == [AMOUNT]
    async with desk.client() as client:
        csrf = await log_in(client, "ana")
        late = await client.post(
            f"/runs/{desk.run_id}/approve", data={"csrf": csrf, "args_hash": args_hash}
        )
        assert late.status_code == 409
        assert "is not waiting for an approval" in late.text
    assert desk.payments.count() == 1
    audit = desk.audit()
    done = [entry for entry in audit if entry["outcome"] == "done"]
    assert len(done) == 1
    assert done[0]["operator"] == "ana"
    assert done[0]["from"] == "203.0.113.9"
    assert (done[0]["action"], done[0]["args_hash"], done[0]["tool"]) == (
        "approve",
        args_hash,
        "refund",
    )
    assert done[0]["at"].endswith("+00:00")
    assert [entry["action"] for entry in audit if entry["outcome"] == "refused"] == [
        "approve",
        "approve",
        "deny",
        "approve",
    ]


async def test_a_denial_needs_a_reason_and_the_model_is_told(desk: Desk) -> None:
    args_hash = (await desk.store.load(desk.run_id))[1]["fields"]["call"]["args_hash"]
    async with desk.client() as client:
        csrf = await log_in(client, "ana")
        url = f"/runs/{desk.run_id}/deny"
        empty = await client.post(url, data={"csrf": csrf, "args_hash": args_hash, "reason": " "})
        assert empty.status_code == 400
        reason = {"csrf": csrf, "args_hash": args_hash, "reason": "order was found"}
        assert (await client.post(url, data=reason)).status_code == 303
    result = await worker_runner(desk.store, payments=desk.payments).resume(desk.run_id)
    assert result.status == "done"
    assert desk.payments.count() == 0


async def test_stop_abort_and_resume(desk: Desk) -> None:
    async with desk.client() as client:
        csrf = await log_in(client, "ana")
        url = f"/runs/{desk.run_id}"
        resume = await client.post(f"{url}/resume", data={"csrf": csrf})
        assert resume.status_code == 409
        assert "approve or deny it first" in resume.text
        assert (await client.post(f"{url}/stop", data={"csrf": csrf})).status_code == 303
        assert (await desk.store.record(desk.run_id)).status == RunStatus.CANCELLED
        assert (await client.post(f"{url}/abort", data={"csrf": csrf})).status_code == 303
        assert (await desk.store.record(desk.run_id)).status == RunStatus.ABORTED
        again = await client.post(f"{url}/abort", data={"csrf": csrf})
        assert again.status_code == 409
        assert "aborted already" in again.text
        page = await client.get(url)
        assert "aborted" in page.text
        assert f"{url}/stop" not in page.text
    assert desk.payments.count() == 0


async def test_hostile_text_from_the_model_and_a_tool_is_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hostile = "<script>alert('x')</script><img src=x onerror=alert(1)>\"'&"
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        with PaymentsService(tmp_path / "payments.sqlite3") as payments:
            runner = hostile_runner(store, payments, hostile, monkeypatch)
            run_id = await runner.submit(SupportContext(customer_id="C-17"), f"{ASK} {hostile}")
            assert (await runner.resume(run_id)).status == "paused"
            desk = Desk(store, payments, tmp_path)
            async with desk.client() as client:
                await log_in(client, "ana")
                for path in ("/", "/live/inbox", f"/runs/{run_id}", f"/live/runs/{run_id}"):
                    text = (await client.get(path)).text
                    assert not re.search("<script>alert|<img src=x", text), path
                page = (await client.get(f"/runs/{run_id}")).text
                escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&lt;img src=x"
                # The user's text and the tool's answer (inside its JSON): shown, escaped.
                assert f"please. {escaped}" in page
                assert f"&#34;item&#34;:&#34;{escaped}" in page
                # The model's answer, once a denial lets it finish.
                await store.submit_decision(
                    run_id, dump_decision(Denial(reason=hostile, denied_by="ana"))
                )
                assert (await runner.resume(run_id)).status == "done"
                for path in (f"/runs/{run_id}", f"/live/runs/{run_id}"):
                    text = (await client.get(path)).text
                    assert not re.search("<script>alert|<img src=x", text), path
                    assert f'<dd class="said">{escaped}' in text


class Died(BaseException):
    """The process stops dead in the middle of a call: nothing in the library catches it."""


class ChargeArgs(BaseModel):
    card: str
    amount: Money


def _checkout() -> tuple[Agent[None], list[Decimal], list[bool]]:
    """An agent whose one write tool (not idempotent) charges a card; it can die mid-call."""
    charged: list[Decimal] = []
    die = [True]

    @write_tool
    async def charge(args: ChargeArgs) -> dict[str, Any]:
        if die[0]:
            raise Died
        charged.append(args.amount)
        return {"receipt": f"r-{len(charged)}"}

    return Agent[None](name="checkout", tools=(charge,)), charged, die


async def test_an_uncertain_effect_is_settled_from_the_page(desk: Desk) -> None:
    """A charge cut off mid-call waits for a person; "it did not go through" sends it once."""
    agent, charged, die = _checkout()
    store = desk.store

    def runner(*turns: ModelReply) -> Runner[None]:
        return Runner(agent, model=ScriptedModel(list(turns)), gate=LaterGate(), checkpointer=store)

    call = tool_call("charge", {"card": "c-1", "amount": Decimal("800.00")})
    paused = await runner(call).run(None, "Charge my card.", run_id="charge-1")
    assert paused.status == "paused"
    args_hash = (await store.load("charge-1"))[1]["fields"]["call"]["args_hash"]
    async with desk.client() as client, desk.client() as bo:
        csrf = await log_in(client, "ana")
        form = {"csrf": csrf, "args_hash": args_hash}
        assert (await client.post("/runs/charge-1/approve", data=form)).status_code == 303
        with pytest.raises(Died):
            await runner().resume("charge-1")
        with pytest.raises(EffectUncertainError):
            await runner().resume("charge-1")
        page = (await client.get("/runs/charge-1")).text
        assert "Uncertain effect" in page
        assert 'action="/runs/charge-1/settle"' in page
        resume = await client.post("/runs/charge-1/resume", data={"csrf": csrf})
        assert resume.status_code == 409
        assert "settle the effect first" in resume.text
        bo_csrf = await log_in(bo, "bo")
        limited = await bo.post(
            "/runs/charge-1/settle",
            data={"csrf": bo_csrf, "args_hash": args_hash, "outcome": "did-not"},
        )
        assert limited.status_code == 403
        assert "above your limit" in limited.text
        settle = {**form, "outcome": "did-not"}
        assert (await client.post("/runs/charge-1/settle", data=settle)).status_code == 303
        again = await client.post("/runs/charge-1/settle", data=settle)
        assert again.status_code == 409
    assert (await store.record("charge-1")).status == RunStatus.RUNNING
    die[0] = False
    assert (await runner(reply("Charged.")).resume("charge-1")).status == "done"
    assert charged == [Decimal("800.00")]
    settled = [e for e in desk.audit() if e["action"] == "settle" and e["outcome"] == "done"]
    assert [(e["operator"], e["args_hash"]) for e in settled] == [("ana", args_hash)]


async def test_the_inbox_on_postgresql(pg_cluster: Cluster, tmp_path: Path) -> None:
    """The same decision path on the PostgreSQL store: approved once, paid once."""
    async with PostgresCheckpointer(pg_cluster.fresh_dsn()) as store:
        with PaymentsService(tmp_path / "payments.sqlite3") as payments:
            desk = Desk(store, payments, tmp_path)
            run_id = await waiting_refund(store, payments)
            args_hash = (await store.load(run_id))[1]["fields"]["call"]["args_hash"]
            async with desk.client() as client:
                csrf = await log_in(client, "ana")
                inbox = await client.get("/")
                assert run_id in inbox.text
                assert "$87.77" in inbox.text
                form = {"csrf": csrf, "args_hash": args_hash}
                assert (await client.post(f"/runs/{run_id}/approve", data=form)).status_code == 303
                assert (await client.post(f"/runs/{run_id}/approve", data=form)).status_code == 409
            assert (await worker_runner(store, payments=payments).resume(run_id)).status == "done"
            assert payments.count() == 1


def test_the_configuration_binds_to_loopback_and_refuses_what_it_cannot_use(
    tmp_path: Path,
) -> None:
    config = load_config(write_config(tmp_path))
    assert (config.bind, config.port) == ("127.0.0.1", 8765)
    assert config.operators["bo"].up_to == Decimal("50.00")
    assert config.link("r-1") == "http://inbox.test/runs/r-1"
    assert config.check_login("ana", PASSWORDS["ana"]) == config.operators["ana"]
    assert config.check_login("ana", PASSWORDS["bo"]) is None
    assert config.check_login("nobody", PASSWORDS["ana"]) is None
    good = (tmp_path / "inbox.toml").read_text()
    bad = {
        'role = "view"': ('role = "admin"', "has role 'admin'; use view or decide"),
        'up_to = "50.00"': ("up_to = 50.0", 'write the amount as a string, e.g. up_to = "500.00"'),
        'password_hash = "$argon2': ('password_hash = "plain', "needs one argon2 password_hash"),
    }
    for before, (after, said) in bad.items():
        (tmp_path / "bad.toml").write_text(good.replace(before, after, 1))
        with pytest.raises(InboxConfigError, match=re.escape(said)):
            load_config(tmp_path / "bad.toml")
    (tmp_path / "none.toml").write_text("[inbox]\n")
    with pytest.raises(InboxConfigError, match=re.escape("no [[operators]]; nobody could log in")):
        load_config(tmp_path / "none.toml")


def test_the_command_hashes_a_password_and_refuses_a_missing_configuration(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "statemachine", "inbox"]
    hashed = subprocess.run(
        [*command, "--hash-password"], input="a long password\n", capture_output=True, text=True
    )
    assert hashed.returncode == 0, hashed.stderr
    assert PasswordHasher().verify(hashed.stdout.strip(), "a long password")
    token = subprocess.run([*command, "--new-token"], capture_output=True, text=True)
    given, line = token.stdout.splitlines()
    secret = given.removeprefix("token (give it to the operator): ")
    assert PasswordHasher().verify(line.removeprefix('token_hash = "').rstrip('"'), secret)
    missing = subprocess.run(command, capture_output=True, text=True)
    assert (missing.returncode, missing.stderr) == (
        2,
        "statemachine inbox: give the configuration file: statemachine inbox --config inbox.toml\n",
    )
    wrong = subprocess.run(
        [*command, "--config", str(tmp_path / "absent.toml")], capture_output=True, text=True
    )
    assert wrong.returncode == 2
    assert "cannot read the inbox configuration" in wrong.stderr


async def test_a_runs_page_shows_the_governors_verdicts(desk: Desk) -> None:
    """A refund asked twice: the governor suppresses the second, and the page says so."""
    refund = tool_call("refund", {"order_id": 2000, "amount": "10.00", "reason": "broken"})
    turns = [
        tool_call("lookup_order", {"order_id": 2000}),
        tool_call("verify_customer", {"customer_id": "C-17", "code": "4417"}),
        refund,
        refund,
        reply("Refunded $10.00 once."),
    ]
    runner = worker_runner(desk.store, payments=desk.payments, model=ScriptedModel(turns))
    result = await runner.run(SupportContext(customer_id="C-17"), "Refund order 2000, code 4417.")
    assert result.status == "done"
    run_id = result.run_id
    async with desk.client() as client:
        await log_in(client, "vic")
        page = (await client.get(f"/runs/{run_id}")).text
    verdicts = page[page.index("Governor's verdicts") :]
    assert "suppress" in verdicts
    assert "None." not in verdicts.split("</section>")[0]
    assert desk.payments.count() == 1
