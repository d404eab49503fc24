"""The PostgreSQL store: the store behaviour suite again, then what only PostgreSQL has.

Every behaviour test of tests/test_store.py that builds its stores with ``make_store``
runs here once more against PostgreSQL (the ``make_store`` below builds
``PostgresCheckpointer`` s on one fresh schema of the session's throwaway cluster);
the ``store`` fixture of conftest.py runs the durable-run, ledger and worker tests on
PostgreSQL too. Then: workers claiming from separate connections get distinct runs and
never wait for a row another holds (``FOR UPDATE SKIP LOCKED``), several processes
creating the tables at once all succeed, two stores on one run take turns, the pool is
closed, a damaged blob is refused naming the run, a bad DSN is one clear error, and
missing PostgreSQL binaries fail the cluster saying what to install.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pg_cluster
import psycopg
import pytest
import test_store
from pg_cluster import Cluster, free_port
from support import exactly
from test_store import Factory, document, save_run

from statemachine import (
    CheckpointCorruptError,
    CheckpointOrderError,
    ConfigError,
    PostgresCheckpointer,
    RunStatus,
)
from statemachine.persist._base import _Store
from statemachine.persist._chain import _Chain

pytestmark = pytest.mark.anyio

# The behaviour suite of tests/test_store.py, collected here a second time: these tests
# ask for ``make_store``, which in this module builds PostgreSQL stores.
globals().update(
    {
        name: test
        for name, test in vars(test_store).items()
        if name.startswith("test_")
        and callable(test)
        and "make_store" in inspect.signature(test).parameters
    }
)


@pytest.fixture
async def make_store(pg_cluster: Cluster) -> AsyncIterator[Factory]:
    """Builds PostgreSQL stores on one fresh schema (all of a test's stores share it)."""
    dsn = pg_cluster.fresh_dsn()
    opened: list[PostgresCheckpointer] = []

    def make(**options: Any) -> Any:
        store = PostgresCheckpointer(dsn, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.aclose()


@pytest.fixture
def dsn(pg_cluster: Cluster) -> str:
    """A DSN on a fresh, empty schema."""
    return pg_cluster.fresh_dsn()


@pytest.fixture
def raw(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain connection of the test's own, on the same schema as ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


LEASE = timedelta(minutes=5)


async def submit(store: PostgresCheckpointer, count: int) -> list[str]:
    """Save ``count`` new runs, waiting for a worker; return their ids, oldest first."""
    run_ids = [f"run-{index:03d}" for index in range(count)]
    for run_id in run_ids:
        await store.save(run_id, 0, {"n": run_id}, agent="support", status="running", phase="Idle")
    return run_ids


# --- many workers ---------------------------------------------------------------------------


async def test_it_holds_the_chain_rules_and_counts_as_one_of_the_librarys_stores() -> None:
    """No _Store subclass (it holds a _Chain, as the SQLite store does), yet one of the
    library's stores: the runner hands it the saver's delta ops. Nothing connects until
    first use."""
    store = PostgresCheckpointer("postgresql://someone:secret@localhost/nowhere", snapshot_every=7)
    assert type(store)._takes_ops is True
    assert _Store not in type(store).__mro__
    assert isinstance(store._chain, _Chain)
    assert store.snapshot_every == store._chain.snapshot_every == 7
    with pytest.raises(ConfigError):
        PostgresCheckpointer("postgresql://localhost/nowhere", snapshot_every=0)


async def test_workers_on_separate_connections_claim_distinct_runs(dsn: str) -> None:
    """Four workers, each with its own pool, claim until none is left: each run once."""
    async with PostgresCheckpointer(dsn) as setup:
        run_ids = await submit(setup, 24)
    workers = [PostgresCheckpointer(dsn, max_size=2) for _ in range(4)]
    taken: dict[str, list[str]] = {f"worker-{index}": [] for index in range(len(workers))}

    async def work(owner: str, store: PostgresCheckpointer) -> None:
        while (record := await store.claim_next(owner, lease=LEASE)) is not None:
            taken[owner].append(record.run_id)
            await anyio.lowlevel.checkpoint()  # let the others in between claims

    async with anyio.create_task_group() as group:
        for (owner, _), store in zip(taken.items(), workers, strict=True):
            group.start_soon(work, owner, store)
    for store in workers:
        await store.aclose()

    claimed = [run_id for runs in taken.values() for run_id in runs]
    assert sorted(claimed) == run_ids  # every run, and none twice
    async with PostgresCheckpointer(dsn) as reader:
        leases = await reader.leases()
    assert sorted(lease.run_id for lease in leases) == run_ids
    assert {lease.run_id: lease.owner for lease in leases} == {
        run_id: owner for owner, runs in taken.items() for run_id in runs
    }


async def test_claim_next_passes_over_a_run_whose_row_another_transaction_holds(
    dsn: str, raw: psycopg.Connection[Any]
) -> None:
    """SKIP LOCKED: while another transaction holds the oldest run's row, the next is taken."""
    async with PostgresCheckpointer(dsn) as store:
        first, second, _third = await submit(store, 3)
        with raw.transaction():
            raw.execute("SELECT 1 FROM statemachine_runs WHERE run_id = %s FOR UPDATE", (first,))
            with anyio.fail_after(30):  # a claim_next that waited for the row would hang here
                record = await store.claim_next("worker-a", lease=LEASE)
            assert record is not None
            assert record.run_id == second
        record = await store.claim_next("worker-b", lease=LEASE)
        assert record is not None
        assert record.run_id == first  # released: the oldest is taken again


async def test_a_run_whose_lease_lapsed_is_claimed_again(dsn: str) -> None:
    """A worker that died holds its run only until its lease lapses."""
    clock = test_store.WallClock()
    async with PostgresCheckpointer(dsn, clock=clock) as store:
        (run_id,) = await submit(store, 1)
        taken = await store.claim_next("dead-worker", lease=LEASE)
        assert taken is not None
        assert await store.claim_next("live-worker", lease=LEASE) is None
        clock.advance(minutes=5)
        again = await store.claim_next("live-worker", lease=LEASE)
        assert again is not None
        assert again.run_id == run_id
        leases = await store.leases(run_id)
    assert [(lease.owner, lease.until) for lease in leases] == [
        ("dead-worker", test_store.START + LEASE),
        ("live-worker", test_store.START + 2 * LEASE),
    ]


# --- two processes on one run ---------------------------------------------------------------


async def test_stores_taking_turns_on_one_run_rebuild_and_save_exact_deltas(dsn: str) -> None:
    """Each store saves after the other (as two processes would): each rebuilds, none drifts."""
    async with (
        PostgresCheckpointer(dsn, snapshot_every=50) as one,
        PostgresCheckpointer(dsn, snapshot_every=50) as other,
    ):
        for seq in range(12):
            await (one if seq % 2 else other).save(
                "r1", seq, document(seq), agent="travel", status="running", phase="Planning"
            )
        assert await one.load("r1") == (11, document(11))
        assert [entry.snapshot for entry in await other.history("r1")] == [True] + [False] * 11


async def test_two_stores_saving_the_same_checkpoint_at_once_let_exactly_one_in(
    dsn: str,
) -> None:
    """The same new run's checkpoint 0 from two pools at once: one saved, one refused."""
    stores = [PostgresCheckpointer(dsn), PostgresCheckpointer(dsn)]
    outcomes: list[str] = []

    async def save(store: PostgresCheckpointer, by: str) -> None:
        try:
            await store.save("r1", 0, {"by": by}, agent="a", status="running", phase="Idle")
        except CheckpointOrderError as error:
            outcomes.append(f"refused, expected {error.expected}")
        else:
            outcomes.append("saved")

    async with anyio.create_task_group() as group:
        for index, store in enumerate(stores):
            group.start_soon(save, store, f"store-{index}")
    assert sorted(outcomes) == ["refused, expected 1", "saved"]
    assert [entry.seq for entry in await stores[0].history("r1")] == [0]
    for store in stores:
        await store.aclose()


# --- the schema, the pool -------------------------------------------------------------------

CREATE_AND_SAVE = """
import sys

import anyio

from statemachine import PostgresCheckpointer


async def main(dsn: str, run_id: str) -> None:
    async with PostgresCheckpointer(dsn) as store:
        await store.save(run_id, 0, {"by": run_id}, agent="race", status="running", phase="Idle")


anyio.run(main, sys.argv[1], sys.argv[2])
"""


def test_processes_starting_at_once_on_an_empty_database_all_create_and_save(dsn: str) -> None:
    """Four processes create the tables at the same moment: each succeeds, tables exist once."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CREATE_AND_SAVE, dsn, f"racer-{index}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for index in range(4)
    ]
    errors = [process.communicate(timeout=120)[1].decode() for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, errors
    with psycopg.connect(dsn) as connection:
        runs = connection.execute("SELECT run_id FROM statemachine_runs ORDER BY run_id")
        assert [run_id for (run_id,) in runs] == [f"racer-{index}" for index in range(4)]
        tables = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'statemachine_%'"
        ).fetchone()
    assert tables == (5,)


def connections_named(dsn: str, name: str) -> int:
    with psycopg.connect(dsn) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


async def test_the_pool_is_closed_on_exit_and_opened_again_on_use(dsn: str) -> None:
    """Leaving ``async with`` closes every connection; a later call opens a new pool."""
    named = f"{dsn} application_name=pool-under-test"
    store = PostgresCheckpointer(named, min_size=2, max_size=2)
    async with store:
        await store.save("r1", 0, {"n": 1}, agent="a", status="running", phase="Idle")
        assert connections_named(dsn, "pool-under-test") == 2
    for _ in range(100):  # a backend leaves pg_stat_activity just after its client is gone
        if connections_named(dsn, "pool-under-test") == 0:
            break
        await anyio.sleep(0.05)
    assert connections_named(dsn, "pool-under-test") == 0
    assert (await store.record("r1")).status is RunStatus.RUNNING  # opened again
    await store.aclose()


async def test_a_damaged_blob_is_refused_naming_the_run(
    dsn: str, raw: psycopg.Connection[Any]
) -> None:
    """A blob cut short in the database: that run is refused with what to do; others load."""
    async with PostgresCheckpointer(dsn, snapshot_every=10) as store:
        await save_run(store, "victim", 15)
        await save_run(store, "bystander", 15)
        raw.execute(
            "UPDATE statemachine_checkpoints SET blob = substring(blob FROM 1 FOR 40) "
            "WHERE run_id = 'victim' AND seq = 12"
        )
        where = store._where  # the DSN, without a password
        with pytest.raises(
            CheckpointCorruptError,
            match=exactly(
                "checkpoint of run 'victim': checkpoint 12 does not match its checksum "
                f"(truncated or overwritten). Nothing was loaded and nothing in {where} was "
                "changed; other runs are unaffected. Restore the store from a backup to resume "
                "this run, or abort it and start it again."
            ),
        ):
            await store.load("victim")
        assert await store.load("bystander") == (14, document(14))
    assert where == f"the PostgreSQL store {dsn!r}"


# --- a bad DSN ------------------------------------------------------------------------------


def test_a_dsn_that_cannot_be_read_is_refused_at_once() -> None:
    """A malformed DSN fails when the store is built, saying how to write one."""
    with pytest.raises(ConfigError) as caught:
        PostgresCheckpointer("host=localhost port")
    assert re.fullmatch(
        re.escape(
            "invalid configuration: the PostgreSQL DSN 'host=localhost port' cannot be read ("
        )
        + ".+"
        + re.escape(
            "); write it as 'postgresql://user@host:5432/dbname' or 'host=... port=... "
            "dbname=... user=...'. Fix the configuration and start again: nothing was "
            "started with it."
        ),
        str(caught.value),
    )


async def test_a_server_that_cannot_be_reached_is_one_clear_error_without_the_password() -> None:
    """Nothing listens there: one ConfigError naming the DSN (no password) and what to check."""
    port = free_port()
    store = PostgresCheckpointer(f"postgresql://app:s3cret@127.0.0.1:{port}/runs?connect_timeout=5")
    with pytest.raises(ConfigError) as caught:
        await store.record("r1")
    message = str(caught.value)
    assert "s3cret" not in message
    where = (
        f"the PostgreSQL store 'host=127.0.0.1 port={port} dbname=runs user=app connect_timeout=5'"
    )
    assert re.fullmatch(
        re.escape(f"invalid configuration: cannot connect to {where} (")
        + ".*Connection refused.*"
        + re.escape(
            "); check the DSN's host, port, dbname, user and password, and that the server "
            "is running and accepts connections from here. Fix the configuration and start "
            "again: nothing was started with it."
        ),
        message,
    ), message
    await store.aclose()


async def test_an_unknown_database_is_one_clear_error(pg_cluster: Cluster) -> None:
    """The server is there but the database is not: the server's reason is in the message."""
    store = PostgresCheckpointer(pg_cluster.dsn.replace("dbname=postgres", "dbname=nowhere"))
    with pytest.raises(ConfigError, match='database "nowhere" does not exist'):
        await store.record("r1")


def test_without_postgresql_binaries_the_cluster_fails_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No initdb anywhere: the session's cluster fails (never skips) and names the package."""
    monkeypatch.setattr(pg_cluster, "find_bindir", lambda: None)
    with pytest.raises(RuntimeError, match=exactly(pg_cluster.INSTALL)):
        pg_cluster.Cluster()
    assert "apt-get install -y postgresql" in pg_cluster.INSTALL
