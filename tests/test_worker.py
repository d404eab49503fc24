"""Workers: runs submitted to a store are driven to an end, one worker at a time per run.

The in-process tests take the ``store`` fixture (every backend conftest lists); the
process tests start real worker processes on a SQLite file, stop them with SIGTERM
or kill them, and read what they left in the store.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import exactly

from agents.support import (
    DeskModel,
    PaymentsService,
    SupportContext,
    SupportDesk,
    support_agent,
    support_requests,
    worker_runner,
)
from statemachine import (
    Approve,
    Checkpointer,
    ConfigError,
    Denial,
    LeaseRecord,
    MemoryCheckpointer,
    ModelReply,
    ModelRequest,
    Runner,
    RunRecord,
    RunStatus,
    SetupError,
    SQLiteCheckpointer,
    dump_decision,
)
from statemachine._worker import Worker
from statemachine.cli import main
from statemachine.testing import ScriptedGate, ScriptedModel

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).parent
ROOT = TESTS.parent
ADA = SupportContext(customer_id="C-17")
SMALL = "Order 2000 never arrived. My code is 4417. Refund it, please."  # $10.00: by policy
LARGE = "Order 2074 never arrived. My code is 4417. Refund it, please."  # $84.74: a person
QUESTION = "Where is my order 2001?"


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[PaymentsService]:
    """The support agent's payments service, in a file of the test's own."""
    with PaymentsService(tmp_path / "payments.sqlite3") as service:
        yield service


def no_overlap(leases: list[LeaseRecord]) -> bool:
    """No two leases of one run were held at the same time."""
    by_run: dict[str, list[LeaseRecord]] = {}
    for lease in leases:
        by_run.setdefault(lease.run_id, []).append(lease)
    for held in by_run.values():
        ordered = sorted(held, key=lambda lease: lease.claimed_at)
        for before, after in itertools.pairwise(ordered):
            if after.claimed_at < before.ended_at:
                return False
    return True


async def approval_for(store: Checkpointer, run_id: str, *, by: str) -> dict[str, Any]:
    """A person's approval of the exact call the run waits on, read from its checkpoint."""
    _, document = await store.load(run_id)
    call = document["fields"]["call"]
    approval = Approve(
        by=by,
        at=(await store.record(run_id)).updated_at,
        run_id=run_id,
        call_id=document["fields"]["call_id"],
        tool=call["tool"],
        args_hash=call["args_hash"],
    )
    return dump_decision(approval)


# --- in one process ----------------------------------------------------------------------


async def test_a_worker_finishes_submitted_runs_and_leaves_waiting_ones(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """Submitted runs are driven to Done or to a person's approval; nothing is left held."""
    runner = worker_runner(store, payments=payments)
    small = await runner.submit(ADA, SMALL, run_id="small")
    large = await runner.submit(ADA, LARGE, run_id="large")
    question = await runner.submit(ADA, QUESTION, run_id="question")
    assert (await store.record(small)).status is RunStatus.RUNNING
    worker = Worker(store, [runner], owner="w1", exit_when_idle=True)
    outcomes = await worker.run()
    assert dict(outcomes) == {"done": 2, "paused": 1}
    statuses = {record.run_id: record.status for record in await store.registry()}
    assert statuses == {
        small: RunStatus.COMPLETED,
        large: RunStatus.INTERRUPTED,
        question: RunStatus.COMPLETED,
    }
    assert [receipt.amount for receipt in payments.receipts()] == [Decimal("10.00")]
    leases = await store.leases()
    assert sorted(lease.run_id for lease in leases) == ["large", "question", "small"]
    assert all(lease.owner == "w1" and lease.released_at is not None for lease in leases)
    again = Worker(store, {"support": runner}, owner="w2", exit_when_idle=True)
    assert dict(await again.run()) == {}  # the waiting run is never taken without a decision


async def test_a_decision_submitted_elsewhere_gets_the_run_finished_by_a_worker(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """An approval pays the exact refund once; a denial pays nothing; both runs complete."""
    runner = worker_runner(store, payments=payments)
    await runner.submit(ADA, LARGE, run_id="approved")
    await runner.submit(ADA, LARGE.replace("2074", "2075"), run_id="denied")
    await Worker(store, [runner], exit_when_idle=True).run()
    assert {r.status for r in await store.registry()} == {RunStatus.INTERRUPTED}
    # Elsewhere (the CLI, another machine): a person decides, through the store only.
    await store.submit_decision("approved", await approval_for(store, "approved", by="lin"))
    await store.submit_decision("denied", dump_decision(Denial(reason="too much", denied_by="lin")))
    fresh = worker_runner(store, payments=payments)
    outcomes = await Worker(store, [fresh], exit_when_idle=True).run()
    assert dict(outcomes) == {"done": 2}
    for run_id in ("approved", "denied"):
        record = await store.record(run_id)
        assert (record.status, record.decision_pending) == (RunStatus.COMPLETED, False)
        assert await store.decision(run_id) is None
    assert [(r.order_id, r.amount) for r in payments.receipts()] == [(2074, Decimal("84.74"))]
    _, approved = await store.load("approved")
    assert approved["fields"]["answer"] == "Refunded $84.74 (RF-0001)."
    _, denied = await store.load("denied")
    assert denied["fields"]["answer"].startswith("Nothing was refunded: Not approved")


class Steered:
    """A desk model that does something from outside the run on its ``at``-th call."""

    def __init__(self, at: int, action: Any) -> None:
        self.at = at
        self.action = action
        self.calls = 0
        self.desk = DeskModel()

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        if self.calls == self.at:
            await self.action()
        return await self.desk.complete(request)


async def test_a_stop_requested_elsewhere_stops_the_run_at_its_next_checkpoint(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """A run driven here (no lease) is cancelled at once; its next save keeps it stopped there."""
    model = Steered(2, lambda: store.request_stop("r1"))
    runner = worker_runner(store, payments=payments, model=model)
    result = await runner.run(ADA, SMALL, run_id="r1")
    assert result.status == "stopped"
    assert result.history == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Observing",
        "Planning",
        "ToolCalling",
    )
    record = await store.record("r1")
    assert (record.status, record.phase, record.stop_requested) == (
        RunStatus.CANCELLED,
        "ToolCalling",
        False,
    )
    assert await store.claim_next("w1", lease=timedelta(minutes=1)) is None
    resumed = await worker_runner(store, payments=payments).resume("r1")
    assert resumed.status == "done"
    assert [receipt.amount for receipt in payments.receipts()] == [Decimal("10.00")]


async def test_a_stop_requested_while_a_worker_drives_the_run_is_seen_at_its_next_save(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """Under a live lease the request is a flag; the worker cancels the run at its next save."""
    flags: list[bool] = []

    async def stop_it() -> None:
        flags.append((await store.request_stop("r1")).stop_requested)

    runner = worker_runner(store, payments=payments, model=Steered(2, stop_it))
    await runner.submit(ADA, SMALL, run_id="r1")
    assert dict(await Worker(store, [runner], exit_when_idle=True).run()) == {"stopped": 1}
    assert flags == [True]
    record = await store.record("r1")
    assert (record.status, record.phase, record.stop_requested) == (
        RunStatus.CANCELLED,
        "ToolCalling",
        False,
    )
    assert payments.receipts() == []


async def test_a_lost_lease_stops_the_run_and_leaves_its_status_to_the_new_holder(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """When renewal fails (another worker took the run), the runner stops without marking it."""

    async def taken_over() -> None:
        await store.release("r1", "w1")
        assert await store.claim("r1", "w2", lease=timedelta(minutes=5))
        await anyio.sleep(5)  # the renewal finds the lease gone and cancels this call

    runner = worker_runner(store, payments=payments, model=Steered(2, taken_over))
    await runner.submit(ADA, SMALL, run_id="r1")
    assert await store.claim_next("w1", lease=timedelta(seconds=1)) is not None
    result = await runner.resume("r1", owner="w1", lease=timedelta(milliseconds=300))
    assert result.status == "stopped"
    record = await store.record("r1")
    assert record.status is RunStatus.RUNNING
    assert [(lease.owner, lease.released_at is None) for lease in await store.leases("r1")] == [
        ("w1", False),
        ("w2", True),
    ]
    assert not await store.claim("r1", "w3")


async def test_stop_hands_the_run_back_at_its_next_checkpoint_for_another_worker(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """Worker.stop(): the phase under way is finished and saved, the run stays running, unheld."""
    holder: list[Worker] = []

    async def shut_down() -> None:
        holder[0].stop()

    runner = worker_runner(store, payments=payments, model=Steered(2, shut_down))
    await runner.submit(ADA, SMALL, run_id="r1")
    worker = Worker(store, [runner], owner="w1", poll=timedelta(seconds=30))
    holder.append(worker)
    assert dict(await worker.run()) == {"stopped": 1}
    record = await store.record("r1")
    assert (record.status, record.phase) == (RunStatus.RUNNING, "ToolCalling")
    assert [lease.released_at is not None for lease in await store.leases("r1")] == [True]
    fresh = worker_runner(store, payments=payments)
    finisher = Worker(store, [fresh], owner="w2", exit_when_idle=True)
    assert dict(await finisher.run()) == {"done": 1}
    assert (await store.record("r1")).status is RunStatus.COMPLETED
    assert [receipt.amount for receipt in payments.receipts()] == [Decimal("10.00")]
    assert no_overlap(await store.leases())


async def test_max_runs_stops_the_worker_after_that_many(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """A worker told to take two runs takes two, oldest first, and leaves the rest."""
    runner = worker_runner(store, payments=payments)
    ids = [await runner.submit(ADA, QUESTION, run_id=f"q{n}") for n in range(4)]
    worker = Worker(store, [runner], max_runs=2, poll=timedelta(seconds=30))
    assert worker.processed == 0
    assert dict(await worker.run()) == {"done": 2}
    assert [r.status for r in await store.registry()] == [
        RunStatus.RUNNING,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,
        RunStatus.COMPLETED,
    ]
    assert sorted(lease.run_id for lease in await store.leases()) == ids[:2]


async def test_a_worker_takes_only_its_agents_runs(
    store: Checkpointer, payments: PaymentsService
) -> None:
    """A run of an agent the worker has no runner for is left for another worker."""
    runner = worker_runner(store, payments=payments)
    await runner.submit(ADA, QUESTION, run_id="mine")
    await store.save("theirs", 0, {"kind": "Idle"}, agent="travel", status="running", phase="Idle")
    assert dict(await Worker(store, [runner], exit_when_idle=True).run()) == {"done": 1}
    assert (await store.record("theirs")).status is RunStatus.RUNNING
    assert await store.leases("theirs") == []


async def test_a_worker_handling_signals_has_its_handlers_in_place_at_its_first_claim(
    payments: PaymentsService,
) -> None:
    """Worker.run(handle_signals=True) watches SIGTERM before it claims anything: a SIGTERM
    sent from the first claim on stops it (nothing taken), never the default end."""
    seen: list[Any] = []
    holder: list[Worker] = []

    class SignalAtFirstClaim(MemoryCheckpointer):
        async def claim_next(
            self, owner: str, *, agents: Any = None, lease: timedelta
        ) -> RunRecord | None:
            seen.append(signal.getsignal(signal.SIGTERM))
            if len(seen) == 1:
                if seen[0] is signal.SIG_DFL:  # not watched yet: the signal would end pytest
                    holder[0].stop()
                else:
                    os.kill(os.getpid(), signal.SIGTERM)
            return None

    default = signal.getsignal(signal.SIGTERM)
    store = SignalAtFirstClaim()
    worker = Worker(store, [worker_runner(store, payments=payments)], poll=timedelta(seconds=30))
    holder.append(worker)
    with anyio.fail_after(20):  # the poll is 30 s: only the signal ends the wait
        assert dict(await worker.run(handle_signals=True)) == {}
    assert seen[0] not in (signal.SIG_DFL, default), seen
    assert signal.getsignal(signal.SIGTERM) == default  # given back when the worker stops


def test_a_worker_with_bad_settings_is_refused_listing_every_problem(tmp_path: Path) -> None:
    """No runner, a runner under another agent's name, a zero lease, zero max_runs."""
    store = SQLiteCheckpointer(tmp_path / "runs.sqlite3")
    with PaymentsService(tmp_path / "payments.sqlite3") as service:
        runner = worker_runner(store, payments=service)
        with pytest.raises(ConfigError, match="a worker needs at least one runner"):
            Worker(store, [])
        with pytest.raises(
            ConfigError,
            match=exactly(
                "invalid configuration: the runner under 'travel' runs the agent 'support'; "
                "lease must be a positive duration, got datetime.timedelta(0); max_runs must "
                "be a positive int, got 0. Fix the configuration and start again: nothing was "
                "started with it."
            ),
        ):
            Worker(store, {"travel": runner}, lease=timedelta(0), max_runs=0)


def test_runner_submit_needs_a_checkpointer() -> None:
    """Submitting is for workers, which find the run in a store: a runner without one refuses."""
    with PaymentsService(":memory:") as service:
        runner = Runner(
            support_agent(),
            model=ScriptedModel([]),
            gate=ScriptedGate([]),
            deps=SupportDesk(payments=service),
        )
        with pytest.raises(SetupError, match=r"^Runner.submit\(\) needs saved runs"):
            anyio.run(runner.submit, ADA, QUESTION)


# --- the command, in this process ----------------------------------------------------------


def test_the_command_refuses_an_agent_module_without_a_factory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A module with no worker_runner, or a factory returning no Runner: one line, exit 1."""
    db = str(tmp_path / "runs.sqlite3")
    assert main(["worker", "--agent", "statemachine._json", "--db", db]) == 1
    assert capsys.readouterr().err == (
        "statemachine worker: statemachine._json has no worker_runner(checkpointer) that "
        "builds a Runner; define one, or name the function as MODULE:FUNCTION\n"
    )
    assert main(["worker", "--agent", "no_such_module_here", "--db", db]) == 1
    assert capsys.readouterr().err.startswith(
        "statemachine worker: cannot import the agent module 'no_such_module_here'"
    )
    sys.path.insert(0, str(TESTS))
    try:
        argv = ["worker", "--agent", "worker_support:not_a_runner", "--db", db, "--create"]
        assert main(argv) == 1
    finally:
        sys.path.remove(str(TESTS))
    assert "returned str, not a Runner" in capsys.readouterr().err


def test_the_command_refuses_a_store_it_cannot_open(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that cannot be made is one line and exit 1 at start, not a retry loop."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    db = str(blocked / "runs.sqlite3")
    argv = ["worker", "--agent", "agents.support", "--db", db, "--exit-when-idle", "--create"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("statemachine worker: cannot open the store (")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--lease", "soon", "'soon' is not a duration; write a number with a unit"),
        ("--poll", "0s", "'0s' is not a positive duration"),
        ("--max-runs", "-3", "'-3' is not a positive whole number"),
    ],
)
def test_the_command_refuses_a_setting_it_cannot_read(
    flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad duration or count: usage and the reason, exit 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(["worker", "--agent", "agents.support", flag, value])
    assert exit_info.value.code == 2
    assert said in capsys.readouterr().err


# --- real worker processes -----------------------------------------------------------------


def environment(**extra: str) -> dict[str, str]:
    """The tests' environment for a child process, with the tests folder importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("STATEMACHINE_DSN", None)
    env.pop("STATEMACHINE_CHECKPOINT_KEYS", None)
    env.update(extra)
    return env


def worker_command(db: Path, *args: str, agent: str = "agents.support") -> list[str]:
    """``python -m statemachine worker`` on ``db``."""
    command = [sys.executable, "-m", "statemachine", "worker", "--agent", agent]
    return [*command, "--db", str(db), *args]


async def submitted(db: Path, count: int) -> list[str]:
    """``count`` support requests submitted to the SQLite store at ``db``."""
    async with SQLiteCheckpointer(db) as store:
        with PaymentsService(":memory:") as unused:
            runner = worker_runner(store, payments=unused)
            return [await runner.submit(ctx, text) for ctx, text in support_requests(count)]


async def wait_for(db: Path, condition: Callable[[list[RunRecord]], bool]) -> None:
    """Poll the store (another process writes it) until ``condition(registry)`` holds."""
    async with SQLiteCheckpointer(db) as store:
        with anyio.fail_after(60):
            while not condition(await store.registry()):  # noqa: ASYNC110 - another process
                await anyio.sleep(0.05)


async def test_the_support_submit_command_saves_runs_for_workers(tmp_path: Path) -> None:
    """``python -m agents.support submit`` prints one run id per request, each runnable."""
    db = tmp_path / "runs.sqlite3"
    command = [sys.executable, "-m", "agents.support", "submit", "--db", str(db), "--count", "3"]
    done = await anyio.run_process(command, env=environment())
    ids = done.stdout.decode().split()
    assert len(ids) == 3
    async with SQLiteCheckpointer(db) as store:
        records = await store.registry()
        assert sorted(record.run_id for record in records) == sorted(ids)
        assert {(r.status, r.phase, r.seq) for r in records} == {(RunStatus.RUNNING, "Idle", 0)}
        assert await store.leases() == []


async def test_a_worker_process_drives_submitted_runs_to_completion(tmp_path: Path) -> None:
    """``--exit-when-idle``: every run ends completed or waiting for a person, leases released."""
    db = tmp_path / "runs.sqlite3"
    ids = await submitted(db, 8)
    command = worker_command(db, "--exit-when-idle", "--owner", "proc-1")
    done = await anyio.run_process(command, env=environment(), check=False)
    assert done.returncode == 0, done.stderr.decode()
    async with SQLiteCheckpointer(db) as store:
        records = await store.registry()
        leases = await store.leases()
    assert sorted(record.run_id for record in records) == sorted(ids)
    statuses = [record.status for record in records]
    assert set(statuses) == {RunStatus.COMPLETED, RunStatus.INTERRUPTED}
    waiting = statuses.count(RunStatus.INTERRUPTED)
    assert done.stdout.decode() == f"processed 8 runs: done {8 - waiting}, paused {waiting}\n"
    assert all(lease.owner == "proc-1" and lease.released_at is not None for lease in leases)
    questions = sum("Where is" in text for _, text in support_requests(8))
    with PaymentsService(tmp_path / "payments.sqlite3") as service:  # beside the store
        assert service.count() == 8 - waiting - questions


async def test_sigterm_finishes_the_phase_and_leaves_every_run_resumable(tmp_path: Path) -> None:
    """A worker stopped mid-run saves the phase, releases its lease, exits 0; nothing is lost."""
    db = tmp_path / "runs.sqlite3"
    ids = await submitted(db, 3)
    command = worker_command(db, "--owner", "proc-1", agent="worker_support:slow_runner")
    with (tmp_path / "out.txt").open("w") as out, (tmp_path / "err.txt").open("w") as err:
        async with await anyio.open_process(
            command, env=environment(WORKER_TEST_MODEL_DELAY="0.3"), stdout=out, stderr=err
        ) as worker:
            try:
                await wait_for(db, lambda records: any(record.seq >= 2 for record in records))
                worker.send_signal(signal.SIGTERM)
                with anyio.fail_after(60):
                    code = await worker.wait()
            finally:
                if worker.returncode is None:
                    worker.kill()
    assert code == 0, (tmp_path / "err.txt").read_text()
    assert (tmp_path / "out.txt").read_text().startswith("processed ")
    async with SQLiteCheckpointer(db) as store:
        records = await store.registry()
        # Nothing half-recorded: every run loads, and none was left cancelled or failed.
        for run_id in ids:
            await store.load(run_id)
        went_on = {RunStatus.RUNNING, RunStatus.COMPLETED, RunStatus.INTERRUPTED}
        assert {record.status for record in records} <= went_on
        assert any(r.status is RunStatus.RUNNING and r.seq > 0 for r in records)
        assert all(lease.released_at is not None for lease in await store.leases())
        # Another worker goes on from the last checkpoint of each.
        with PaymentsService(tmp_path / "payments.sqlite3") as service:
            fresh = worker_runner(store, payments=service)
            await Worker(store, [fresh], owner="proc-2", exit_when_idle=True).run()
        after = {record.status for record in await store.registry()}
        assert after <= {RunStatus.COMPLETED, RunStatus.INTERRUPTED}
        assert no_overlap(await store.leases())


async def test_sigterm_as_soon_as_the_worker_says_it_started_is_a_stop(tmp_path: Path) -> None:
    """The command logs "worker started" once its handlers are in place: SIGTERM sent the
    moment that line is written stops the worker (exit 0), never the default end."""
    db = tmp_path / "runs.sqlite3"
    await submitted(db, 2)
    command = worker_command(db, "--owner", "proc-1", agent="worker_support:slow_runner")
    said = tmp_path / "err.txt"
    with said.open("w") as err:
        async with await anyio.open_process(
            command, env=environment(), stdout=subprocess.DEVNULL, stderr=err
        ) as worker:
            try:
                with anyio.fail_after(60):
                    while "worker started" not in said.read_text():
                        assert worker.returncode is None, said.read_text()
                        await anyio.sleep(0.005)
                    worker.send_signal(signal.SIGTERM)
                    code = await worker.wait()
            finally:
                if worker.returncode is None:
                    worker.kill()
    assert code == 0, said.read_text()
    assert "worker stopped" in said.read_text()
    async with SQLiteCheckpointer(db) as store:
        assert all(lease.released_at is not None for lease in await store.leases())


async def test_a_running_worker_picks_up_a_decision_made_in_another_process(
    tmp_path: Path,
) -> None:
    """The run waits; this process approves it through the store; the worker process pays once."""
    db = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(db) as store:
        with PaymentsService(":memory:") as unused:
            run_id = await worker_runner(store, payments=unused).submit(ADA, LARGE)
    command = worker_command(db, "--owner", "proc-1", "--poll", "50ms")
    async with await anyio.open_process(
        command, env=environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as worker:
        try:
            await wait_for(db, lambda records: records[0].status is RunStatus.INTERRUPTED)
            async with SQLiteCheckpointer(db) as store:
                decision = await approval_for(store, run_id, by="lin")
                await store.submit_decision(run_id, decision)
            await wait_for(db, lambda records: records[0].status is RunStatus.COMPLETED)
            worker.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                assert await worker.wait() == 0
        finally:
            if worker.returncode is None:
                worker.kill()
    with PaymentsService(tmp_path / "payments.sqlite3") as service:
        assert [(r.order_id, r.amount) for r in service.receipts()] == [(2074, Decimal("84.74"))]
    async with SQLiteCheckpointer(db) as store:
        assert [lease.owner for lease in await store.leases(run_id)] == ["proc-1", "proc-1"]
        assert no_overlap(await store.leases(run_id))


async def test_a_killed_workers_run_is_taken_over_when_its_lease_lapses(tmp_path: Path) -> None:
    """SIGKILL leaves the run held; once the lease lapses another worker finishes it."""
    db = tmp_path / "runs.sqlite3"
    [run_id] = await submitted(db, 1)
    command = worker_command(
        db, "--owner", "doomed", "--lease", "1s", agent="worker_support:slow_runner"
    )
    async with await anyio.open_process(
        command,
        env=environment(WORKER_TEST_MODEL_DELAY="0.3"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as worker:
        try:
            await wait_for(db, lambda records: records[0].seq >= 2)
        finally:
            worker.kill()
            await worker.wait()
    async with SQLiteCheckpointer(db) as store:
        [held] = await store.leases(run_id)
        assert (held.owner, held.released_at) == ("doomed", None)
        with PaymentsService(tmp_path / "payments.sqlite3") as service:
            taker = Worker(
                store,
                [worker_runner(store, payments=service)],
                owner="heir",
                max_runs=1,
                lease=timedelta(seconds=5),
                poll=timedelta(milliseconds=50),
            )
            assert sum((await taker.run()).values()) == 1
        record = await store.record(run_id)
        assert record.status in {RunStatus.COMPLETED, RunStatus.INTERRUPTED}
        leases = await store.leases(run_id)
        assert [lease.owner for lease in leases] == ["doomed", "heir"]
        assert leases[1].claimed_at >= leases[0].until
        assert no_overlap(leases)


CLAIMER = textwrap.dedent(
    """
    import json, sys
    from datetime import timedelta
    import anyio
    from statemachine import SQLiteCheckpointer

    async def drain(path, owner):
        taken = []
        async with SQLiteCheckpointer(path) as store:
            while (record := await store.claim_next(owner, lease=timedelta(minutes=5))):
                taken.append(record.run_id)
        return taken

    print(json.dumps(anyio.run(drain, sys.argv[1], sys.argv[2])))
    """
)


async def test_processes_claiming_at_once_each_get_a_run_no_other_got(tmp_path: Path) -> None:
    """Four processes drain forty runs from one file at once: each run goes to exactly one."""
    db = tmp_path / "runs.sqlite3"
    async with SQLiteCheckpointer(db) as store:
        for n in range(40):
            await store.save(f"run-{n:02d}", 0, {"n": n}, agent="a", status="running", phase="Idle")
    taken: dict[str, list[str]] = {}

    async def claimer(owner: str) -> None:
        done = await anyio.run_process(
            [sys.executable, "-c", CLAIMER, str(db), owner], env=environment()
        )
        taken[owner] = json.loads(done.stdout)

    async with anyio.create_task_group() as group:
        for n in range(4):
            group.start_soon(claimer, f"p{n}")
    every = [run_id for runs in taken.values() for run_id in runs]
    assert sorted(every) == [f"run-{n:02d}" for n in range(40)]  # each once, none twice
    async with SQLiteCheckpointer(db) as store:
        leases = await store.leases()
    assert len(leases) == 40
    owners = {lease.run_id: lease.owner for lease in leases}
    assert all(owners[run_id] == owner for owner, runs in taken.items() for run_id in runs)
