"""Many workers on PostgreSQL: 200 support runs, 4 worker processes, workers killed at random.

What must hold afterwards, read from the store and the payments service (not from the
workers' own output, which a killed worker never finishes writing):

- every run ended completed or waits for a person (``interrupted``);
- no refund was paid twice: one receipt at most per order (each run refunds its own);
- no run was held by two workers at once: per run, the lease history has no overlap;
- the kills really landed mid-run: some run was taken over from a worker that never
  released it.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest
from pg_cluster import Cluster
from test_worker import environment

from agents.support import PaymentsService, support_requests, worker_runner
from statemachine import LeaseRecord, PostgresCheckpointer, RunStatus

pytestmark = pytest.mark.anyio

RUNS = 200
WORKERS = 4
KILLS = 8
LEASE = "1s"  # a killed worker's run is free again after a second


def overlapping(leases: list[LeaseRecord]) -> list[tuple[LeaseRecord, LeaseRecord]]:
    """Pairs of leases of one run held at the same time (there must be none)."""
    by_run: dict[str, list[LeaseRecord]] = {}
    for lease in leases:
        by_run.setdefault(lease.run_id, []).append(lease)
    clashes: list[tuple[LeaseRecord, LeaseRecord]] = []
    for held in by_run.values():
        ordered = sorted(held, key=lambda lease: lease.claimed_at)
        clashes += [(a, b) for a, b in itertools.pairwise(ordered) if b.claimed_at < a.ended_at]
    return clashes


class Fleet:
    """Worker processes on one DSN; a killed one is replaced by a new one under a new name."""

    def __init__(self, dsn: str, payments: Path, log: Path) -> None:
        self._dsn = dsn
        self._env = environment(SUPPORT_PAYMENTS_DB=str(payments), WORKER_TEST_MODEL_DELAY="0.01")
        self._log = log
        self._names = itertools.count(1)
        self.live: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: list[str] = []

    def start(self) -> None:
        owner = f"w{next(self._names)}"
        command = [sys.executable, "-m", "statemachine", "worker"]
        command += ["--agent", "worker_support:slow_runner", "--dsn", self._dsn]
        command += ["--owner", owner, "--lease", LEASE, "--poll", "50ms"]
        with (self._log / f"{owner}.err").open("wb") as err:
            self.live[owner] = subprocess.Popen(
                command, env=self._env, stdout=subprocess.DEVNULL, stderr=err
            )

    def kill(self, owner: str) -> None:
        process = self.live.pop(owner)
        process.kill()
        process.wait()
        self.killed.append(owner)

    def errors(self) -> dict[str, str]:
        """What the workers wrote to stderr that is not a log line."""
        said = {path.name: path.read_text() for path in self._log.glob("w*.err")}
        return {name: text for name, text in said.items() if "Traceback" in text}

    def said(self, owner: str) -> str:
        """What worker ``owner`` wrote to stderr (its log lines, a refusal, a traceback)."""
        return (self._log / f"{owner}.err").read_text(errors="replace")

    def why(self, owner: str, code: int | None) -> str:
        """Worker ``owner``'s exit code and the end of its stderr: a failure says why (a
        refusal is one line there, not a traceback; a worker killed by a signal, nothing)."""
        return f"exit code {code}; stderr ends:\n" + "".join(
            self.said(owner).splitlines(True)[-15:]
        )

    def unclean(self, codes: dict[str, int]) -> dict[str, str]:
        """The stopped workers that did not exit 0, each with :meth:`why`."""
        return {owner: self.why(owner, code) for owner, code in codes.items() if code != 0}

    async def started(self) -> None:
        """Wait until every live worker has said "worker started" (its SIGTERM handler is
        in place from then on: SIGTERM is a stop, not the default end of a process that
        has not taken a run yet). One that ended on its own fails the test, with why."""
        with anyio.fail_after(120):
            while not all("worker started" in self.said(owner) for owner in self.live):
                ended = {
                    o: self.why(o, p.returncode)
                    for o, p in self.live.items()
                    if p.poll() is not None
                }
                assert not ended, ended
                await anyio.sleep(0.05)

    def stop_all(self) -> dict[str, int]:
        codes: dict[str, int] = {}
        for process in self.live.values():
            process.terminate()
        for owner, process in self.live.items():
            try:
                codes[owner] = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[owner] = process.wait()
        self.live.clear()
        return codes


async def holding(store: PostgresCheckpointer, fleet: Fleet) -> list[str]:
    """The live workers that hold a run now (waiting, with a deadline, until one does)."""
    with anyio.fail_after(60):
        while True:
            open_leases = {lease.owner for lease in await store.leases() if not lease.released_at}
            owners = sorted(open_leases & set(fleet.live))
            if owners:
                return owners
            await anyio.sleep(0.02)


async def test_four_workers_and_random_kills_finish_every_run_and_pay_each_refund_once(
    pg_cluster: Cluster, tmp_path: Path
) -> None:
    dsn = pg_cluster.fresh_dsn("fleet")
    payments_file = tmp_path / "payments.sqlite3"
    async with PostgresCheckpointer(dsn) as store:
        with PaymentsService(":memory:") as unused:
            runner = worker_runner(store, payments=unused)
            ids = [await runner.submit(ctx, text) for ctx, text in support_requests(RUNS)]

        fleet = Fleet(dsn, payments_file, tmp_path)
        rng = random.Random(7)
        settled = {RunStatus.COMPLETED, RunStatus.INTERRUPTED}
        try:
            for _ in range(WORKERS):
                fleet.start()
            # Every so often, kill a worker that holds a run at that moment (chosen at
            # random among them), and start a new one in its place.
            for _ in range(KILLS):
                await anyio.sleep(rng.uniform(0.1, 0.5))
                fleet.kill(rng.choice(await holding(store, fleet)))
                fleet.start()
            with anyio.fail_after(240):
                while True:
                    records = await store.registry()
                    if all(record.status in settled for record in records):
                        break
                    await anyio.sleep(0.2)
            # Under load the last replacement may still be starting: stop it once it can be.
            await fleet.started()
        finally:
            codes = fleet.stop_all()
        assert codes == dict.fromkeys(codes, 0), (fleet.unclean(codes), fleet.errors())

        records = await store.registry()
        leases = await store.leases()

    # Every run ended or waits for a person.
    assert sorted(record.run_id for record in records) == sorted(ids)
    statuses = Counter(record.status for record in records)
    assert set(statuses) <= {RunStatus.COMPLETED, RunStatus.INTERRUPTED}, statuses
    assert statuses[RunStatus.COMPLETED] > RUNS // 2

    # No refund paid twice: each run refunds an order of its own, at most once.
    with PaymentsService(payments_file) as service:
        receipts = service.receipts()
    paid = Counter(receipt.order_id for receipt in receipts)
    assert paid
    assert max(paid.values()) == 1, paid.most_common(3)

    # No run held by two workers at once, and the kills landed mid-run: some run was
    # taken over from a killed worker that never released it.
    assert overlapping(leases) == []
    dropped = [lease for lease in leases if lease.released_at is None]
    assert dropped, "no kill landed while a worker held a run"
    assert {lease.owner for lease in dropped} <= set(fleet.killed)
    holders = Counter(lease.run_id for lease in leases)
    assert any(holders[lease.run_id] >= 2 for lease in dropped), "no run was taken over"
    assert len(fleet.killed) == KILLS
