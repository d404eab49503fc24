"""The operators' command line, driven as a subprocess against a database of real runs.

The database is written once per module by real runs of the support and travel
agents on scripted models: two refunds paid (one asked twice: the second suppressed),
one waiting for approval of a refund, one whose answer was never accepted (a
validation fallback), one whose model ran out of script mid-run (failed_resumable),
and a travel run whose weather look-up failed once and was retried. Tests that change
runs work on a copy of it. A second database holds one run sealed with a key.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from pg_cluster import Cluster

from agents.support import LaterGate, PaymentsService, SupportContext, SupportDesk, support_agent
from agents.travel import FakeProvider, TripContext, travel_agent
from statemachine import (
    Agent,
    ApprovalGate,
    CheckpointCipher,
    ModelReply,
    PostgresCheckpointer,
    Runner,
    ScriptExhaustedError,
    SQLiteCheckpointer,
    generate_key,
    loads,
)
from statemachine.testing import ScriptedGate, ScriptedModel, reply, tool_call

ROOT = Path(__file__).parent.parent
ADA = SupportContext(customer_id="C-17")
ASK = "My espresso machine (order 1001) arrived broken. My code is 4417. Refund it, please."
REFUND = '{"order_id": 1001, "amount": 137.32, "reason": "arrived broken"}'
CALL = 'refund({"amount":137.32,"order_id":1001,"reason":"arrived broken"})'
LOOKUP = tool_call("lookup_order", {"order_id": 1001}, tokens=12, cost="0.02")
VERIFY = tool_call(
    "verify_customer", {"customer_id": "C-17", "code": "4417"}, tokens=12, cost="0.02"
)
PAY = tool_call("refund", REFUND, tokens=12, cost="0.02")
ALL_RUNS = ["paid", "twice", "waiting", "fallback", "broken", "flaky"]
KEY = generate_key()  # the key of sealed.db


async def _no_sleep(_: float) -> None:
    return None


async def _build(directory: Path) -> None:
    """Write runs.db (every run above) and sealed.db (one run, encrypted with key k1)."""
    async with SQLiteCheckpointer(directory / "runs.db") as store:

        async def run(
            run_id: str,
            turns: list[ModelReply],
            gate: ApprovalGate,
            agent: Agent[Any] | None = None,
        ) -> None:
            with PaymentsService(directory / f"{run_id}-payments.sqlite3") as payments:
                runner = Runner(
                    agent or support_agent(),
                    model=ScriptedModel(turns),
                    gate=gate,
                    sleep=_no_sleep,
                    seed=7,
                    checkpointer=store,
                    deps=None if agent is not None else SupportDesk(payments=payments),
                )
                ctx = ADA if agent is None else TripContext("Ada", "Lisbon")
                await runner.run(ctx, ASK, run_id=run_id)

        approve = ScriptedGate([True], by="lin")
        await run("paid", [LOOKUP, VERIFY, PAY, reply("Refunded $137.32.")], approve)
        twice = [LOOKUP, VERIFY, PAY, PAY, reply("Refunded $137.32 once.")]
        await run("twice", twice, ScriptedGate([True], by="lin"))
        await run("waiting", [LOOKUP, VERIFY, PAY], LaterGate())
        await run("fallback", [LOOKUP, reply(""), reply(""), reply("")], ScriptedGate([]))
        with pytest.raises(ScriptExhaustedError):
            await run("broken", [LOOKUP], ScriptedGate([]))
        weather = [tool_call("get_weather", {"city": "Lisbon"}), reply("Sunny in Lisbon.")]
        trip = travel_agent(FakeProvider(weather_failures=1))
        await run("flaky", weather, ScriptedGate([]), trip)
    sealer = CheckpointCipher({"k1": KEY}, "k1")
    async with SQLiteCheckpointer(directory / "sealed.db", sealer=sealer) as sealed:
        with PaymentsService(directory / "sealed-payments.sqlite3") as payments:
            runner = Runner(
                support_agent(),
                model=ScriptedModel([LOOKUP, VERIFY, PAY]),
                gate=LaterGate(),
                checkpointer=sealed,
                deps=SupportDesk(payments=payments),
            )
            await runner.run(ADA, ASK, run_id="secret")


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding runs.db and sealed.db, written once for the module."""
    directory = tmp_path_factory.mktemp("cli")
    anyio.run(_build, directory)
    return directory


@pytest.fixture
def db(made: Path) -> Path:
    """The shared runs database: for tests that only read."""
    return made / "runs.db"


@pytest.fixture
def copy(made: Path, tmp_path: Path) -> Path:
    """A private copy of the runs database: for tests that change runs."""
    target = tmp_path / "runs.db"
    shutil.copyfile(made / "runs.db", target)
    return target


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m statemachine ARGS`` in a new process, from the project's root."""
    environ = {
        key: value
        for key, value in os.environ.items()
        # No store, key or payments ledger from the caller's shell.
        if not key.startswith("STATEMACHINE_") and key != "SUPPORT_PAYMENTS_DB"
    }
    environ["PYTHONPATH"] = str(ROOT)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "statemachine", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=environ,
        cwd=ROOT,
        check=False,
    )


def ok(process: subprocess.CompletedProcess[str]) -> str:
    """The output of a command that must have succeeded, with nothing on stderr."""
    assert (process.returncode, process.stderr) == (0, ""), process.stderr
    return process.stdout


def as_json(process: subprocess.CompletedProcess[str]) -> Any:
    """The one JSON document a ``--json`` command printed (numbers as exact Decimal)."""
    return loads(ok(process))


def refused(process: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The one line a refused command printed on stderr (no traceback, nothing on stdout)."""
    assert process.returncode == code, (process.returncode, process.stdout, process.stderr)
    assert process.stdout == ""
    lines = process.stderr.splitlines()
    assert len(lines) == 1, process.stderr
    return lines[0]


def table(text: str) -> list[dict[str, str]]:
    """The rows of an aligned table as {header: cell}, read by the header's columns.

    Every cell must start exactly under its header, which is what "aligned" means.
    """
    header, *lines = text.splitlines()
    names = [(m.group(), m.start()) for m in re.finditer(r"\S+(?: \S+)*", header)]
    rows = []
    for line in lines:
        row = {}
        for index, (name, start) in enumerate(names):
            end = names[index + 1][1] if index + 1 < len(names) else None
            assert line[start - 1 : start] in ("", " "), (name, line)
            row[name] = line[start:end].strip()
        rows.append(row)
    return rows


def test_list_shows_every_run_aligned_and_as_json(db: Path) -> None:
    """``runs list`` shows each run's agent, status, phase and wait, in columns and as JSON."""
    rows = table(ok(cli("runs", "list", "--db", str(db))))
    assert [(r["RUN"], r["AGENT"], r["STATUS"], r["PHASE"]) for r in rows] == [
        ("paid", "support", "completed", "Done"),
        ("twice", "support", "completed", "Done"),
        ("waiting", "support", "interrupted", "AwaitApproval"),
        ("fallback", "support", "completed", "Failed"),
        ("broken", "support", "failed_resumable", "Planning"),
        ("flaky", "travel", "completed", "Done"),
    ]
    assert rows[2]["WAITING FOR"] == "approval of refund"
    listed = as_json(cli("runs", "list", "--json", "--db", str(db)))
    assert [run["run_id"] for run in listed] == ALL_RUNS
    assert listed[2] == {
        "run_id": "waiting",
        "agent": "support",
        "status": "interrupted",
        "phase": "AwaitApproval",
        "waiting_for": "approval of refund",
        "updated_at": listed[2]["updated_at"],
        "seq": 9,
        "stop_requested": False,
        "decision_pending": False,
        "held": False,
        "reason": "",
        "failures": 0,
        "retry_at": None,
    }


def test_list_filters_by_status_agent_and_waiting(db: Path) -> None:
    """--status (repeatable), --agent and --waiting narrow the list; no match is said so."""
    found = as_json(
        cli(
            "runs",
            "list",
            "--json",
            "--status",
            "completed",
            "--status",
            "failed_resumable",
            "--agent",
            "support",
            "--db",
            str(db),
        )
    )
    assert [run["run_id"] for run in found] == ["paid", "twice", "fallback", "broken"]
    waiting = as_json(cli("runs", "list", "--waiting", "--json", "--db", str(db)))
    assert [run["run_id"] for run in waiting] == ["waiting"]
    assert ok(cli("runs", "list", "--agent", "research", "--db", str(db))) == "no runs match\n"


def test_show_a_run_waiting_for_approval(db: Path) -> None:
    """``runs show`` gives the timeline, the spend and the exact call and amount to approve."""
    text = ok(cli("runs", "show", "waiting", "--db", str(db)))
    head, timeline, verdicts, pending = text.rstrip("\n").split("\n\n")
    assert head.splitlines()[:4] == [
        "run       waiting",
        "agent     support",
        "status    interrupted (waiting for approval of refund)",
        "phase     AwaitApproval, step 9",
    ]
    assert "spent     $0.06, 36 tokens, 2 tool calls, 3 model calls" in head.splitlines()
    title, *rows = timeline.splitlines()
    assert title == "timeline"
    steps = table("\n".join(row[2:] for row in rows))
    phases = ["Idle", "Planning", "ToolCalling", "Observing", "Planning", "ToolCalling"]
    phases += ["Observing", "Planning", "AwaitApproval", "AwaitApproval"]
    assert [(row["SEQ"], row["PHASE"]) for row in steps] == [
        (str(seq), phase) for seq, phase in enumerate(phases)
    ]
    assert all(row["TIME IN PHASE"].endswith("s") for row in steps[:-1])
    assert steps[-1]["TIME IN PHASE"] == ""  # it is still there
    assert verdicts == "verdicts: none"
    assert pending.splitlines() == [
        "pending approval",
        f"  call      {CALL}",
        "  amount    $137.32",
        f"  key       {pending.splitlines()[3].split()[-1]}",
        "  waiting   sent to the refunds desk",
        "  decision  none yet (statemachine runs approve|deny ID --by NAME)",
    ]
    shown = as_json(cli("runs", "show", "waiting", "--json", "--db", str(db)))
    assert shown["pending_approval"]["amount"] == Decimal("137.32")
    assert shown["pending_approval"]["arguments"] == {
        "order_id": 1001,
        "amount": Decimal("137.32"),
        "reason": "arrived broken",
    }
    assert shown["pending_approval"]["key"] == f"refund:{shown['pending_approval']['args_hash']}"
    assert shown["spent"] == {
        "tokens": 36,
        "cost": Decimal("0.06"),
        "tool_calls": 2,
        "model_calls": 3,
    }
    assert [row["seq"] for row in shown["timeline"]] == list(range(10))
    assert shown["decision"] is None


def test_show_a_finished_run_with_its_verdicts_and_answer(db: Path) -> None:
    """A finished run shows its answer, and each verdict with its step, check and reason."""
    text = ok(cli("runs", "show", "twice", "--db", str(db)))
    assert "answer    Refunded $137.32 once.\n" in text
    assert "pending approval" not in text
    verdicts = text.split("\n\nverdicts\n")[1]
    (suppressed,) = table("\n".join(line[2:] for line in verdicts.splitlines()))
    assert suppressed == {
        "STEP": "11",
        "HOOK": "before_action",
        "VERDICT": "suppress",
        "CHECK": "exact",
        "REASON": f"exact duplicate of call-7 ({CALL}, ok)",
    }


def test_stats_time_in_each_phase_and_the_retry_and_fallback_rates(db: Path) -> None:
    """``stats`` answers "what share of time is spent in Retrying?" and the two rates."""
    text = ok(cli("stats", "--db", str(db)))
    first, phases, rates = text.rstrip("\n").split("\n\n")
    assert first == "6 runs: 4 completed, 1 failed_resumable, 1 interrupted"
    rows = {row["PHASE"]: row for row in table(phases)}
    assert {name: row["ENTERED"] for name, row in rows.items()} == {
        "Idle": "6",
        "Planning": "18",
        "AwaitApproval": "4",
        "ToolCalling": "12",
        "Retrying": "1",
        "Observing": "11",
        "Responding": "3",
        "Failed": "1",
        "Done": "3",
    }
    assert re.fullmatch(r"\d+\.\d%", rows["Retrying"]["SHARE OF TIME"])
    assert rates.splitlines() == [
        "retry rate     8.3%: 1 retried of 12 tool-call attempts, in 1 of 6 runs",
        "fallback rate  25.0%: 1 of 4 answers still not accepted after validation",
    ]
    travel = as_json(cli("stats", "--agent", "travel", "--json", "--db", str(db)))
    assert (travel["runs"], travel["retries"], travel["tool_calls"]) == (1, 1, 2)
    assert (travel["retry_rate"], travel["fallback_rate"]) == (Decimal("0.5"), 0)
    shares = {row["phase"]: row["share"] for row in travel["phases"]}
    order = ["Idle", "Planning", "ToolCalling", "Retrying", "Observing", "Responding", "Done"]
    assert list(shares) == order
    assert shares["Retrying"] > 0
    assert abs(sum(shares.values()) - 1) < Decimal("0.0001")


def test_approve_records_the_decision_once_for_a_worker(copy: Path) -> None:
    """``approve`` only writes the decision: the run still waits, a second one is refused."""
    said = ok(cli("runs", "approve", "waiting", "--by", "lin@refunds.example", "--db", str(copy)))
    assert said == (
        f"approved {CALL} for run waiting (by lin@refunds.example); a worker, or "
        "statemachine runs resume waiting --agent MODULE, goes on with it\n"
    )
    again = refused(
        cli("runs", "deny", "waiting", "--by", "kim", "--reason", "no", "--db", str(copy))
    )
    assert again.startswith("statemachine: decision for run 'waiting' refused: it already has")
    shown = as_json(cli("runs", "show", "waiting", "--json", "--db", str(copy)))
    assert shown["run"]["status"] == "interrupted"
    assert shown["run"]["decision_pending"] is True
    decision = shown["decision"]
    assert decision == {
        "kind": "approval",
        "run_id": "waiting",
        "call_id": shown["pending_approval"]["call_id"],
        "tool": "refund",
        "args_hash": shown["pending_approval"]["args_hash"],
        "approved_by": "lin@refunds.example",
        "approved_at": decision["approved_at"],
        "note": "",
    }
    assert decision["call_id"].startswith("call-")
    assert ok(cli("runs", "list", "--waiting", "--db", str(copy))) == "no runs match\n"
    assert ok(cli("runs", "resume", "waiting", "--db", str(copy))) == (
        "run waiting: its decision is recorded: the next free worker goes on with it\n"
    )
    # Resumed here instead, by the worker's factory (agents.support.worker_runner).
    resumed = as_json(
        cli("runs", "resume", "waiting", "--agent", "agents.support", "--json", "--db", str(copy))
    )
    assert (resumed["resumed_here"], resumed["result"]) == (True, "done")
    assert (resumed["run"]["status"], resumed["run"]["decision_pending"]) == ("completed", False)
    assert resumed["history"] == [
        "AwaitApproval",
        "ToolCalling",
        "Observing",
        "Planning",
        "Responding",
        "Done",
    ]
    with PaymentsService(copy.parent / "payments.sqlite3") as payments:
        assert [receipt.amount for receipt in payments.receipts()] == [Decimal("137.32")]
    assert refused(cli("runs", "resume", "waiting", "--db", str(copy))) == (
        "statemachine: run 'waiting' is completed, an ending; nothing resumes it (start a new "
        "run instead)"
    )


def test_deny_records_the_reason_and_refuses_a_run_not_waiting(copy: Path) -> None:
    """``deny`` writes who denied and why; a run that waits for nothing is refused."""
    denied = as_json(
        cli(
            "runs",
            "deny",
            "waiting",
            "--by",
            "kim",
            "--reason",
            "paid twice already",
            "--json",
            "--db",
            str(copy),
        )
    )
    assert denied["decision"] == {
        "kind": "denial",
        "reason": "paid twice already",
        "denied_by": "kim",
    }
    assert denied["run"]["decision_pending"] is True
    assert refused(cli("runs", "approve", "paid", "--by", "lin", "--db", str(copy))) == (
        "statemachine: run 'paid' is not waiting for an approval (it is completed at Done), "
        "so there is nothing to approve; see statemachine runs list --waiting"
    )


async def _held_by_a_worker(path: Path, run_id: str, owner: str) -> None:
    async with SQLiteCheckpointer(path) as store:
        await store.set_status(run_id, "running")
        assert await store.claim(run_id, owner)


def test_stop_resume_abort_and_purge(copy: Path) -> None:
    """Stop, resume, abort and purge change runs as their lifecycle allows, and say so."""
    anyio.run(_held_by_a_worker, copy, "broken", "worker-7")
    assert ok(cli("runs", "stop", "broken", "--db", str(copy))) == (
        "stop requested for run broken: the worker driving it stops at its next checkpoint "
        "and marks it cancelled\n"
    )
    assert refused(cli("runs", "abort", "broken", "--db", str(copy))) == (
        "statemachine: run 'broken' is being driven by worker-7 right now; stop it first "
        "(statemachine runs stop broken), then abort it"
    )
    assert ok(cli("runs", "resume", "broken", "--db", str(copy))) == (
        "run broken: it is running now, driven by worker-7\n"
    )
    assert ok(cli("runs", "stop", "waiting", "--db", str(copy))) == (
        "run waiting is cancelled at AwaitApproval; statemachine runs resume waiting goes on "
        "with it\n"
    )
    resumed = as_json(cli("runs", "resume", "waiting", "--json", "--db", str(copy)))
    assert (resumed["run"]["status"], resumed["resumed_here"]) == ("running", False)
    assert ok(cli("runs", "abort", "waiting", "--db", str(copy))) == (
        "run waiting aborted at AwaitApproval; nothing was undone, its record stays\n"
    )
    assert refused(cli("runs", "abort", "paid", "--db", str(copy))) == (
        "statemachine: run 'paid' cannot go from completed to aborted; its status is still "
        "completed. An ending never changes: start a new run instead of reopening 'paid'."
    )
    assert ok(cli("runs", "purge", "--older-than", "30d", "--db", str(copy))) == (
        "removed 0 completed or aborted run(s) last updated more than 30d ago\n"
    )
    purged = as_json(cli("runs", "purge", "--older-than", "0s", "--json", "--db", str(copy)))
    assert purged == {"removed": 5, "older_than_seconds": 0}
    left = as_json(cli("runs", "list", "--json", "--db", str(copy)))
    assert [(run["run_id"], run["status"], run["stop_requested"]) for run in left] == [
        ("broken", "running", True)
    ]


def test_refusals_are_one_line_and_a_nonzero_exit(made: Path, db: Path, tmp_path: Path) -> None:
    """An unknown run, a missing database, a bad age, and keys missing or wrong: one line each."""
    assert refused(cli("runs", "show", "nope", "--db", str(db))) == (
        f"statemachine: no run 'nope' in the checkpoint store {str(db)!r}: it was never saved "
        "there, or was purged; statemachine runs list shows the runs there are"
    )
    missing = tmp_path / "missing.db"
    assert refused(cli("stats", "--db", str(missing)), code=2) == (
        f"statemachine: no runs store at {str(missing)!r}: there is no such file; check the "
        "path (--db PATH or $STATEMACHINE_DB; --dsn DSN for PostgreSQL), or make a new store "
        f"there with statemachine init --db {missing} (a worker: --create)"
    )
    assert not missing.exists()  # looking did not create it
    assert refused(cli("runs", "purge", "--older-than", "30 days", "--db", str(db)), code=2) == (
        "statemachine runs purge: argument --older-than: '30 days' is not an age; write a "
        "number and a unit: 30d, 12h, 90m, 45s or 2w (see statemachine runs purge --help)"
    )
    assert refused(
        cli("runs", "resume", "broken", "--agent", "agents.travel", "--db", str(db))
    ) == (
        "statemachine: agents.travel has no worker_runner(checkpointer) that builds a Runner; "
        "define one, or name the function as MODULE:FUNCTION"
    )
    assert refused(cli("runs", "resume", "waiting", "--db", str(db))) == (
        "statemachine: run 'waiting' waits for approval of a call; approve or deny it first "
        "(statemachine runs approve waiting --by NAME)"
    )
    sealed = str(made / "sealed.db")
    assert refused(cli("runs", "show", "secret", "--db", sealed)) == (
        "statemachine: the checkpoints of run 'secret' are not plain JSON: the store is "
        "encrypted (or damaged). Give its keys with --key-file PATH or "
        "$STATEMACHINE_CHECKPOINT_KEYS"
    )
    wrong = tmp_path / "wrong.key"
    wrong.write_text(f"k1:{base64.b64encode(generate_key()).decode()}\n")
    assert refused(cli("runs", "show", "secret", "--key-file", str(wrong), "--db", sealed)) == (
        "statemachine: checkpoint of run 'secret': checkpoint 9 is not the head this store's "
        "key recorded (the key is not the one that saved the run, or the head was changed: "
        "the sealed checkpoint (key 'k1') failed "
        "authentication: it was altered, its key is not the one that sealed it, or it is "
        "being opened for another run or position (aad) than it was sealed for. Nothing was "
        "decrypted; restore it from a trusted copy). Nothing was loaded and nothing in the "
        f"checkpoint store {sealed!r} was changed; other runs are unaffected. Restore the "
        "store from a backup to resume this run, or abort it and start it again."
    )
    keys = {"STATEMACHINE_CHECKPOINT_KEYS": f"k1:{base64.b64encode(KEY).decode()}"}
    shown = as_json(cli("runs", "show", "secret", "--json", "--db", sealed, env=keys))
    assert shown["pending_approval"]["call"] == CALL


async def _waiting_in_postgres(dsn: str, directory: Path) -> None:
    async with PostgresCheckpointer(dsn) as store:
        with PaymentsService(directory / "payments.sqlite3") as payments:
            runner = Runner(
                support_agent(),
                model=ScriptedModel([LOOKUP, VERIFY, PAY]),
                gate=LaterGate(),
                checkpointer=store,
                deps=SupportDesk(payments=payments),
            )
            await runner.run(ADA, ASK, run_id="pg-waiting")


def test_the_same_commands_on_postgresql(pg_cluster: Cluster, tmp_path: Path) -> None:
    """With $STATEMACHINE_DSN set, the commands read and write the PostgreSQL store."""
    dsn = pg_cluster.fresh_dsn("cli")
    anyio.run(_waiting_in_postgres, dsn, tmp_path)
    env = {"STATEMACHINE_DSN": dsn}
    waiting = as_json(cli("runs", "list", "--waiting", "--json", env=env))
    assert [(run["run_id"], run["phase"]) for run in waiting] == [("pg-waiting", "AwaitApproval")]
    ok(cli("runs", "approve", "pg-waiting", "--by", "lin", env=env))
    shown = as_json(cli("runs", "show", "pg-waiting", "--json", env=env))
    assert shown["pending_approval"]["call"] == CALL
    assert (shown["decision"]["kind"], shown["decision"]["approved_by"]) == ("approval", "lin")


def test_the_console_script_runs_the_same_dispatcher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``statemachine`` (the installed script) is ``python -m statemachine``'s main."""
    import tomllib

    from statemachine.__main__ import main

    with (ROOT / "pyproject.toml").open("rb") as file:
        scripts = tomllib.load(file)["project"]["scripts"]
    assert scripts == {"statemachine": "statemachine.__main__:main"}
    missing = tmp_path / "none.db"
    assert main(["stats", "--db", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(
        f"statemachine: no runs store at {str(missing)!r}: there is no such file;"
    )


def test_runs_verify_checks_every_checkpoint_that_a_load_does_not_read(tmp_path: Path) -> None:
    """A load checks the chain from the last snapshot on; ``runs verify`` checks it all."""
    import sqlite3

    path = tmp_path / "chain.db"

    async def write() -> None:
        async with SQLiteCheckpointer(path, snapshot_every=4) as store:
            for seq in range(12):
                document = {"kind": "P", "fields": {"step": seq, "notes": ["n"] * seq}}
                await store.save("r", seq, document, agent="a", status="running", phase="P")

    anyio.run(write)
    shown = as_json(cli("runs", "verify", "r", "--json", "--db", str(path)))
    assert shown == {"run_id": "r", "verified": 12}
    assert "checkpoints 0-11 match" in ok(cli("runs", "verify", "r", "--db", str(path)))
    # A delta before the last snapshot, its checksum kept. (A connection's with-block only
    # commits: closed by hand, or Python 3.13 reports it unclosed in a later test.)
    db = sqlite3.connect(path)
    try:
        with db:
            (blob,) = db.execute("SELECT blob FROM checkpoints WHERE seq = 1").fetchone()
            flipped = bytearray(blob)
            flipped[-3] ^= 1
            db.execute("UPDATE checkpoints SET blob = ? WHERE seq = 1", (bytes(flipped),))
    finally:
        db.close()

    async def load() -> int:
        async with SQLiteCheckpointer(path) as store:
            return (await store.load("r"))[0]

    assert anyio.run(load) == 11  # not read by a load: the last snapshot's link binds it
    refused = cli("runs", "verify", "r", "--db", str(path))
    assert refused.returncode != 0
    assert "checkpoint 1 " in refused.stderr
