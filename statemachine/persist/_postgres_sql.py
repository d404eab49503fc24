"""The PostgreSQL store's tables and rows: the schema, its upgrades, and the row readers.

The statements that create the tables (prefixed ``statemachine_``) and add the columns
later releases added, the column lists, and the functions that turn a row into a
:class:`RunRecord` or an :class:`_EffectRow` and a DSN into the name messages use.
:mod:`._postgres` holds the store itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import TYPE_CHECKING, Any, Final, LiteralString

from .._errors import ConfigError
from ._lifecycle import RunStatus
from ._protocol import RunRecord
from ._rows import _EffectRow, _Row

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow

    _Connection = AsyncConnection[TupleRow]

__all__ = [
    "_store_row",
    "create_tables",
    "_ADDED_COLUMNS",
    "_CONNECT_TIMEOUT",
    "_DSN_ORDER",
    "_EFFECT_COLUMNS",
    "_INSTALL",
    "_RECORD_COLUMNS",
    "_RUN_COLUMNS",
    "_RUN_TABLES",
    "_SCHEMA",
    "_SCHEMA_LOCK",
    "_SCHEMA_OBJECTS",
    "_effect_row_of",
    "_record_of",
    "_redacted",
]

_CONNECT_TIMEOUT: Final = 10  # seconds, unless the DSN sets connect_timeout
# One advisory lock key for creating the tables: 64 bits of a hash of a fixed name.
_SCHEMA_LOCK: Final = int.from_bytes(
    hashlib.sha256(b"statemachine: create tables").digest()[:8], "big", signed=True
)
_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS statemachine_runs (
        run_id      TEXT COLLATE "C" PRIMARY KEY,  -- "C": run ids sort bytewise, as in SQLite
        agent       TEXT NOT NULL,
        status      TEXT NOT NULL,
        phase       TEXT NOT NULL,
        waiting_for TEXT NOT NULL,
        updated_at  TIMESTAMPTZ NOT NULL,
        seq         BIGINT NOT NULL,
        stop_requested BOOLEAN NOT NULL DEFAULT false,
        decision    BYTEA,  -- a person's sealed decision, waiting for a worker; NULL: none
        reason      TEXT NOT NULL DEFAULT '',    -- why it is held for a person; '' when not
        failures    INTEGER NOT NULL DEFAULT 0,  -- failed_resumable this many times in a row
        retry_at    TIMESTAMPTZ, -- when a worker may retry it; NULL: at once
        head        BYTEA        -- the head of its chain of checkpoints (see _chain)
    )""",
    "CREATE INDEX IF NOT EXISTS statemachine_runs_by_status "
    "ON statemachine_runs (status, updated_at)",
    """CREATE TABLE IF NOT EXISTS statemachine_checkpoints (
        run_id TEXT COLLATE "C" NOT NULL,
        seq    BIGINT NOT NULL,
        kind   TEXT NOT NULL CHECK (kind IN ('full', 'delta')),
        phase  TEXT NOT NULL,
        blob   BYTEA NOT NULL,
        at     TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS statemachine_snapshots "
    "ON statemachine_checkpoints (run_id, seq) WHERE kind = 'full'",
    """CREATE TABLE IF NOT EXISTS statemachine_claims (
        run_id TEXT COLLATE "C" PRIMARY KEY,
        owner  TEXT NOT NULL,
        until  TIMESTAMPTZ NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS statemachine_leases (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id      TEXT COLLATE "C" NOT NULL,
        owner       TEXT NOT NULL,
        claimed_at  TIMESTAMPTZ NOT NULL,
        until       TIMESTAMPTZ NOT NULL,
        released_at TIMESTAMPTZ  -- NULL: not released (still held, or lapsed at until)
    )""",
    "CREATE INDEX IF NOT EXISTS statemachine_leases_by_run ON statemachine_leases (run_id, id)",
    """CREATE TABLE IF NOT EXISTS statemachine_effects (
        key        TEXT PRIMARY KEY,  -- the idempotency key
        run_id     TEXT COLLATE "C" NOT NULL,
        tool       TEXT NOT NULL,
        args_hash  TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('intent', 'committed')),
        result     BYTEA,             -- sealed like a checkpoint; NULL while only an intent
        updated_at TIMESTAMPTZ NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS statemachine_effects_by_run ON statemachine_effects (run_id)",
)
_SCHEMA_OBJECTS: Final = (  # every table and index _SCHEMA creates
    "statemachine_runs",
    "statemachine_runs_by_status",
    "statemachine_checkpoints",
    "statemachine_snapshots",
    "statemachine_claims",
    "statemachine_leases",
    "statemachine_leases_by_run",
    "statemachine_effects",
    "statemachine_effects_by_run",
)
# Columns added to a table since the first release, for databases created before them:
# (table, column, the statement that adds it).
_ADDED_COLUMNS: Final[tuple[tuple[str, str, LiteralString], ...]] = (
    (
        "statemachine_runs",
        "reason",
        "ALTER TABLE statemachine_runs ADD COLUMN IF NOT EXISTS reason TEXT NOT NULL DEFAULT ''",
    ),
    (
        "statemachine_runs",
        "failures",
        "ALTER TABLE statemachine_runs ADD COLUMN IF NOT EXISTS failures INTEGER NOT NULL "
        "DEFAULT 0",
    ),
    (
        "statemachine_runs",
        "retry_at",
        "ALTER TABLE statemachine_runs ADD COLUMN IF NOT EXISTS retry_at TIMESTAMPTZ",
    ),
    (
        "statemachine_runs",
        "head",
        "ALTER TABLE statemachine_runs ADD COLUMN IF NOT EXISTS head BYTEA",
    ),
)
_RECORD_COLUMNS: Final = (
    "run_id, agent, status, phase, waiting_for, updated_at, seq, stop_requested, "
    "decision IS NOT NULL, reason, failures, retry_at"
)
_RUN_COLUMNS: Final = (  # the same, of the runs table named r
    "r.run_id, r.agent, r.status, r.phase, r.waiting_for, r.updated_at, r.seq, "
    "r.stop_requested, r.decision IS NOT NULL, r.reason, r.failures, r.retry_at"
)
_RUN_TABLES: Final = (  # what a purged run leaves besides its row
    "statemachine_checkpoints",
    "statemachine_effects",
    "statemachine_claims",
    "statemachine_leases",
)
_EFFECT_COLUMNS: Final = "key, run_id, tool, args_hash, status, result, updated_at"
_DSN_ORDER: Final = ("host", "hostaddr", "port", "dbname", "user")
_INSTALL: Final = "install them with: pip install 'statemachine-agents[postgres]'"


def _record_of(row: tuple[Any, ...]) -> RunRecord:
    run_id, agent, status, phase, waiting_for, updated_at, seq, stop, pending, *retry = row
    reason, failures, retry_at = retry
    return RunRecord(
        run_id=run_id,
        agent=agent,
        status=RunStatus(status),
        phase=phase,
        waiting_for=waiting_for,
        updated_at=updated_at.astimezone(UTC),
        seq=seq,
        stop_requested=stop,
        decision_pending=pending,
        reason=reason,
        failures=failures,
        retry_at=None if retry_at is None else retry_at.astimezone(UTC),
    )


def _effect_row_of(row: tuple[Any, ...]) -> _EffectRow:
    key, run_id, tool, args_hash, status, result, updated_at = row
    blob = None if result is None else bytes(result)
    return _EffectRow(key, run_id, tool, args_hash, status, blob, updated_at.astimezone(UTC))


def _redacted(dsn: str) -> str:
    """The DSN without its password, to name the store in messages; a bad DSN is refused."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(
            (
                f"the PostgreSQL DSN {dsn!r} cannot be read ({reason}); write it as "
                "'postgresql://user@host:5432/dbname' or 'host=... port=... dbname=... user=...'",
            )
        ) from None
    parts.pop("password", None)
    # Where, then who, then the rest as given: the same DSN written two ways reads the same.
    first = [key for key in _DSN_ORDER if key in parts]
    ordered = first + [key for key in parts if key not in first]
    return make_conninfo(**{key: str(parts[key]) for key in ordered})


async def create_tables(
    connection: _Connection, record_heads: Callable[[_Connection], Awaitable[None]]
) -> None:
    """Create the tables and indexes that are missing, and add missing columns, in one
    transaction; ``record_heads`` when the head column is added to a table of runs.

    Only when one is missing: ``CREATE INDEX IF NOT EXISTS`` locks its table even when
    the index exists, and that lock, held while another process saves, can deadlock
    with it. The advisory lock lets one process at a time create them; the others then
    find them all there. Runs saved before runs recorded a head get one once, when the
    column is added (a table made by ``_SCHEMA`` has it, and no runs).
    """
    if not await _missing(connection):
        return
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        if await _missing(connection):
            heads_before = await _has_heads(connection)
            for statement in _SCHEMA:
                await connection.execute(statement)
            for _, _, add in _ADDED_COLUMNS:  # to a database made before them
                await connection.execute(add)
            if not heads_before:
                await record_heads(connection)


async def _has_heads(connection: _Connection) -> bool:
    cursor = await connection.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND table_name = 'statemachine_runs' AND column_name = 'head'"
    )
    row = await cursor.fetchone()
    return row is not None and row[0] == 1


async def _missing(connection: _Connection) -> bool:
    """Whether a table, an index or an added column of the schema is missing."""
    cursor = await connection.execute(
        "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        " AND relname = ANY(%s)",
        (list(_SCHEMA_OBJECTS),),
    )
    row = await cursor.fetchone()
    if row is None or row[0] != len(_SCHEMA_OBJECTS):
        return True
    cursor = await connection.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
        "current_schema() AND (table_name, column_name) IN "
        "(SELECT * FROM unnest(%s::text[], %s::text[]))",
        ([t for t, _, _ in _ADDED_COLUMNS], [c for _, c, _ in _ADDED_COLUMNS]),
    )
    row = await cursor.fetchone()
    return row is None or row[0] != len(_ADDED_COLUMNS)


async def _store_row(connection: _Connection, run_id: str, row: _Row) -> None:
    """Insert checkpoint ``row`` of the run."""
    await connection.execute(
        "INSERT INTO statemachine_checkpoints (run_id, seq, kind, phase, blob, at) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (run_id, row.seq, "full" if row.snapshot else "delta", row.phase, row.blob, row.at),
    )
