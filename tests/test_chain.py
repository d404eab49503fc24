"""The authenticated chain of checkpoints (issue 18): a changed database is refused.

Each test damages one run (``victim``) in the store's own tables, as someone with write
access to the database could, and checks that loading it is refused with
:class:`CheckpointTamperedError` naming the run and a checkpoint, while the other runs
still load and the run can still be aborted. The matrix runs on SQLite and PostgreSQL,
with and without a key. A store written before heads were recorded is migrated once
(``tests/data/pre-chain-runs.db``, written by ``tests/data/make_pre_chain_runs.py``).
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster
from pydantic import BaseModel

from statemachine import (
    Agent,
    CheckpointCipher,
    CheckpointCorruptError,
    Checkpointer,
    CheckpointTamperedError,
    ConfigError,
    Done,
    PostgresCheckpointer,
    Runner,
    SQLiteCheckpointer,
    generate_key,
    write_tool,
)
from statemachine.persist._chain import _link
from statemachine.testing import ScriptedGate, ScriptedModel, reply

pytestmark = pytest.mark.anyio

DATA = Path(__file__).parent / "data"
PRE_CHAIN = DATA / "pre-chain-runs.db"
PRE_CHAIN_KEY = CheckpointCipher(
    {"k-old": bytes.fromhex("ab5438426474736576676874686973697361746573746b65796f6e6c79212121")},
    "k-old",
)
STEPS = 12


def document(step: int, run_id: str = "victim") -> dict[str, Any]:
    return {
        "run": run_id,
        "kind": "Planning",
        "fields": {"step": step, "notes": [f"{run_id}: note {i}" for i in range(step)]},
    }


async def save_run(store: Checkpointer, run_id: str, steps: int = STEPS) -> None:
    for seq in range(steps):
        await store.save(
            run_id, seq, document(seq, run_id), agent="travel", status="running", phase="P"
        )


Execute = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


class Backend:
    """A store of one kind, and raw SQL on its tables (``{runs}``, ``{checkpoints}``)."""

    def __init__(self, kind: str, tmp_path: Path, cluster: Cluster | None) -> None:
        self.kind = kind
        self.path = tmp_path / "runs.db"
        self.dsn = cluster.fresh_dsn() if cluster is not None else ""

    def open(self, sealer: CheckpointCipher | None) -> Any:
        if self.kind == "postgres":
            return PostgresCheckpointer(self.dsn, sealer=sealer, snapshot_every=4)
        return SQLiteCheckpointer(self.path, sealer=sealer, snapshot_every=4)

    @contextmanager
    def sql(self) -> Iterator[Execute]:
        # Where a run's head is kept: its row on PostgreSQL, its end marker on SQLite (the
        # row after its newest checkpoint, the only one whose head is set): ``{end}``, and
        # ``{at_end}`` before the run's terms; ``{at_rows}``: its checkpoints alone.
        names = {
            "runs": "runs",
            "checkpoints": "checkpoints",
            "end": "checkpoints",
            "at_end": "head IS NOT NULL AND",
            "at_rows": "head IS NULL AND",
        }
        if self.kind == "postgres":
            names = {key: f"statemachine_{value}" for key, value in names.items()}
            names.update(end="statemachine_runs", at_end="", at_rows="")
            with psycopg.connect(self.dsn, autocommit=True) as connection:

                def run_pg(statement: str, values: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                    cursor = connection.execute(
                        statement.format(**names).replace("?", "%s"),
                        values,
                    )
                    return list(cursor.fetchall()) if cursor.description else []

                yield run_pg
            return
        db = sqlite3.connect(self.path, isolation_level=None)
        try:

            def run_sqlite(statement: str, values: tuple[Any, ...]) -> list[tuple[Any, ...]]:
                return db.execute(statement.format(**names), values).fetchall()

            yield run_sqlite
        finally:
            db.close()


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    cluster = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    return Backend(request.param, tmp_path, cluster)


def blob(sql: Execute, run_id: str, seq: int) -> bytes:
    (row,) = sql("SELECT blob FROM {checkpoints} WHERE run_id = ? AND seq = ?", (run_id, seq))
    return bytes(row[0])


def put_blob(sql: Execute, run_id: str, seq: int, value: bytes) -> None:
    sql("UPDATE {checkpoints} SET blob = ? WHERE run_id = ? AND seq = ?", (value, run_id, seq))


def last_snapshot(sql: Execute, run_id: str) -> int:
    ((seq,),) = sql(
        "SELECT max(seq) FROM {checkpoints} WHERE run_id = ? AND kind = 'full'", (run_id,)
    )
    return int(seq)


def damage(sql: Execute, how: str) -> int:
    """Damage the run ``victim`` (checkpoints 0..11) in place; the checkpoint to name."""
    last = STEPS - 1
    if how == "flip":  # one byte of a delta's body, as a failing disk would
        flipped = bytearray(blob(sql, "victim", 9))
        flipped[-3] ^= 0x01
        put_blob(sql, "victim", 9, bytes(flipped))
        return 9
    if how == "truncate":
        value = blob(sql, "victim", last)
        put_blob(sql, "victim", last, value[: len(value) // 2])
        return last
    if how == "delete-tail":
        sql("DELETE FROM {checkpoints} WHERE run_id = 'victim' AND seq = ?", (last,))
        return last
    if how == "delete-middle":
        sql("DELETE FROM {checkpoints} WHERE run_id = 'victim' AND seq = 2", ())
        return 2
    if how == "delete-snapshot":
        seq = last_snapshot(sql, "victim")
        sql("DELETE FROM {checkpoints} WHERE run_id = 'victim' AND seq = ?", (seq,))
        return seq
    if how == "move":  # another run's blob at the same position
        put_blob(sql, "victim", last, blob(sql, "donor", last))
        return last
    if how == "swap":
        ninth, tenth = blob(sql, "victim", 9), blob(sql, "victim", 10)
        put_blob(sql, "victim", 9, tenth)
        put_blob(sql, "victim", 10, ninth)
        return last
    if how == "replay":  # an earlier blob of the same run put back in a later place
        put_blob(sql, "victim", last, blob(sql, "victim", last - 2))
        return last
    assert how == "rollback"  # the tail removed and the run's end lowered to match
    sql("DELETE FROM {checkpoints} WHERE {at_rows} run_id = 'victim' AND seq = ?", (last,))
    if sql("SELECT 1 FROM {end} WHERE {at_end} run_id = 'victim' AND seq = ?", (last + 1,)):
        sql(
            "UPDATE {checkpoints} SET id = id - 1, seq = seq - 1 "
            "WHERE run_id = 'victim' AND head IS NOT NULL",
            (),
        )
    else:
        sql("UPDATE {runs} SET seq = ? WHERE run_id = 'victim'", (last - 1,))
    return last - 1


DAMAGES = [
    "flip",
    "truncate",
    "delete-tail",
    "delete-middle",
    "delete-snapshot",
    "move",
    "swap",
    "replay",
    "rollback",
]


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("how", DAMAGES)
async def test_a_changed_chain_is_refused_and_other_runs_still_load(
    backend: Backend, how: str, sealed: bool
) -> None:
    sealer = CheckpointCipher({"k1": generate_key()}, "k1") if sealed else None
    async with backend.open(sealer) as store:
        for run_id in ("victim", "donor", "bystander"):
            await save_run(store, run_id)
        with backend.sql() as sql:
            assert last_snapshot(sql, "victim") > 0, "the runs must hold more than one snapshot"
            named = damage(sql, how)
            snapshot = last_snapshot(sql, "victim")
    async with backend.open(sealer) as store:
        if named < snapshot and how == "delete-middle":
            # Before the last snapshot, whose link binds it: a load (which checks the
            # chain from that snapshot on) does not read it; the full check does.
            assert await store.load("victim") == (STEPS - 1, document(STEPS - 1))
            with pytest.raises(CheckpointTamperedError) as caught:
                await store.verify("victim")
        else:
            with pytest.raises(CheckpointTamperedError) as caught:
                await store.load("victim")
            with pytest.raises(CheckpointTamperedError):
                await store.verify("victim")
        error = caught.value
        assert error.run_id == "victim"
        assert error.seq == named, str(error)
        assert f"checkpoint {named} " in str(error)
        assert "other runs are unaffected" in str(error)
        assert isinstance(error, CheckpointCorruptError)  # the family callers already catch
        for other in ("donor", "bystander"):
            assert await store.load(other) == (STEPS - 1, document(STEPS - 1, other))
        await store.set_status("victim", "aborted")  # the way out the message gives
        assert (await store.record("victim")).status == "aborted"


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("where", ["before", "snapshot", "after"])
async def test_a_load_checks_the_last_snapshot_and_after_and_verify_checks_every_row(
    backend: Backend, where: str, sealed: bool
) -> None:
    """The rule of a load: the last snapshot (its link binds the rows before it), every
    row after it and the head; ``verify`` checks every row from seq 0."""
    sealer = CheckpointCipher({"k1": generate_key()}, "k1") if sealed else None
    async with backend.open(sealer) as store:
        for run_id in ("victim", "donor"):
            await save_run(store, run_id)
        assert await store.verify("victim") == STEPS - 1
        with backend.sql() as sql:
            snapshot = last_snapshot(sql, "victim")
            assert 0 < snapshot < STEPS - 1
            seq = {"before": snapshot - 1, "snapshot": snapshot, "after": snapshot + 1}[where]
            flipped = bytearray(blob(sql, "victim", seq))
            flipped[-3] ^= 0x01  # the body changed, its checksum kept
            put_blob(sql, "victim", seq, bytes(flipped))
    async with backend.open(sealer) as store:
        if where == "before":
            assert await store.load("victim") == (STEPS - 1, document(STEPS - 1))
        else:
            with pytest.raises(CheckpointTamperedError) as caught:
                await store.load("victim")
            assert caught.value.seq == seq
        with pytest.raises(CheckpointTamperedError) as caught:
            await store.verify("victim")
        assert caught.value.seq == seq
        assert await store.load("donor") == (STEPS - 1, document(STEPS - 1, "donor"))


async def test_a_snapshot_whose_stored_link_was_changed_is_refused(backend: Backend) -> None:
    """A snapshot's blob with another ``previous`` (its checksum recomputed) is refused."""
    import hashlib
    import json

    async with backend.open(None) as store:
        await save_run(store, "victim")
        with backend.sql() as sql:
            seq = last_snapshot(sql, "victim")
            payload = json.loads(blob(sql, "victim", seq)[32:])
            assert len(bytes.fromhex(payload["previous"])) == 32
            payload["previous"] = bytes(32).hex()
            body = json.dumps(payload).encode()
            put_blob(sql, "victim", seq, hashlib.sha256(body).digest() + body)
    async with backend.open(None) as store:
        with pytest.raises(CheckpointTamperedError):
            await store.load("victim")


async def test_an_unsealed_chain_is_a_digest_chain_that_a_forger_can_recompute(
    backend: Backend,
) -> None:
    """Documented limit: without a key, a rollback whose head is recomputed loads."""
    async with backend.open(None) as store:
        await save_run(store, "victim")
        with backend.sql() as sql:
            damage(sql, "rollback")
            rows = sql(
                "SELECT seq, kind, blob FROM {checkpoints} WHERE {at_rows} run_id = 'victim' "
                "ORDER BY seq",
                (),
            )
            link = bytes(32)
            for seq, kind, value in rows:
                link = _link("victim", seq, kind == "full", link, bytes(value)[:32])
            sql("UPDATE {end} SET head = ? WHERE {at_end} run_id = 'victim'", (link,))
    async with backend.open(None) as store:
        assert await store.load("victim") == (STEPS - 2, document(STEPS - 2))


async def test_a_sealed_chain_refuses_a_recomputed_head_without_the_key(backend: Backend) -> None:
    """With a key the head carries a MAC: recomputing the links is not enough."""
    sealer = CheckpointCipher({"k1": generate_key()}, "k1")
    async with backend.open(sealer) as store:
        await save_run(store, "victim")
        with backend.sql() as sql:
            damage(sql, "rollback")
            rows = sql(
                "SELECT seq, kind, blob FROM {checkpoints} WHERE {at_rows} run_id = 'victim' "
                "ORDER BY seq",
                (),
            )
            link = bytes(32)
            for seq, kind, value in rows:
                link = _link("victim", seq, kind == "full", link, bytes(value)[:32])
            ((head,),) = sql("SELECT head FROM {end} WHERE {at_end} run_id = 'victim'", ())
            # The recomputed link, with the old tag, or with none.
            sql(
                "UPDATE {end} SET head = ? WHERE {at_end} run_id = 'victim'",
                (link + bytes(head)[32:],),
            )
    async with backend.open(sealer) as store:
        with pytest.raises(CheckpointTamperedError, match="is not the head this store's key"):
            await store.load("victim")
    with backend.sql() as sql:
        sql("UPDATE {end} SET head = ? WHERE {at_end} run_id = 'victim'", (link,))
    async with backend.open(sealer) as store:
        with pytest.raises(CheckpointTamperedError, match="the head carries no tag"):
            await store.load("victim")


async def test_a_run_whose_head_was_removed_is_refused_and_cannot_be_extended(
    backend: Backend,
) -> None:
    async with backend.open(None) as store:
        await save_run(store, "victim")
        with backend.sql() as sql:
            if backend.kind == "sqlite":  # the end marker removed
                sql("DELETE FROM {end} WHERE {at_end} run_id = 'victim'", ())
            else:
                sql("UPDATE {runs} SET head = NULL WHERE run_id = 'victim'", ())
    async with backend.open(None) as store:
        with pytest.raises(CheckpointTamperedError, match="has no recorded head"):
            await store.load("victim")
        with pytest.raises(CheckpointTamperedError, match="has no recorded head"):
            await store.save(
                "victim", STEPS, document(STEPS), agent="travel", status="running", phase="P"
            )


async def test_saving_from_two_stores_keeps_one_chain(backend: Backend) -> None:
    """A store that did not save the run's last checkpoint reads the head from the row."""
    async with backend.open(None) as first, backend.open(None) as second:
        for seq in range(STEPS):
            store = first if seq % 3 else second
            await store.save("r", seq, document(seq), agent="travel", status="running", phase="P")
        assert await first.load("r") == (STEPS - 1, document(STEPS - 1))
        assert await second.load("r") == (STEPS - 1, document(STEPS - 1))


# --- stores written before heads were recorded --------------------------------------------


class PayArgs(BaseModel):
    to: str
    amount: str


async def test_a_store_written_before_heads_is_migrated_once_and_its_runs_resume(
    tmp_path: Path,
) -> None:
    paid: list[str] = []

    @write_tool(name="pay")
    async def pay(args: PayArgs) -> dict[str, str]:
        paid.append(args.amount)
        return {"paid": args.amount}

    agent = Agent[None](name="payer", tools=[pay])
    path = tmp_path / "runs.db"
    shutil.copy(PRE_CHAIN, path)
    # Sealed checkpoints without a key: their heads cannot be recorded under the key.
    with pytest.raises(ConfigError, match="open the store once with its checkpoint keys"):
        async with SQLiteCheckpointer(path) as store:
            await store.record("paid")
    async with SQLiteCheckpointer(path, sealer=PRE_CHAIN_KEY) as store:
        seq, _ = await store.load("sealed")
        assert seq == 7
    async with SQLiteCheckpointer(path) as store:
        assert (await store.load("paid"))[0] == 7
        runner = Runner(
            agent,
            model=ScriptedModel([reply("Paid.")]),
            gate=ScriptedGate([True], by="kim"),
            checkpointer=store,
        )
        resumed = await runner.resume("waiting")
        assert isinstance(resumed.final, Done)
        assert paid == ["10.00"]
        assert (await store.load("waiting"))[1]["kind"] == "Done"
    # Migrated once: a head removed afterwards (with the run's end marker, which holds it
    # since format 1) is not recorded again, it is refused.
    with sqlite3.connect(path, isolation_level=None) as db:
        assert db.execute("SELECT count(*) FROM runs WHERE head IS NOT NULL").fetchone() == (0,)
        db.execute("DELETE FROM checkpoints WHERE run_id = 'paid' AND head IS NOT NULL")
    db.close()
    async with SQLiteCheckpointer(path) as store:
        with pytest.raises(CheckpointTamperedError, match="has no recorded head"):
            await store.load("paid")


@asynccontextmanager
async def postgres_before_heads(cluster: Cluster) -> AsyncIterator[str]:
    """A PostgreSQL store as the code before heads left it: no head column."""
    dsn = cluster.fresh_dsn()
    async with PostgresCheckpointer(dsn) as store:
        await save_run(store, "old")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("ALTER TABLE statemachine_runs DROP COLUMN head")
    yield dsn


async def test_a_postgres_store_written_before_heads_is_migrated_once(pg_cluster: Cluster) -> None:
    async with postgres_before_heads(pg_cluster) as dsn:
        async with PostgresCheckpointer(dsn) as store:
            assert await store.load("old") == (STEPS - 1, document(STEPS - 1, "old"))
            await store.save(
                "old", STEPS, document(STEPS, "old"), agent="travel", status="running", phase="P"
            )
            assert await store.load("old") == (STEPS, document(STEPS, "old"))
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute("UPDATE statemachine_runs SET head = NULL")
        async with PostgresCheckpointer(dsn) as store:
            with pytest.raises(CheckpointTamperedError, match="has no recorded head"):
                await store.load("old")


async def test_a_store_keeps_the_documents_of_only_a_few_runs_it_loaded(tmp_path: Path) -> None:
    """A load's document is kept for the run's next save (a resume), for a few runs only:
    a reader that loads many runs (the inbox, ``runs show``) does not keep them all."""
    async with SQLiteCheckpointer(tmp_path / "runs.db", snapshot_every=4) as store:
        for number in range(20):
            await save_run(store, f"run-{number}", steps=3)
    async with SQLiteCheckpointer(tmp_path / "runs.db", snapshot_every=4) as store:
        for number in range(20):
            assert await store.load(f"run-{number}") == (2, document(2, f"run-{number}"))
        assert list(store._chain.loaded) == [f"run-{number}" for number in range(12, 20)]
        # The next save of a run loaded last goes on from the loaded document (a delta).
        await store.save("run-19", 3, document(3, "run-19"), agent="a", status="running", phase="P")
        assert "run-19" not in store._chain.loaded
        assert (await store.history("run-19"))[-1].snapshot is False
        assert await store.load("run-19") == (3, document(3, "run-19"))
        assert await store.verify("run-19") == 3
