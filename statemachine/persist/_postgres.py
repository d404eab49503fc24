"""The PostgreSQL checkpoint store: one database shared by many workers on many machines.

It keeps what :class:`SQLiteCheckpointer` keeps, the same way: checkpoints as full
snapshots (at the same seqs: the rule depends on ``seq`` alone) and deltas between,
each blob ``sha256(sealed) + sealed`` with the same associated data, the run registry
with its lifecycle checks, claims and the lease history, a person's pending decision,
stop requests, and the side-effect ledger. The pure parts (deltas, sealing, replay,
corruption errors) are those of the ``_Chain`` it holds, as the SQLite store holds one;
this module keeps the rows, async end to end, through a psycopg 3
:class:`~psycopg_pool.AsyncConnectionPool`. Each operation is one transaction, shielded
from cancellation as the SQLite store's are.

Tables (prefixed ``statemachine_`` so that they can share a database with an
application's) are created on first use, in one transaction under an advisory lock,
so that several processes starting at once do not race on ``CREATE TABLE``. Writes to
one run take a transaction-scoped advisory lock on its id and its row ``FOR UPDATE``,
so two processes can never both save the same seq; ``claim_next`` selects with ``FOR
UPDATE SKIP LOCKED``, so workers never queue behind each other (nor behind a save);
the ledger commits with ``synchronous_commit = on``.

psycopg and psycopg-pool are the ``postgres`` extra:
``pip install 'statemachine-agents[postgres]'``.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, LiteralString

import anyio

from .._approval import _submitted
from .._errors import (
    CheckpointError,
    ConfigError,
    UnknownRunError,
)
from .._ledger import EffectRecord
from ._chain import _Chain, _every
from ._lifecycle import ATTENTION, ENDINGS, RunLifecycle, RunStatus, held_record, retry_fields
from ._postgres_sql import (
    _CONNECT_TIMEOUT,
    _EFFECT_COLUMNS,
    _INSTALL,
    _RECORD_COLUMNS,
    _RUN_COLUMNS,
    _RUN_TABLES,
    _effect_row_of,
    _record_of,
    _redacted,
    _store_row,
    create_tables,
)
from ._protocol import (
    DEFAULT_RETENTION,
    CheckpointEntry,
    Document,
    LeaseRecord,
    RunRecord,
    Sealer,
)
from ._rows import (
    _SETTLED,
    _change_of,
    _EffectRow,
    _entry,
    _Row,
    _statuses,
    _system_clock,
    _utc,
)

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

    from ._protocol import Checkpointer

    _Connection = AsyncConnection[TupleRow]
    _Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]

__all__ = ["PostgresCheckpointer"]


class PostgresCheckpointer:
    """Checkpoints in a PostgreSQL database, shared by any number of processes and machines.

    Same semantics as :class:`SQLiteCheckpointer` (deltas, snapshots, sealer, registry,
    lifecycle, claims, purge, side-effect ledger). ``dsn`` is a libpq connection string
    or URL; its password never appears in messages. The connection pool (``min_size``
    to ``max_size`` connections per process) is opened, and the tables are created, on
    first use; an unreachable server or a bad DSN is a ``ConfigError`` saying what to
    check. Call ``aclose()`` (or use ``async with``) when done; a later operation opens
    the pool again. Needs the ``postgres`` extra (psycopg 3 and psycopg-pool).
    """

    # One of the library's stores: it takes a saver's delta ops and never changes a
    # document (the runner reads this; see _Store).
    _takes_ops: ClassVar[bool] = True

    def __init__(
        self,
        dsn: str,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
        min_size: int = 1,
        max_size: int = 4,
    ) -> None:
        _every(snapshot_every)
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ConfigError(
                (
                    f"the pool size must be 0 <= min_size <= max_size and max_size >= 1, got "
                    f"min_size={min_size!r}, max_size={max_size!r}",
                )
            )
        try:  # here, so that a missing extra fails at once, not at the first save
            for module in ("psycopg", "psycopg_pool"):
                importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(
                (f"PostgresCheckpointer needs psycopg 3 and psycopg-pool ({exc}); {_INSTALL}",)
            ) from None
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self._where = f"the PostgreSQL store {_redacted(dsn)!r}"
        self._chain = _Chain(
            snapshot_every=snapshot_every, sealer=sealer, clock=clock, where=self._where
        )
        self._pool: _Pool | None = None
        self._opening: anyio.Lock | None = None

    @property
    def snapshot_every(self) -> int:
        """Checkpoints at least between two full snapshots (see ``_chain``)."""
        return self._chain.snapshot_every

    @snapshot_every.setter
    def snapshot_every(self, value: int) -> None:
        self._chain.snapshot_every = value

    async def __aenter__(self) -> PostgresCheckpointer:
        await self._opened()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pool and its connections; a later operation opens a new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- connections --

    async def _opened(self) -> _Pool:
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = anyio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await self._open()
            return self._pool

    async def _open(self) -> _Pool:
        from psycopg import AsyncConnection, OperationalError
        from psycopg.conninfo import conninfo_to_dict
        from psycopg_pool import AsyncConnectionPool

        options: dict[str, Any] = {"autocommit": True}
        given = conninfo_to_dict(self.dsn)
        if "connect_timeout" not in given:
            options["connect_timeout"] = _CONNECT_TIMEOUT
        if "application_name" not in given:  # what pg_stat_activity shows for these sessions
            options["application_name"] = "statemachine"
        # One connection first: its error says why the server cannot be reached (the
        # pool would only report a timeout), and it creates the tables.
        try:
            first = await AsyncConnection.connect(self.dsn, **options)
        except OperationalError as exc:
            reason = " ".join(str(exc).split())
            raise ConfigError(
                (
                    f"cannot connect to {self._where} ({reason}); check the DSN's host, port, "
                    "dbname, user and password, and that the server is running and accepts "
                    "connections from here",
                )
            ) from None
        try:
            await self._create_tables(first)
        finally:
            await first.close()
        pool: _Pool = AsyncConnectionPool(
            self.dsn,
            min_size=self.min_size,
            max_size=self.max_size,
            kwargs=options,
            open=False,
            name="statemachine",
        )
        await pool.open(wait=True)
        return pool

    async def _create_tables(self, connection: _Connection) -> None:
        """Create the tables, indexes and columns that are missing (see ``create_tables``);
        when the head column is added, record the heads of the runs saved before it."""
        await create_tables(connection, self._record_heads)

    async def _record_heads(self, connection: _Connection) -> None:
        """Record each run's head from its rows as they are found (see ``_chain``)."""
        cursor = await connection.execute(
            "SELECT run_id FROM statemachine_runs WHERE head IS NULL ORDER BY run_id"
        )
        for (run_id,) in await cursor.fetchall():
            rows = await self._fetch_all(connection, run_id)
            if rows:
                await connection.execute(
                    "UPDATE statemachine_runs SET head = %s WHERE run_id = %s",
                    (self._chain.migrated_head(run_id, rows), run_id),
                )

    @asynccontextmanager
    async def _session(
        self, *, read_only: bool = False, durable: bool = False
    ) -> AsyncGenerator[_Connection, None]:
        """One transaction on a pooled connection: committed at the end, rolled back on error.

        Shielded from cancellation, like the SQLite store's operations (which run to
        their end in a thread): a run stopped while it saves still has that checkpoint,
        and the connection is not dropped halfway through a query.
        """
        with anyio.CancelScope(shield=True):
            pool = await self._opened()
            async with pool.connection() as connection, connection.transaction():
                if read_only:  # one snapshot for every statement: a row and its checkpoints agree
                    await connection.execute(
                        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
                    )
                if durable:  # the ledger's commits reach the disk whatever the server's default
                    await connection.execute("SET LOCAL synchronous_commit = on")
                yield connection

    # -- rows (every helper runs inside the caller's transaction) --

    @staticmethod
    async def _lock_run(connection: _Connection, run_id: str) -> None:
        """Serialise the writers of one run's row until the transaction ends."""
        await connection.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('statemachine run:' || %s, 0))",
            (run_id,),
        )

    @staticmethod
    async def _lock_claim(connection: _Connection, run_id: str, *, wait: bool = True) -> bool:
        """Serialise the writers of one run's claim and leases; False if taken (``wait=False``).

        A key apart from the run's own: ``claim_next`` takes it while holding the run's
        row, and a save takes the row while holding the run's key, so one key would
        let the two wait on each other.
        """
        function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        cursor = await connection.execute(
            f"SELECT {function}(hashtextextended('statemachine claim:' || %s, 0))", (run_id,)
        )
        row = await cursor.fetchone()
        return wait or (row is not None and row[0] is True)

    async def _fetch_record(
        self, connection: _Connection, run_id: str, *, for_update: bool = False
    ) -> RunRecord | None:
        lock = " FOR UPDATE" if for_update else ""
        cursor = await connection.execute(
            f"SELECT {_RECORD_COLUMNS} FROM statemachine_runs WHERE run_id = %s{lock}", (run_id,)
        )
        row = await cursor.fetchone()
        return None if row is None else _record_of(row)

    async def _fetch_known(
        self, connection: _Connection, run_id: str, *, for_update: bool = False
    ) -> RunRecord:
        record = await self._fetch_record(connection, run_id, for_update=for_update)
        if record is None:
            raise UnknownRunError(run_id, store=self._where)
        return record

    @staticmethod
    async def _store_record(
        connection: _Connection, record: RunRecord, head: bytes | None = None
    ) -> None:
        """Insert or overwrite the run's row; its decision is kept only while one is pending,
        its head unless a new one is given (a save)."""
        await connection.execute(
            "INSERT INTO statemachine_runs (run_id, agent, status, phase, waiting_for, "
            "updated_at, seq, stop_requested, reason, failures, retry_at, head) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET agent = EXCLUDED.agent, "
            "status = EXCLUDED.status, phase = EXCLUDED.phase, "
            "waiting_for = EXCLUDED.waiting_for, updated_at = EXCLUDED.updated_at, "
            "seq = EXCLUDED.seq, stop_requested = EXCLUDED.stop_requested, "
            "reason = EXCLUDED.reason, failures = EXCLUDED.failures, "
            "retry_at = EXCLUDED.retry_at, "
            "head = coalesce(EXCLUDED.head, statemachine_runs.head), "
            "decision = CASE WHEN %s THEN statemachine_runs.decision END",
            (
                record.run_id,
                record.agent,
                record.status.value,
                record.phase,
                record.waiting_for,
                record.updated_at,
                record.seq,
                record.stop_requested,
                record.reason,
                record.failures,
                record.retry_at,
                head,
                record.decision_pending,
            ),
        )

    @staticmethod
    async def _fetch_head(connection: _Connection, run_id: str) -> bytes | None:
        cursor = await connection.execute(
            "SELECT head FROM statemachine_runs WHERE run_id = %s", (run_id,)
        )
        row = await cursor.fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    @staticmethod
    async def _fetch_all(connection: _Connection, run_id: str) -> list[_Row]:
        """Every checkpoint of the run, in seq order: the whole chain, to check it."""
        cursor = await connection.execute(
            "SELECT seq, kind, phase, blob, at FROM statemachine_checkpoints "
            "WHERE run_id = %s ORDER BY seq",
            (run_id,),
        )
        return [
            _Row(seq, kind == "full", phase, bytes(blob), at.astimezone(UTC))
            for seq, kind, phase, blob, at in await cursor.fetchall()
        ]

    async def _change_status(
        self, connection: _Connection, record: RunRecord, status: RunStatus, waiting_for: str
    ) -> RunRecord:
        """Change the run's status through its lifecycle; an ending or a stop drops the
        stop request and any pending decision."""
        RunLifecycle(record.run_id, record.status).move_to(status)
        now = self._chain.now()
        update: dict[str, Any] = {"status": status, "waiting_for": waiting_for, "updated_at": now}
        update.update(retry_fields(record, status, now, saved=False))
        if status in _SETTLED:
            update.update(stop_requested=False, decision_pending=False)
        changed = record.model_copy(update=update)
        await self._store_record(connection, changed)
        return changed

    @staticmethod
    async def _fetch_chain(
        connection: _Connection, record: RunRecord, *, after: bool = False
    ) -> list[_Row]:
        """The last full snapshot up to the record's seq, and every checkpoint after it
        up to the record's seq (any seq with ``after``: a load sees a row stored later)."""
        cursor = await connection.execute(
            "SELECT seq, kind, phase, blob, at FROM statemachine_checkpoints "
            "WHERE run_id = %(run)s AND (%(after)s OR seq <= %(last)s) AND seq >= coalesce(("
            "SELECT max(seq) FROM statemachine_checkpoints "
            "WHERE run_id = %(run)s AND kind = 'full' AND seq <= %(last)s), 0) ORDER BY seq",
            {"run": record.run_id, "last": record.seq, "after": after},
        )
        return [
            _Row(seq, kind == "full", phase, bytes(blob), at.astimezone(UTC))
            for seq, kind, phase, blob, at in await cursor.fetchall()
        ]

    @staticmethod
    async def _fetch_claim(connection: _Connection, run_id: str) -> tuple[str, datetime] | None:
        cursor = await connection.execute(
            "SELECT owner, until FROM statemachine_claims WHERE run_id = %s", (run_id,)
        )
        row = await cursor.fetchone()
        return None if row is None else (row[0], row[1].astimezone(UTC))

    @staticmethod
    async def _give_claim(
        connection: _Connection,
        run_id: str,
        owner: str,
        now: datetime,
        until: datetime,
        *,
        again: bool,
    ) -> None:
        """Give ``owner`` the claim until ``until``, and write it in the lease history.

        ``again``: the owner held it already, so its open lease is extended (a new one
        is opened if it has none).
        """
        await connection.execute(
            "INSERT INTO statemachine_claims (run_id, owner, until) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET owner = EXCLUDED.owner, until = EXCLUDED.until",
            (run_id, owner, until),
        )
        if again:
            cursor = await connection.execute(
                "UPDATE statemachine_leases SET until = %s WHERE id = (SELECT max(id) FROM "
                "statemachine_leases WHERE run_id = %s AND owner = %s AND released_at IS NULL)"
                " RETURNING id",
                (until, run_id, owner),
            )
            if await cursor.fetchone() is not None:
                return
        await connection.execute(
            "INSERT INTO statemachine_leases (run_id, owner, claimed_at, until) "
            "VALUES (%s, %s, %s, %s)",
            (run_id, owner, now, until),
        )

    @staticmethod
    async def _fetch_effect(
        connection: _Connection, key: str, *, for_update: bool = False
    ) -> _EffectRow | None:
        lock = " FOR UPDATE" if for_update else ""
        cursor = await connection.execute(
            f"SELECT {_EFFECT_COLUMNS} FROM statemachine_effects WHERE key = %s{lock}", (key,)
        )
        row = await cursor.fetchone()
        return None if row is None else _effect_row_of(row)

    # -- checkpoints and the registry --

    async def save(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        *,
        agent: str,
        status: RunStatus | str,
        phase: str,
        waiting_for: str = "",
        base: Mapping[str, Any] | None = None,
        ops: list[list[Any]] | None = None,
    ) -> RunRecord:
        """Store checkpoint ``seq`` of the run and update its registry row, atomically.

        ``seq`` must be the run's next (0 for a new run), else ``CheckpointOrderError``;
        a change of ``status`` must be legal from the run's current one (a new run
        starts ``running``), else ``IllegalStatusChangeError``. Either way nothing is
        saved. Two processes saving the same run take turns; the second is refused.
        ``ops`` and ``base``: as for :class:`SQLiteCheckpointer`.
        """
        change = _change_of(base, ops)
        async with self._session() as connection:
            await self._lock_run(connection, run_id)
            record = await self._fetch_record(connection, run_id, for_update=True)
            target, waiting_for = self._chain.saved_status(
                run_id, seq, record, RunStatus(status), waiting_for
            )
            prepared = self._chain.prepare(run_id, seq, record, document, change, None)
            if prepared is None:  # this store does not know what is stored: read it
                assert record is not None
                stored = self._chain.stored(
                    run_id, await self._fetch_chain(connection, record), record
                )
                prepared = self._chain.prepare(run_id, seq, record, document, change, stored)
                assert prepared is not None
            previous = self._chain.previous_head(run_id, record)
            if previous is None and record is not None:  # saved last by another store
                previous = await self._fetch_head(connection, run_id)
            snapshot, blob, last = self._chain.checkpoint(
                run_id, seq, document, prepared, change, previous
            )
            now = self._chain.now()
            saved = self._chain.saved_record(
                record, run_id, seq, agent, target, phase, waiting_for, now
            )
            # The retry state, which saved_record leaves out: a checkpoint saved is progress.
            vars(saved).update(retry_fields(record, target, now, saved=True))
            await _store_row(connection, run_id, _Row(seq, snapshot, phase, blob, now))
            await self._store_record(connection, saved, last.head)
        self._chain.remember(run_id, last)
        return saved

    async def load(self, run_id: str) -> tuple[int, Document]:
        """The run's latest checkpoint as ``(seq, document)``: one snapshot plus its deltas.

        Raises ``UnknownRunError`` for a run never saved, and ``CheckpointTamperedError``
        (a ``CheckpointCorruptError``, naming the run and the checkpoint) for a chain that
        is not the one saved: a blob changed, moved or cut, a row removed, a head rolled
        back (see ``_chain``).
        """
        async with self._session(read_only=True) as connection:
            record = await self._fetch_known(connection, run_id)
            head = await self._fetch_head(connection, run_id)
            tail = await self._fetch_chain(connection, record, after=True)
            document = self._chain.from_snapshot(run_id, tail, record, head)
            if document is not None:
                return record.seq, document
            rows = await self._fetch_all(connection, run_id)
        start = self._chain.verify(run_id, rows, record, head)
        return self._chain.replay(run_id, rows[start:], record)

    async def verify(self, run_id: str) -> int:
        """Check every checkpoint of the run from seq 0 against its head (see ``_Store``)."""
        async with self._session(read_only=True) as connection:
            record = await self._fetch_known(connection, run_id)
            head = await self._fetch_head(connection, run_id)
            rows = await self._fetch_all(connection, run_id)
        self._chain.verify(run_id, rows, record, head)
        return record.seq

    async def history(self, run_id: str) -> list[CheckpointEntry]:
        """Every stored checkpoint of the run, oldest first, without decoding any."""
        async with self._session(read_only=True) as connection:
            await self._fetch_known(connection, run_id)
            cursor = await connection.execute(
                "SELECT seq, phase, kind, octet_length(blob), at FROM statemachine_checkpoints "
                "WHERE run_id = %s ORDER BY seq",
                (run_id,),
            )
            rows = await cursor.fetchall()
        return [
            _entry(seq, phase, kind == "full", size, at.astimezone(UTC))
            for seq, phase, kind, size, at in rows
        ]

    async def record(self, run_id: str) -> RunRecord:
        """The run's registry row; ``UnknownRunError`` if it has none."""
        async with self._session(read_only=True) as connection:
            return await self._fetch_known(connection, run_id)

    async def set_status(
        self, run_id: str, status: RunStatus | str, *, waiting_for: str = ""
    ) -> RunRecord:
        """Move the run to ``status`` through its lifecycle; set what it waits for.

        An illegal change raises ``IllegalStatusChangeError`` and changes nothing.
        Setting the status it already has only updates ``waiting_for`` and the time.
        """
        target = RunStatus(status)
        async with self._session() as connection:
            await self._lock_run(connection, run_id)
            record = await self._fetch_known(connection, run_id, for_update=True)
            return await self._change_status(connection, record, target, waiting_for)

    async def registry(
        self,
        *,
        status: RunStatus | str | Collection[RunStatus | str] | None = None,
        agent: str | None = None,
    ) -> list[RunRecord]:
        """Registry rows, oldest update first; ``status`` is one status or several."""
        return await self._select_records(_statuses(status), agent)

    async def needing_attention(self) -> list[RunRecord]:
        """Runs interrupted, cancelled or failed_resumable (held ones too), oldest update first."""
        return await self._select_records(tuple(sorted(ATTENTION)), None)

    async def hold(self, run_id: str, reason: str) -> RunRecord:
        """Keep every worker from taking the run until a person resumes it; ``reason`` says why.

        As :meth:`SQLiteCheckpointer.hold`: once (a run held already keeps its first
        reason), running -> interrupted, interrupted and failed_resumable keep their
        status, a cancelled run is returned as it is, an ended one is refused.
        """
        async with self._session() as connection:
            await self._lock_run(connection, run_id)
            record = await self._fetch_known(connection, run_id, for_update=True)
            if record.reason or record.status is RunStatus.CANCELLED:
                return record
            changed = held_record(record, reason, self._chain.now())
            await self._store_record(connection, changed)
            return changed

    async def _select_records(
        self, statuses: tuple[RunStatus, ...] | None, agent: str | None
    ) -> list[RunRecord]:
        where: list[LiteralString] = []
        values: list[Any] = []
        if statuses is not None:
            where.append("status = ANY(%s)")
            values.append([status.value for status in statuses])
        if agent is not None:
            where.append("agent = %s")
            values.append(agent)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        async with self._session(read_only=True) as connection:
            cursor = await connection.execute(
                f"SELECT {_RECORD_COLUMNS} FROM statemachine_runs{clause} "
                "ORDER BY updated_at, run_id",
                values,
            )
            rows = await cursor.fetchall()
        return [_record_of(row) for row in rows]

    # -- claims and leases --

    async def claim(
        self, run_id: str, owner: str, *, lease: timedelta = timedelta(minutes=10)
    ) -> bool:
        """Take the run for ``owner``: at most one holder at a time, across processes.

        Two processes resuming one run at once: exactly one gets it. A claim lapses
        after ``lease`` (its holder may have died), so a run is never locked for good.
        """
        async with self._session() as connection:
            await self._lock_claim(connection, run_id)
            now = self._chain.now()
            held = await self._fetch_claim(connection, run_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            again = held is not None and held[0] == owner
            await self._give_claim(connection, run_id, owner, now, now + lease, again=again)
            return True

    async def release(self, run_id: str, owner: str) -> None:
        """Give the run back, if ``owner`` holds it."""
        async with self._session() as connection:
            await self._lock_claim(connection, run_id)
            cursor = await connection.execute(
                "DELETE FROM statemachine_claims WHERE run_id = %s AND owner = %s RETURNING run_id",
                (run_id, owner),
            )
            if await cursor.fetchone() is not None:
                await connection.execute(
                    "UPDATE statemachine_leases SET released_at = %s "
                    "WHERE run_id = %s AND owner = %s AND released_at IS NULL",
                    (self._chain.now(), run_id, owner),
                )

    async def claim_next(
        self, owner: str, *, agents: Collection[str] | None = None, lease: timedelta
    ) -> RunRecord | None:
        """Take the oldest runnable run for ``owner``, atomically; ``None`` when there is none.

        Runnable: no live lease holds it, it is not held (``reason``), and it is
        ``running`` (its worker died, or it was submitted and never started),
        ``failed_resumable`` with its ``retry_at`` come, or ``interrupted`` with a
        person's decision pending. A run waiting for a person without a decision, and a
        cancelled or ended run, is never taken. A running run with a stop request and
        no live lease is marked cancelled instead. ``agents`` limits the runs to those
        agents' names. Returns the run's row (its status unchanged), held for ``lease``.

        Workers never wait for each other here: ``SELECT ... FOR UPDATE SKIP LOCKED``
        passes over a run another worker is taking at this moment.
        """
        chosen = None if agents is None else sorted(set(agents))
        if lease <= timedelta(0):
            raise ConfigError((f"lease must be a positive duration, got {lease!r}",))
        agent_clause = "" if chosen is None else " AND r.agent = ANY(%(agents)s)"
        passed: list[str] = []  # runs whose claim another worker is writing right now
        async with self._session() as connection:
            now = self._chain.now()
            while True:
                cursor = await connection.execute(
                    f"SELECT {_RUN_COLUMNS} FROM statemachine_runs r "
                    "LEFT JOIN statemachine_claims c ON c.run_id = r.run_id "
                    "WHERE (c.run_id IS NULL OR c.until <= %(now)s) AND r.reason = '' "
                    "AND (r.status = 'running' OR (r.status = 'failed_resumable' AND "
                    "(r.retry_at IS NULL OR r.retry_at <= %(now)s)) "
                    "OR (r.status = 'interrupted' AND r.decision IS NOT NULL)) "
                    f"AND r.run_id <> ALL(%(passed)s){agent_clause} "
                    "ORDER BY r.updated_at, r.run_id LIMIT 1 FOR UPDATE OF r SKIP LOCKED",
                    {
                        "now": now,
                        "passed": passed,
                        "agents": chosen,
                    },
                )
                row = await cursor.fetchone()
                if row is None:
                    return None
                record = _record_of(row)
                if record.status is RunStatus.RUNNING and record.stop_requested:
                    await self._change_status(connection, record, RunStatus.CANCELLED, "")
                    continue
                if not await self._lock_claim(connection, record.run_id, wait=False):
                    passed.append(record.run_id)
                    continue
                held = await self._fetch_claim(connection, record.run_id)
                if held is not None and held[1] > now:  # claimed since the SELECT's snapshot
                    passed.append(record.run_id)
                    continue
                await self._give_claim(
                    connection, record.run_id, owner, now, now + lease, again=False
                )
                return record

    async def renew(self, run_id: str, owner: str, *, lease: timedelta) -> bool:
        """Extend ``owner``'s lease of the run to ``lease`` from now.

        False (and nothing changes) when ``owner`` no longer holds a live lease: it
        lapsed, or the run was given back or taken by another worker. The holder must
        then stop driving the run.
        """
        async with self._session() as connection:
            await self._lock_claim(connection, run_id)
            now = self._chain.now()
            held = await self._fetch_claim(connection, run_id)
            if held is None or held[0] != owner or held[1] <= now:
                return False
            await self._give_claim(connection, run_id, owner, now, now + lease, again=True)
            return True

    async def leases(self, run_id: str | None = None) -> list[LeaseRecord]:
        """Every lease of the run (of every run when ``run_id`` is ``None``), oldest first."""
        where = "" if run_id is None else " WHERE run_id = %s"
        async with self._session(read_only=True) as connection:
            cursor = await connection.execute(
                "SELECT run_id, owner, claimed_at, until, released_at FROM statemachine_leases"
                f"{where} ORDER BY claimed_at, id",
                () if run_id is None else (run_id,),
            )
            rows = await cursor.fetchall()
        return [
            LeaseRecord(
                run_id=lease_run,
                owner=owner,
                claimed_at=claimed_at.astimezone(UTC),
                until=until.astimezone(UTC),
                released_at=None if released_at is None else released_at.astimezone(UTC),
            )
            for lease_run, owner, claimed_at, until, released_at in rows
        ]

    # -- a person's decision, a stop request --

    async def submit_decision(self, run_id: str, decision: Mapping[str, Any]) -> RunRecord:
        """Store a person's decision (a :func:`dump_decision` document) for a waiting run.

        The run must be ``interrupted`` at an ``AwaitApproval`` waiting for an approval,
        with no decision pending yet; otherwise :class:`DecisionRefusedError` (and
        ``UnknownRunError`` for a run never saved), and nothing changes. The run then
        counts as runnable: a worker claims it and resumes it with the decision. The
        decision stays pending until the run's next checkpoint is saved (the approval
        phase used it) or the run is cancelled, completed or aborted.
        """
        document = _submitted(run_id, decision)
        async with self._session() as connection:
            await self._lock_run(connection, run_id)
            record = await self._fetch_known(connection, run_id, for_update=True)
            blob, changed = self._chain.decided(record, document)
            await connection.execute(
                "UPDATE statemachine_runs SET decision = %s, updated_at = %s WHERE run_id = %s",
                (blob, changed.updated_at, run_id),
            )
        return changed

    async def decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it stays pending."""
        return await self._read_decision(run_id, take=False)

    async def take_decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it is cleared."""
        return await self._read_decision(run_id, take=True)

    async def _read_decision(self, run_id: str, *, take: bool) -> Document | None:
        async with self._session(read_only=not take) as connection:
            if take:
                await self._lock_run(connection, run_id)
            await self._fetch_known(connection, run_id, for_update=take)
            cursor = await connection.execute(
                "SELECT decision FROM statemachine_runs WHERE run_id = %s", (run_id,)
            )
            row = await cursor.fetchone()
            if row is None or row[0] is None:
                return None
            document = self._chain.open_decision(run_id, bytes(row[0]))
            if take:
                await connection.execute(
                    "UPDATE statemachine_runs SET decision = NULL WHERE run_id = %s", (run_id,)
                )
            return document

    async def request_stop(self, run_id: str) -> RunRecord:
        """Ask for the run to stop; returns its row.

        A run a worker drives (``running`` under a live lease) gets ``stop_requested``:
        the worker stops it at its next checkpoint and marks it ``cancelled``. A run
        nobody drives (running with no live lease, interrupted, failed_resumable) is
        marked ``cancelled`` at once, and any pending decision is dropped. A cancelled
        run is returned as it is; a completed or aborted one raises
        ``IllegalStatusChangeError``.
        """
        async with self._session() as connection:
            await self._lock_run(connection, run_id)
            record = await self._fetch_known(connection, run_id, for_update=True)
            if record.status is RunStatus.CANCELLED:
                return record
            now = self._chain.now()
            held = await self._fetch_claim(connection, run_id)
            if record.status is RunStatus.RUNNING and held is not None and held[1] > now:
                changed = record.model_copy(update={"stop_requested": True, "updated_at": now})
                await self._store_record(connection, changed)
                return changed
            return await self._change_status(connection, record, RunStatus.CANCELLED, "")

    # -- retention --

    async def purge(
        self, older_than: timedelta = DEFAULT_RETENTION, *, now: datetime | None = None
    ) -> int:
        """Remove completed and aborted runs last updated before ``now - older_than``.

        Their checkpoints, ledger records, claims and leases go with them; runs in any
        other status are kept however old. ``now`` defaults to the store's clock.
        Returns how many runs were removed.
        """
        moment = _utc(now if now is not None else self._chain.clock(), "now")
        endings = [status.value for status in sorted(ENDINGS)]
        async with self._session() as connection:
            cursor = await connection.execute(
                "DELETE FROM statemachine_runs WHERE status = ANY(%s) AND updated_at < %s "
                "RETURNING run_id",
                (endings, moment - older_than),
            )
            removed = [run_id for (run_id,) in await cursor.fetchall()]
            for table in _RUN_TABLES:
                await connection.execute(f"DELETE FROM {table} WHERE run_id = ANY(%s)", (removed,))
        for run_id in removed:
            self._chain.forget(run_id)
        return len(removed)

    # -- the side-effect ledger --

    async def record_intent(
        self, key: str, *, run_id: str, tool: str, args_hash: str
    ) -> EffectRecord:
        """Record, durably, that the write call under ``key`` is about to run.

        Idempotent: if ``key`` is already recorded (an intent or a committed effect)
        that record is returned unchanged, so a replay never loses a result.
        """
        async with self._session(durable=True) as connection:
            await connection.execute(
                f"INSERT INTO statemachine_effects ({_EFFECT_COLUMNS}) "
                "VALUES (%s, %s, %s, %s, 'intent', NULL, %s) ON CONFLICT (key) DO NOTHING",
                (key, run_id, tool, args_hash, self._chain.now()),
            )
            row = await self._fetch_effect(connection, key)
        if row is None:  # pragma: no cover - inserted above, or there already
            raise CheckpointError(f"effect {key!r} was not recorded", run_id=run_id)
        return self._chain.effect_record(row)

    async def record_result(self, key: str, result: Any) -> EffectRecord:
        """Record, durably, what the call under ``key`` returned; the effect is committed.

        ``result`` is a JSON-able document (``Decimal`` stays exact), sealed like a
        checkpoint. The intent must have been recorded first (else ``CheckpointError``);
        a result already committed is kept: it is what happened, and it is returned.
        """
        async with self._session(durable=True) as connection:
            row = await self._fetch_effect(connection, key, for_update=True)
            if row is None:
                raise CheckpointError(
                    f"effect {key!r} has no recorded intent, so its result was not recorded. "
                    "Record the intent (record_intent) before the call and the result after it."
                )
            if row.status == "intent":
                blob = self._chain.encode_effect(row, {"kind": "effect", "result": result})
                row = row._replace(status="committed", blob=blob, updated_at=self._chain.now())
                await connection.execute(
                    "UPDATE statemachine_effects SET status = %s, result = %s, updated_at = %s "
                    "WHERE key = %s",
                    (row.status, row.blob, row.updated_at, key),
                )
        return self._chain.effect_record(row)

    async def effect(self, key: str) -> EffectRecord | None:
        """The ledger's record under ``key``, or ``None`` if no call was recorded there."""
        async with self._session(read_only=True) as connection:
            row = await self._fetch_effect(connection, key)
        return None if row is None else self._chain.effect_record(row)

    async def discard_intent(self, key: str) -> None:
        """Forget the intent under ``key``: a person checked that the call did not go through.

        The next resume then runs the call again. A committed effect is refused
        (``CheckpointError``): it did go through. An unknown key is left as it is.
        """
        async with self._session(durable=True) as connection:
            row = await self._fetch_effect(connection, key, for_update=True)
            if row is not None and row.status == "committed":
                raise CheckpointError(
                    f"effect {key!r} of {row.tool} is committed: it went through, and its "
                    "result is kept. Resume the run to use that result.",
                    run_id=row.run_id,
                )
            if row is not None:
                await connection.execute("DELETE FROM statemachine_effects WHERE key = %s", (key,))


if TYPE_CHECKING:  # the PostgreSQL store satisfies the protocol, as mypy checks here
    _postgres: type[Checkpointer] = PostgresCheckpointer
