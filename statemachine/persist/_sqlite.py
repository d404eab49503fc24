"""The embedded default store: :class:`SQLiteCheckpointer`, its schema and upgrades,
and the thread that copies its WAL back into the file."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from hashlib import sha256 as _sha256
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import anyio.to_thread

from .._errors import CheckpointCorruptError
from .._fast._pydantic import _trusted
from .._json import dumps_bytes
from ._base import _new_tuple, _Store
from ._chain import _DOMAIN
from ._lifecycle import ENDINGS, RunStatus
from ._protocol import CheckpointEntry, LeaseRecord, RunRecord, Sealer
from ._rows import (
    _DIGEST,
    _EPOCH,
    _RECENT_RUNS,
    _SAVED_FIELDS,
    _SETTLED,
    _Change,
    _EffectRow,
    _entry,
    _Last,
    _Row,
    _Since,
    _system_clock,
)

if TYPE_CHECKING:
    from ._protocol import Checkpointer

__all__ = ["SQLiteCheckpointer"]

_BUSY_MS: Final = 5000  # how long SQLite waits for another connection's write lock
# Pages written to SQLite's WAL after which it is copied back into the database file (by
# a thread of the checkpointer's own, not by the commit that crossed the mark): four times
# SQLite's own default for its automatic checkpoint (16 MB of 4 KB pages). Each copy ends
# with a catch-up on the saving connection that waits for the disk twice (two fsyncs,
# 2-20 ms here): the fewer copies, the less a save pays for them on average.
_WAL_PAGES: Final = 4000
_T = TypeVar("_T")
# A saved record's own set of the fields it was given (``_trusted``), copied for each:
# a set's copy costs less than a set made from the tuple.
_SAVED_SET: Final[set[str]] = set(_SAVED_FIELDS)


# The ended runs (ENDINGS), as their index and purge's query both write them: the
# planner uses a partial index for a query whose terms are the index's own.
_ENDED: Final = f"status IN ({', '.join(repr(status.value) for status in sorted(ENDINGS))})"
# The checkpoints table is a rowid table keyed by its rowid alone: ``id`` is the run's
# number (``runs.number``, given to a run when its row is first written, from the counter
# ``run_numbers``, never given twice) times 2**32 plus the checkpoint's seq, so a run's
# checkpoints are one range of rowids, in seq order, and a save writes its row's page and
# the run's row (no key index: 3.57 -> ~2.5 WAL pages a save). Its run_id and seq columns
# stay, as the rows' own record of their key, with the number (NOT NULL without a default:
# an earlier version's insert, which names none, is refused, never put in another run's
# range; the CHECK keeps the three together and refuses a seq beyond 32 bits). WITHOUT
# ROWID with the key (run_id, seq), measured: 3.57 -> 3.92 WAL pages a save (its rows of
# ~660 bytes are a sixth of a page, where SQLite's own advice is a twentieth, and an index
# b-tree's pages split by rebalancing three neighbours, where a rowid table's last page
# simply starts a new one).
#
# A run's end marker (format version 1, ``PRAGMA user_version``): the row after its newest
# checkpoint, at that checkpoint's seq + 1, the only row of the run whose ``head`` is not
# NULL. It holds what each save moves: the chain's head, the newest checkpoint's phase and
# its moment (``at``); its blob is empty. A save turns the marker into the checkpoint and
# inserts the next marker after it, both on one page (the rowid table's last one, for the
# newest run): the run's row is not written by a save that changes only those, so a save
# writes one page where it wrote two. The run's row keeps the rest (status, decision, ...)
# and its own phase, seq and moment as its last change of status wrote them; a read takes
# seq and phase from the marker, the moment the later of the two (_RUN_ROWS). The head is
# read from the marker alone: checkpoints removed from a run's end with their marker leave
# a run whose head is missing, which a load refuses (tests/test_store_tail_removed.py).
_CHECKPOINTS_COLUMNS: Final = """
    id     INTEGER PRIMARY KEY
           CHECK (id = (number << 32) + seq AND number > 0 AND seq BETWEEN 0 AND 4294967295),
    number INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT NOT NULL CHECK (kind IN ('full', 'delta')),
    phase  TEXT NOT NULL,
    blob   BLOB NOT NULL,
    at     TEXT NOT NULL DEFAULT '1970-01-01T00:00:00.000000+00:00', -- when it was saved
    head   BLOB  -- the run's end marker only (see above): its chain's head; NULL otherwise
"""
_SCHEMA: Final = (
    """
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    status      TEXT NOT NULL,
    phase       TEXT NOT NULL,
    waiting_for TEXT NOT NULL,
    updated_at  TEXT NOT NULL,  -- ISO 8601 in UTC, one width: sorts as time does
    seq         INTEGER NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    decision    BLOB,           -- a person's decision, sealed; NULL when none is pending
    reason      TEXT NOT NULL DEFAULT '',   -- why it is held for a person; '' when not
    failures    INTEGER NOT NULL DEFAULT 0, -- failed_resumable this many times in a row
    retry_at    TEXT,           -- when a worker may retry it; NULL: at once
    head        BLOB,           -- before format 1: its chain's head (now its end marker's)
    number      INTEGER         -- its checkpoints' ids are number * 2**32 + seq
);
-- By status alone: a save changes a run's updated_at, and an index holding it would be
-- one more page written per save. Ended runs, which purge reads by age, keep it.
DROP INDEX IF EXISTS runs_by_status;
CREATE INDEX IF NOT EXISTS runs_of_status ON runs (status);
CREATE INDEX IF NOT EXISTS runs_ended ON runs (status, updated_at) WHERE """
    + _ENDED
    + """;
CREATE TABLE IF NOT EXISTS checkpoints ("""
    + _CHECKPOINTS_COLUMNS
    + """);
CREATE TABLE IF NOT EXISTS run_numbers (  -- one row: the last number given to a run
    one  INTEGER PRIMARY KEY CHECK (one = 1),
    last INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    run_id TEXT PRIMARY KEY,
    owner  TEXT NOT NULL,
    until  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS leases (  -- the history of claims: who held which run when
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    owner       TEXT NOT NULL,
    claimed_at  TEXT NOT NULL,
    until       TEXT NOT NULL,
    released_at TEXT            -- NULL: not released (still held, or lapsed at until)
);
CREATE INDEX IF NOT EXISTS leases_by_run ON leases (run_id, id);
CREATE TABLE IF NOT EXISTS effects (
    key        TEXT PRIMARY KEY,  -- the idempotency key
    run_id     TEXT NOT NULL,
    tool       TEXT NOT NULL,
    args_hash  TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('intent', 'committed')),
    result     BLOB,              -- sealed like a checkpoint; NULL while only an intent
    updated_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS effects_by_run ON effects (run_id);
"""
)
# A run's next delta saved in one statement (``SQLiteCheckpointer._save_next``): an
# insert into this view, whose trigger checks that the run's row is still the one this
# connection wrote last (each column a save reads: a read, not a write), turns the run's
# end marker into the checkpoint where it still holds the head this connection saved last,
# and inserts the next marker. Any other row refuses it (RAISE: nothing is written), and
# the plain path, which reads the rows, saves instead. Created after the upgrade's columns,
# with the index of snapshots, the counter's row and the trigger that keeps the counter
# at or above every run's number (a run's row is inserted with the counter's next number).
# Before format 1 the view was ``next_delta`` and its trigger moved the run's row: the
# upgrade drops both (_marked).
_SAVE_NEXT_SCHEMA: Final = (
    "CREATE INDEX IF NOT EXISTS snapshots ON checkpoints (id) WHERE kind = 'full'",
    "INSERT OR IGNORE INTO run_numbers VALUES (1, coalesce((SELECT max(number) FROM runs), 0))",
    """CREATE TRIGGER IF NOT EXISTS run_numbered AFTER INSERT ON runs BEGIN
    UPDATE run_numbers SET last = NEW.number WHERE last < NEW.number;
END""",
    "CREATE VIEW IF NOT EXISTS next_checkpoint (run_id, seq, phase, blob, at, head, previous, "
    "status, waiting_for, agent, stop_requested, number) AS SELECT NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0",
    """CREATE TRIGGER IF NOT EXISTS next_checkpoint_saved INSTEAD OF INSERT ON next_checkpoint
BEGIN
    SELECT RAISE(ABORT, 'not the row this connection wrote') WHERE NOT EXISTS (SELECT 1
    FROM runs WHERE run_id = NEW.run_id AND status = NEW.status
    AND waiting_for = NEW.waiting_for AND agent = NEW.agent
    AND stop_requested = NEW.stop_requested AND decision IS NULL AND reason = ''
    AND failures = 0 AND retry_at IS NULL AND number = NEW.number);
    UPDATE checkpoints SET phase = NEW.phase, blob = NEW.blob, at = NEW.at, head = NULL
    WHERE id = (NEW.number << 32) + NEW.seq AND head = NEW.previous;
    SELECT RAISE(ABORT, 'not the end this connection saved') WHERE changes() = 0;
    INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head)
    VALUES ((NEW.number << 32) + NEW.seq + 1, NEW.number, NEW.run_id, NEW.seq + 1, 'delta',
    NEW.phase, x'', NEW.at, NEW.head);
END""",
)
_SAVE_NEXT: Final = "INSERT INTO next_checkpoint VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_EFFECT_COLUMNS: Final = "key, run_id, tool, args_hash, status, result, updated_at"
# The checkpoints' format (``PRAGMA user_version``): 1 since runs end with a marker row
# (see _CHECKPOINTS_COLUMNS); 0 before, the head kept in the run's row.
_FORMAT: Final = 1
# A run's newest row among its checkpoints (by its rowid range: one seek), in a statement
# that reads ``runs``.
_LAST_ID: Final = (
    "(SELECT id FROM checkpoints WHERE id BETWEEN runs.number << 32 "
    "AND (runs.number << 32) + 4294967295 ORDER BY id DESC LIMIT 1)"
)
# A run's end marker removed (by a plain save, before its checkpoint's insert): one seek.
_MARKER_GONE: Final = (
    "DELETE FROM checkpoints WHERE head IS NOT NULL AND id = (SELECT c.id FROM "
    "checkpoints AS c, runs WHERE runs.run_id = ? AND c.id BETWEEN runs.number << 32 "
    "AND (runs.number << 32) + 4294967295 ORDER BY c.id DESC LIMIT 1)"
)
# The runs with their newest rows (``m``: the end marker, whose head is set; NULL where a
# run has no checkpoint yet; a checkpoint where its marker was removed from the file).
_RUN_ROWS: Final = f"runs LEFT JOIN checkpoints AS m ON m.id = {_LAST_ID}"
# The ended runs whose row and marker are both older than a moment (purge): by the index
# of ended runs, then one seek a run.
_ENDED_BEFORE: Final = (
    f"SELECT runs.run_id FROM {_RUN_ROWS} WHERE {_ENDED} AND runs.updated_at < ? "
    "AND coalesce(m.at, '') < ?"
)
# A run's record, from _RUN_ROWS: its seq and phase its marker's (its newest checkpoint's;
# without a marker, its newest checkpoint's own), its moment the later of its row's (its
# last change of status) and its marker's.
_RECORD_COLUMNS: Final = (
    "runs.run_id, runs.agent, runs.status, coalesce(m.phase, runs.phase), runs.waiting_for, "
    "max(runs.updated_at, coalesce(m.at, '')) AS moment, "
    "coalesce(m.seq - (m.head IS NOT NULL), runs.seq), runs.stop_requested, "
    "runs.decision IS NOT NULL, runs.reason, runs.failures, runs.retry_at"
)
# Columns added since the first release, for files written before them.
_ADDED_COLUMNS: Final = (
    ("runs", "stop_requested", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "decision", "BLOB"),
    ("checkpoints", "at", "TEXT NOT NULL DEFAULT '1970-01-01T00:00:00.000000+00:00'"),
    ("runs", "reason", "TEXT NOT NULL DEFAULT ''"),
    ("runs", "failures", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "retry_at", "TEXT"),
    ("runs", "head", "BLOB"),
    ("runs", "number", "INTEGER"),
    ("checkpoints", "head", "BLOB"),
)
# A run's checkpoints, the rowids from its number's first to its last (see _SCHEMA): the
# run's row read in the statement itself (a read never trusts a number kept in memory).
_RANGE: Final = (
    "id BETWEEN (SELECT number << 32 FROM runs WHERE run_id = :run_id) "
    "AND (SELECT (number << 32) + 4294967295 FROM runs WHERE run_id = :run_id)"
)
_LEASE_COLUMNS: Final = "run_id, owner, claimed_at, until, released_at"


# The second a stamp was last made in: (its first moment, its last, its text up to the
# fraction "YYYY-MM-DDTHH:MM:SS."), one tuple so that threads never read half of a change.
# An empty span (first after last) until the first stamp.
_second: tuple[datetime, datetime, str] = (
    datetime.max.replace(tzinfo=UTC),
    datetime.min.replace(tzinfo=UTC),
    "",
)
# The microseconds' text: their first three digits, and their last three with the offset.
_HIGH: Final = tuple(f"{number:03d}" for number in range(1000))
_LOW: Final = tuple(f"{number:03d}+00:00" for number in range(1000))


def _stamp(moment: datetime) -> str:
    """``moment.astimezone(UTC).isoformat(timespec="microseconds")``, its second's text kept.

    ``isoformat`` costs about 15,000 instructions here (a save makes one stamp); the
    text up to the second changes once a second, and the rest is the microseconds. A
    moment of the second kept (an exact ``datetime`` in UTC itself, compared with the
    second's first and last moment: the same date, hour, minute and second) takes its
    text; the microseconds' six digits are two texts of three, looked up.
    """
    global _second
    if moment.tzinfo is not UTC or type(moment) is not datetime:
        moment = moment.astimezone(UTC)
        if type(moment) is not datetime:  # a subclass's isoformat may be its own
            return moment.isoformat(timespec="microseconds")
    first, last, text = _second
    if not first <= moment <= last:
        text = moment.isoformat(timespec="seconds")[:19] + "."
        _second = (
            moment.replace(microsecond=0),
            moment.replace(microsecond=999_999),
            text,
        )
    micro = moment.microsecond
    return text + _HIGH[micro // 1000] + _LOW[micro % 1000]


def _record_of(row: tuple[Any, ...]) -> RunRecord:
    run_id, agent, status, phase, waiting_for, updated_at, seq, stop, decided, *retry = row
    reason, failures, retry_at = retry
    return RunRecord(
        run_id=run_id,
        agent=agent,
        status=RunStatus(status),
        phase=phase,
        waiting_for=waiting_for,
        updated_at=datetime.fromisoformat(updated_at),
        seq=seq,
        stop_requested=bool(stop),
        decision_pending=bool(decided),
        reason=reason,
        failures=failures,
        retry_at=None if retry_at is None else datetime.fromisoformat(retry_at),
    )


# The fields of a run's row that an ordinary save leaves as they were (see _same_but_saved).
_KEPT_BY_SAVE: Final = itemgetter(
    "status", "waiting_for", "agent", "stop_requested", "reason", "failures", "retry_at"
)


def _same_but_saved(before: RunRecord, saved: RunRecord) -> bool:
    """Whether a save's row differs from the one before only in what every save changes
    (phase, updated_at, seq, head) and in the pending decision (cleared on its own).

    The fields read from the models' dicts in C, compared as one tuple: a pydantic
    model's attributes go through its ``__getattr__`` hook, one by one.
    """
    kept: tuple[Any, ...] = _KEPT_BY_SAVE(vars(before))
    now: tuple[Any, ...] = _KEPT_BY_SAVE(vars(saved))
    return kept == now


def _lease_of(row: tuple[Any, ...]) -> LeaseRecord:
    run_id, owner, claimed_at, until, released_at = row
    return LeaseRecord(
        run_id=run_id,
        owner=owner,
        claimed_at=datetime.fromisoformat(claimed_at),
        until=datetime.fromisoformat(until),
        released_at=None if released_at is None else datetime.fromisoformat(released_at),
    )


def _upgrade(connection: sqlite3.Connection) -> set[tuple[str, str]]:
    """Add the columns a file written by an earlier version lacks; the ones it added."""
    added: set[tuple[str, str]] = set()
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            added.add((table, column))
    return added


def _keyed_by_rowid(connection: sqlite3.Connection) -> bool:
    """Move a file's checkpoints, keyed by (run_id, seq) before, to the rowid key (see
    _SCHEMA), in the upgrade's transaction; whether it had to.

    Each run is numbered with its row's rowid (unique, above 0); a checkpoint whose run
    has no row, or whose seq is outside 0 to 2**32 - 1, is kept where it was, in the
    table renamed ``checkpoints_before_rowid`` (never read; nothing is dropped).
    """
    present = {row[1] for row in connection.execute("PRAGMA table_info(checkpoints)")}
    if "id" in present:
        return False
    # The view's trigger and the old key's index name the old columns: made again after.
    connection.execute("DROP TRIGGER IF EXISTS next_delta_saved")
    connection.execute("DROP VIEW IF EXISTS next_delta")
    connection.execute("DROP INDEX IF EXISTS snapshots")
    connection.execute("UPDATE runs SET number = rowid WHERE number IS NULL")
    connection.execute(f"CREATE TABLE checkpoints_keyed ({_CHECKPOINTS_COLUMNS})")
    moved = connection.execute(
        "INSERT INTO checkpoints_keyed (id, number, run_id, seq, kind, phase, blob, at) "
        "SELECT (runs.number << 32) + c.seq, runs.number, c.run_id, c.seq, c.kind, c.phase, "
        "c.blob, c.at "
        "FROM checkpoints AS c JOIN runs ON runs.run_id = c.run_id "
        "WHERE c.seq BETWEEN 0 AND 4294967295 ORDER BY runs.number, c.seq"
    ).rowcount
    (found,) = connection.execute("SELECT count(*) FROM checkpoints").fetchone()
    if moved == found:
        connection.execute("DROP TABLE checkpoints")
    else:
        connection.execute(
            "DELETE FROM checkpoints WHERE seq BETWEEN 0 AND 4294967295 "
            "AND run_id IN (SELECT run_id FROM runs)"
        )
        connection.execute("ALTER TABLE checkpoints RENAME TO checkpoints_before_rowid")
    connection.execute("ALTER TABLE checkpoints_keyed RENAME TO checkpoints")
    return True


def _marked(connection: sqlite3.Connection) -> bool:
    """Move a file's runs' heads, kept in their rows before format 1, to end markers (see
    _CHECKPOINTS_COLUMNS), in the upgrade's transaction; whether it had to.

    Each run with a head gets its marker after the checkpoint its row records as its
    newest (``seq``), with its row's phase and moment, and its row's head is cleared. A
    run whose marker cannot go there (a checkpoint is in its place: its row was changed
    after the save) keeps its head in its row, where nothing reads it: it has no marker,
    so a load refuses it, as it refused the row before. The old one-statement save (the
    view ``next_delta``, whose trigger writes the run's row) is dropped.
    """
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    if version >= _FORMAT:
        return False
    connection.execute("DROP TRIGGER IF EXISTS next_delta_saved")
    connection.execute("DROP VIEW IF EXISTS next_delta")
    connection.execute(
        "INSERT OR IGNORE INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head) "
        "SELECT (number << 32) + seq + 1, number, run_id, seq + 1, 'delta', phase, x'', "
        "updated_at, head FROM runs WHERE head IS NOT NULL AND number IS NOT NULL "
        "AND seq BETWEEN 0 AND 4294967294 ORDER BY number"
    )
    connection.execute(
        "UPDATE runs SET head = NULL WHERE head IS NOT NULL AND EXISTS (SELECT 1 FROM "
        "checkpoints WHERE id = (runs.number << 32) + runs.seq + 1 AND head = runs.head)"
    )
    connection.execute(f"PRAGMA user_version = {_FORMAT}")
    return True


def _all_rows(connection: sqlite3.Connection, run_id: str) -> list[_Row]:
    rows = connection.execute(
        f"SELECT seq, kind, phase, blob FROM checkpoints WHERE {_RANGE} AND head IS NULL "
        "ORDER BY id",
        {"run_id": run_id},
    ).fetchall()
    return [_Row(seq, kind == "full", phase, bytes(blob)) for seq, kind, phase, blob in rows]


class _SQLiteTransaction:
    """One transaction of a :class:`SQLiteCheckpointer`'s connection (``with``).

    A class rather than a generator: a save opens one per checkpoint.
    """

    __slots__ = ("_db", "_durable", "_store", "_write")

    def __init__(self, store: SQLiteCheckpointer, write: bool, durable: bool) -> None:
        self._store, self._write, self._durable = store, write, durable

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        if self._durable:
            self._db = store._begin(self._write, True)
            return self._db
        # An ordinary one (every save), without _begin's frame: as _begin does it.
        self._db = db = store._connection or store._db
        store._cursor.execute("BEGIN IMMEDIATE" if self._write else "BEGIN")
        return db

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        store, db = self._store, self._db
        try:
            if kind is not None:
                store._written.clear()  # what was written is undone
                store._cursor.execute("ROLLBACK")
                return
            try:
                store._cursor.execute("COMMIT")
            except BaseException:
                store._written.clear()
                raise
        finally:
            if self._durable:
                pages = store._end(db, True)
            else:  # as _end does it
                pages, store._tx_pages = store._tx_pages, 0
        if self._write:
            store._committed(db, pages)


class _WalCheckpoint:
    """Copies a SQLite file's WAL back into the file, mostly in a thread of its own.

    ``start()`` returns at once (a no-op while one is under way): a thread, with a
    connection of its own, copies back every page the WAL holds then (``PASSIVE``: it
    never waits for a lock, so it holds up no save). The saves committed meanwhile are
    copied back by ``catch_up()``, which the saving connection calls after its next
    commit: a few pages, and then the WAL is wholly in the file, so that the next write
    starts it again from its beginning instead of making it longer. ``close()`` waits
    for the thread.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()  # guards _thread
        self._running = threading.Lock()  # held by the thread's copy; guards _connection
        self._thread: threading.Thread | None = None
        self._connection: sqlite3.Connection | None = None
        self.finished = False  # the thread's copy is done; the catch-up is not
        self.done = 0  # copies the thread made (tests read it)
        self.failed: sqlite3.Error | None = None  # the thread's last error, if it failed

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name="statemachine-wal-checkpoint", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        with self._running:
            try:
                if self._connection is None:
                    self._connection = sqlite3.connect(
                        self._path, isolation_level=None, check_same_thread=False
                    )
                self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error as exc:  # the disk is full, the file was moved: try later
                self.failed = exc
            else:
                self.failed = None
            self.done += 1
            self.finished = True

    def catch_up(self, connection: sqlite3.Connection) -> None:
        """Copy back, from the saving connection, what was committed during the thread's copy."""
        self.finished = False
        # On failure the next start() tries again; what was committed stays in the WAL.
        with suppress(sqlite3.Error):
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        with self._running:
            self.finished = False
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class SQLiteCheckpointer(_Store):
    """Checkpoints in one SQLite file (WAL), created with its tables on first use.

    The embedded default. One connection per checkpointer, used by one worker thread
    at a time; a save is one ``BEGIN IMMEDIATE`` transaction, so two processes on
    the same file cannot both save the same seq. A save runs on the event loop itself
    when the connection is free and no other connection holds the write lock (it never
    waits for one there): a commit that need not reach the disk costs less than a hop
    to a thread. The run's registry row is read from memory when no other connection
    has committed since this one wrote it (``PRAGMA data_version``); a save that changes
    only its phase, time, seq and head writes those in the run's end marker, the row
    after its newest checkpoint, which the save turns into the checkpoint before
    inserting the next (see _CHECKPOINTS_COLUMNS): one page a save, the table's last,
    and the run's row is not written. A run's next delta is saved in one statement, its
    own transaction (``_save_next``: an insert into the view ``next_checkpoint``, whose
    trigger writes only while the run's row is still the one this connection wrote and
    its marker holds the head this connection saved last).
    ``synchronous=NORMAL``: a process crash loses nothing committed; a power cut may
    lose the last commits, never the file. The side-effect ledger is written with
    ``synchronous=FULL``: a recorded intent or result survives a power cut too. Its
    ``effects`` table is created, like the others, when the file is first opened. Call
    ``aclose()`` (or use ``async with``) when done.

    The WAL is copied back into the database file (a checkpoint, which waits for the
    disk) by a thread of this checkpointer's own, with a connection of its own, once
    about 4,000 pages (16 MB) were written since the last one: not by the commit that
    happens to cross the mark, as SQLite's automatic checkpoint does. A checkpoint that
    fails (the disk is full) is tried again after the next 4,000 pages; what was
    committed stays in the WAL, which SQLite reads as part of the file, so nothing is
    lost.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
    ) -> None:
        super().__init__(
            snapshot_every=snapshot_every,
            sealer=sealer,
            clock=clock,
            where=f"the checkpoint store {str(Path(path))!r}",
        )
        self.path = Path(path)
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        # A cursor of the connection, kept for a save's statements: Connection.execute
        # makes a cursor for each (set when the connection is opened, by _db).
        self._cursor: sqlite3.Cursor
        # The rows this connection wrote last, valid while no other connection has
        # committed since (PRAGMA data_version stays ``_version``): a save reads its
        # run's row from here instead of the file.
        self._written: dict[str, RunRecord] = {}
        # The runs' numbers (see _SCHEMA) as this connection's saves found them: a number
        # is never given to another run, and the next delta's trigger checks it against
        # the run's row, so one that is out of date is refused (the plain path saves).
        self._numbers: dict[str, int] = {}
        self._version: int | None = None
        # The connection's busy timeout: 0 while a save runs on the event loop.
        self._busy_ms = _BUSY_MS
        # Pages written to the WAL since the last checkpoint (an estimate), the pages of
        # the transaction under way, and the thread that copies the WAL back.
        self._wal_pages = 0
        self._tx_pages = 0
        self._wal = _WalCheckpoint(self.path)
        self._stamped = (_EPOCH, _stamp(_EPOCH))  # the last moment stamped, and its text

    async def __aenter__(self) -> SQLiteCheckpointer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; a later operation opens it again."""
        await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            self._wal.close()  # before the last connection closes, which checkpoints
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            self._written.clear()
            self._numbers.clear()
            self._version = None  # each connection counts data_version on its own
            self._wal_pages = 0

    async def _call(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        def locked() -> _T:
            with self._lock:
                self._wait_for_locks(_BUSY_MS)
                return self._guarded(run_id, function, *args)

        return await anyio.to_thread.run_sync(locked)

    def _save_now(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        agent: str,
        status: RunStatus,
        phase: str,
        waiting_for: str,
        change: _Change | None,
    ) -> RunRecord | None:
        """Run a save on the event loop when that cannot wait; ``None``: it was not run
        (nothing was saved), and ``save`` runs it in a worker thread.

        A save is one short transaction; with WAL and ``synchronous=NORMAL`` its commit
        does not wait for the disk, so a hop to a thread would cost more than the save.
        It runs here only when the connection is open and free, and it does not wait
        for another process's write lock: then (``SQLITE_BUSY``) it goes to a thread.
        A plain function, not a coroutine: a save made here costs no coroutine of its own.
        """
        if self._connection is None or not self._lock.acquire(False):
            return None
        try:
            # Set only when it changes: a run's saves follow each other on the event loop.
            if self._busy_ms:
                self._wait_for_locks(0)
            try:  # as _guarded runs it, without its frame
                # _save's next delta (its frame once a save): its row written by this
                # connection; any other save, and one _save_next does not make, is _save's.
                record = self._written.get(run_id)
                if record is not None:
                    saved = self._save_next(
                        run_id, seq, document, agent, status, phase, waiting_for, change, record
                    )
                    if type(saved) is RunRecord:
                        return saved
                    if saved is not None:  # refused by the file: _save's plain path, at it
                        now = cast("datetime", saved)
                        return self._save(
                            run_id, seq, document, agent, status, phase, waiting_for, change, now
                        )
                return self._save(run_id, seq, document, agent, status, phase, waiting_for, change)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
                return None  # nothing was saved: wait for the lock in a thread
            except sqlite3.DatabaseError as exc:
                raise self._unreadable(run_id, exc) from exc
        finally:
            self._lock.release()

    def _wait_for_locks(self, ms: int) -> None:
        """Set how long a statement waits for another connection's lock (under ``_lock``)."""
        if self._busy_ms != ms and self._connection is not None:
            self._connection.execute(f"PRAGMA busy_timeout = {ms}")
            self._busy_ms = ms

    def _guarded(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        try:
            return function(*args)
        except sqlite3.OperationalError:
            raise  # locked, busy, disk full: not the data's fault
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(run_id, exc) from exc

    def _unreadable(self, run_id: str | None, exc: sqlite3.DatabaseError) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"{self._where} cannot be read ({exc}). Nothing was changed. Restore "
            "the file from a backup, or move it aside to start with an empty store.",
            run_id=run_id,
        )

    @property
    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            try:
                connection.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
                connection.execute("PRAGMA journal_mode = WAL")
                connection.execute("PRAGMA synchronous = NORMAL")
                # Checkpoints are _WalCheckpoint's, in a thread of their own.
                connection.execute("PRAGMA wal_autocheckpoint = 0")
                # One transaction: one commit, and one process creates or upgrades at a time.
                connection.executescript("BEGIN IMMEDIATE;\n" + _SCHEMA)
                try:
                    added = _upgrade(connection)
                    _keyed_by_rowid(connection)
                    if ("runs", "head") in added:
                        self._record_heads(connection)
                    _marked(connection)
                    for statement in _SAVE_NEXT_SCHEMA:
                        connection.execute(statement)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
            except BaseException:
                connection.close()
                raise
            self._connection = connection
            self._cursor = connection.cursor()
            self._busy_ms = _BUSY_MS
        return self._connection

    def _record_heads(self, connection: sqlite3.Connection) -> None:
        """Record each run's head, in a file written before runs recorded one (once: when
        the column is added).

        Computed from the rows as they are found (a file changed before this cannot be
        told apart); a run with no checkpoints is left without one, and refused on load.
        """
        runs = connection.execute("SELECT run_id FROM runs WHERE head IS NULL").fetchall()
        for (run_id,) in runs:
            rows = _all_rows(connection, run_id)
            if rows:
                head = self._chain.migrated_head(run_id, rows)
                connection.execute("UPDATE runs SET head = ? WHERE run_id = ?", (head, run_id))

    def _transaction(self, *, write: bool, durable: bool = False) -> _SQLiteTransaction:
        return _SQLiteTransaction(self, write, durable)

    def _begin(self, write: bool, durable: bool) -> sqlite3.Connection:
        db = self._db
        if durable:  # set outside the transaction: the commit is what must reach the disk
            db.execute("PRAGMA synchronous = FULL")
        try:
            self._cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except BaseException:
            self._end(db, durable)
            raise
        return db

    def _end(self, db: sqlite3.Connection, durable: bool) -> int:
        """What follows a transaction, committed or not; the pages it wrote to the WAL."""
        pages, self._tx_pages = self._tx_pages, 0
        if durable:
            db.execute("PRAGMA synchronous = NORMAL")
        return pages

    def _committed(self, db: sqlite3.Connection, pages: int) -> None:
        # Three pages a save, and its blobs: the count that times the WAL's copy back, kept
        # as it was measured. A save writes one page since format 1 (and a new leaf now and
        # then); counting one made the bench's run 11% slower (its WAL was copied back by
        # the close, waiting, not by the thread during the run), counting six -1% (noise).
        self._wal_pages += 3 + pages
        if self._wal.finished:
            self._wal.catch_up(db)
        elif self._wal_pages >= _WAL_PAGES:
            self._wal_pages = 0
            self._wal.start()

    def _stamp(self, moment: datetime) -> str:
        """``_stamp(moment)``; a save stamps its row and its registry row with one moment."""
        stamped = self._stamped
        if stamped[0] is not moment:
            stamped = self._stamped = (moment, _stamp(moment))
        return stamped[1]

    def _get_record(self, run_id: str) -> RunRecord | None:
        row = self._db.execute(
            f"SELECT {_RECORD_COLUMNS} FROM {_RUN_ROWS} WHERE runs.run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else _record_of(row)

    def _get_record_to_save(self, run_id: str) -> RunRecord | None:
        # Inside the save's write transaction: no other connection can commit until it ends.
        (version,) = self._cursor.execute("PRAGMA data_version").fetchone()
        if version != self._version:
            self._written.clear()  # another connection committed: any row may have changed
            self._version = version
        record = self._written.get(run_id)
        return self._get_record(run_id) if record is None else record

    def _put_record(self, record: RunRecord, head: bytes | None = None) -> None:
        # An upsert, not a replace: the row's decision is written by _put_decision only,
        # the head by a save only, in the run's end marker (see _CHECKPOINTS_COLUMNS).
        self._db.execute(
            "INSERT INTO runs (run_id, agent, status, phase, waiting_for, updated_at, seq, "
            "stop_requested, reason, failures, retry_at, number) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, (SELECT last + 1 FROM run_numbers)) "
            "ON CONFLICT (run_id) DO UPDATE "
            "SET agent = excluded.agent, status = excluded.status, phase = excluded.phase, "
            "waiting_for = excluded.waiting_for, updated_at = excluded.updated_at, "
            "seq = excluded.seq, stop_requested = excluded.stop_requested, "
            "reason = excluded.reason, failures = excluded.failures, retry_at = excluded.retry_at",
            (
                record.run_id,
                record.agent,
                record.status.value,
                record.phase,
                record.waiting_for,
                self._stamp(record.updated_at),
                record.seq,
                int(record.stop_requested),
                record.reason,
                record.failures,
                None if record.retry_at is None else _stamp(record.retry_at),
            ),
        )
        if head is not None:
            self._put_marker(record, head)
        self._written[record.run_id] = record

    def _put_marker(self, saved: RunRecord, head: bytes) -> int:
        """Insert the run's end marker after checkpoint ``saved.seq`` (the one before it was
        removed by ``_put_row``); the rows inserted: 0 when the run has no row.

        The head as a bytearray: sqlite3 binds bytes (and None) through its adapters, about
        3,500 instructions more than a bytearray, which it binds as it is.
        """
        inserted = self._cursor.execute(
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at, head) "
            "SELECT (number << 32) + ?, number, run_id, ?, 'delta', ?, x'', ?, ? "
            "FROM runs WHERE run_id = ?",
            (
                saved.seq + 1,
                saved.seq + 1,
                saved.phase,
                self._stamp(saved.updated_at),
                bytearray(head),
                saved.run_id,
            ),
        )
        return inserted.rowcount

    def _put_saved(self, before: RunRecord | None, saved: RunRecord, head: bytes) -> None:
        # A run's ordinary save changes only its phase, moment, seq and head: its end
        # marker holds them, and its row is left as it is (see _CHECKPOINTS_COLUMNS).
        if before is None or not _same_but_saved(before, saved):
            self._put_record(saved, head)
            return
        if self._put_marker(saved, head) != 1:  # not found after all: as a new run's
            self._put_record(saved, head)
            return
        self._written[saved.run_id] = saved

    def _save(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        agent: str,
        status: RunStatus,
        phase: str,
        waiting_for: str,
        change: _Change | None,
        now: datetime | None = None,
    ) -> RunRecord:
        record = self._written.get(run_id)
        if record is not None and now is None:
            saved = self._save_next(
                run_id, seq, document, agent, status, phase, waiting_for, change, record
            )
            if isinstance(saved, RunRecord):
                return saved
            now = saved  # refused by the file: the plain path saves at the same moment
        return super()._save(run_id, seq, document, agent, status, phase, waiting_for, change, now)

    def _save_next(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        agent: str,
        status: RunStatus,
        phase: str,
        waiting_for: str,
        change: _Change | None,
        record: RunRecord,
    ) -> RunRecord | datetime | None:
        """The run's next delta saved in one statement (``_SAVE_NEXT``), when the row this
        connection wrote last is one whose save changes only its phase, time, seq and head;
        ``None`` when it is not, and the moment it read from the clock when the file's row
        is not that row any more (nothing is written then): the plain path saves it.

        What the plain path writes and returns (tests/test_save_fast.py), without its
        transaction's five other statements (``BEGIN IMMEDIATE``, ``PRAGMA data_version``,
        the marker's ``DELETE`` and the next one's ``INSERT``, ``COMMIT``): the marker
        turned into the checkpoint in place. One statement is one transaction of its own,
        which takes the write lock as it starts, so a concurrent writer waits or is refused
        as before, and it is durable when it returns as the commit was.
        """
        kept = vars(record)
        if (
            status is RunStatus.FAILED_RESUMABLE
            or kept["decision_pending"]
            or kept["reason"]
            or kept["failures"]
            or kept["retry_at"] is not None
            or kept["agent"] != agent
            or kept["waiting_for"] != waiting_for
            or (kept["stop_requested"] and status in _SETTLED)
            or self._cursor.connection.in_transaction
        ):
            return None
        chain = self._chain
        known = None if change is None else chain.recent.get(run_id)
        number = self._numbers.get(run_id)
        if known is None or number is None:
            return None
        previous = known.head
        if chain.sealer is not None or len(previous) != _DIGEST:
            next_delta = self._next_delta(run_id, seq, document, record, status, change)
            if next_delta is None:
                return None
            blob, last = next_delta
            row = bytearray(blob)  # bound as it is (see _put_saved)
        else:
            # _next_delta's steps without a sealer, in place (its frame, _link's, a second
            # look-up of the run, the blob's bytes made once, as the bytearray bound): the
            # same blob, head and memory (tests/test_save_fast5.py).
            assert change is not None  # known is None without a change
            since = known.since
            if (
                change.base is not known.document
                or known.seq != record.seq
                or seq != known.seq + 1
                or status is not record.status
                or (seq - since.seq >= chain.snapshot_every and since.deltas >= since.size)
            ):
                return None
            plain = dumps_bytes({"kind": "delta", "ops": change.ops}, finite=change.finite)
            digest = _sha256(plain).digest()
            # _link(run_id, seq, False, previous, digest) (the head is a link alone here),
            # its bytes joined once.
            link = (_DOMAIN, run_id.encode(), b"\0", seq.to_bytes(8, "big"), b"d", previous, digest)
            head = _sha256(b"".join(link)).digest()
            row = bytearray(digest)
            row += plain
            since = _new_tuple(_Since, (since.seq, since.size, since.deltas + len(row)))
            last = _new_tuple(_Last, (seq, document, None, known.texts, since, head))
        # chain.now(), in place for the system clock (aware and in UTC already).
        now = datetime.now(UTC) if chain.clock is _system_clock else chain.now()
        # What the plain path's row is then (see _Store._save), in its order.
        values = {
            "run_id": run_id,
            "agent": agent,
            "status": status,
            "phase": phase,
            "waiting_for": waiting_for,
            "updated_at": now,
            "seq": seq,
            "stop_requested": kept["stop_requested"],
            "decision_pending": False,
            "reason": "",
            "failures": 0,
            "retry_at": None,
        }
        saved = _trusted(RunRecord, values, _SAVED_SET.copy())
        try:
            self._cursor.execute(
                _SAVE_NEXT,
                (
                    run_id,
                    seq,
                    phase,
                    row,  # bytearrays: bound as they are (see _put_saved)
                    _stamp(now),  # one stamp of this moment: _stamp's cache is not needed
                    bytearray(last.head),
                    bytearray(previous),
                    status._value_,  # the member's str (``value`` is a Python descriptor)
                    waiting_for,
                    agent,
                    int(kept["stop_requested"]),
                    number,
                ),
            )
        except sqlite3.IntegrityError:  # another row: it is read again
            self._written.pop(run_id, None)
            return now
        self._written[run_id] = saved
        # chain.remember(run_id, last) and self._committed(...), without their frames.
        chain.loaded.pop(run_id, None)
        recent = chain.recent
        recent[run_id] = last
        recent.move_to_end(run_id)
        while len(recent) > _RECENT_RUNS:
            recent.popitem(last=False)
        self._wal_pages += 3 + (len(row) >> 12)
        if self._wal.finished:
            self._wal.catch_up(self._cursor.connection)
        elif self._wal_pages >= _WAL_PAGES:
            self._wal_pages = 0
            self._wal.start()
        return saved

    def _get_head(self, run_id: str) -> bytes | None:
        # The marker's alone (see _CHECKPOINTS_COLUMNS): a run without one has no head.
        row = self._db.execute(
            f"SELECT m.head FROM {_RUN_ROWS} WHERE runs.run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def _all_rows(self, run_id: str) -> list[_Row]:
        return _all_rows(self._db, run_id)

    def _put_row(self, run_id: str, row: _Row) -> None:
        self._tx_pages += len(row.blob) >> 12
        # The run's end marker goes (at this checkpoint's id, as a rule): the save inserts
        # the next one after the checkpoint (_put_marker). A checkpoint already at the id
        # refuses the insert, as before.
        self._cursor.execute(_MARKER_GONE, (run_id,))
        # A new run's first row takes the number its run's row is given next (see
        # _put_record), in the same transaction; the number is kept for the next delta's
        # one statement (_save_next).
        inserted = self._cursor.execute(
            "INSERT INTO checkpoints (id, number, run_id, seq, kind, phase, blob, at) "
            "SELECT (n << 32) + ?, n, ?, ?, ?, ?, ?, ? FROM (SELECT coalesce("
            "(SELECT number FROM runs WHERE run_id = ?), (SELECT last + 1 FROM run_numbers)) "
            "AS n) RETURNING number",
            (  # plain ? in order (numbered ones with a sequence are deprecated in 3.12)
                row.seq,
                run_id,
                row.seq,
                "full" if row.snapshot else "delta",
                row.phase,
                bytearray(row.blob),  # bound as it is, as the head is (see _put_saved)
                self._stamp(row.at),
                run_id,
            ),
        )
        [(number,)] = inserted.fetchall()  # to its end: the statement is done
        self._numbers[run_id] = number

    def _chain_rows(self, run_id: str) -> list[_Row]:
        rows = self._db.execute(
            # One range of rowids, from the run's last snapshot (or its first row) on.
            "SELECT seq, kind, phase, blob FROM checkpoints WHERE id BETWEEN coalesce("
            f"(SELECT max(id) FROM checkpoints WHERE {_RANGE} AND kind = 'full'), "
            "(SELECT number << 32 FROM runs WHERE run_id = :run_id)) "
            "AND (SELECT (number << 32) + 4294967295 FROM runs WHERE run_id = :run_id) "
            "AND head IS NULL ORDER BY id",
            {"run_id": run_id},
        ).fetchall()
        # Each made as _Row's own __new__ makes it (its slots, then the default), without
        # its frame: a load reads every row from its last snapshot on.
        return [
            _new_tuple(_Row, (seq, kind == "full", phase, bytes(blob), _EPOCH))
            for seq, kind, phase, blob in rows
        ]

    def _rows(self, run_id: str) -> list[CheckpointEntry]:
        rows = self._db.execute(
            f"SELECT seq, phase, kind, length(blob), at FROM checkpoints WHERE {_RANGE} "
            "AND head IS NULL ORDER BY id",
            {"run_id": run_id},
        ).fetchall()
        return [
            _entry(seq, phase, kind == "full", size, datetime.fromisoformat(at))
            for seq, phase, kind, size, at in rows
        ]

    def _select(self, statuses: tuple[RunStatus, ...] | None, agent: str | None) -> list[RunRecord]:
        where: list[str] = []
        values: list[str] = []
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' * len(statuses))})" if statuses else "0")
            values.extend(status.value for status in statuses)
        if agent is not None:
            where.append("agent = ?")
            values.append(agent)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(
            f"SELECT {_RECORD_COLUMNS} FROM {_RUN_ROWS}{clause} ORDER BY moment, runs.run_id",
            values,
        ).fetchall()
        return [_record_of(row) for row in rows]

    def _delete_ended(self, before: datetime) -> list[str]:
        removed = [
            run_id
            for (run_id,) in self._db.execute(_ENDED_BEFORE, (_stamp(before), _stamp(before)))
        ]
        self._db.executemany(
            f"DELETE FROM checkpoints WHERE {_RANGE}", [{"run_id": r} for r in removed]
        )
        self._db.executemany("DELETE FROM effects WHERE run_id = ?", [(r,) for r in removed])
        self._db.executemany("DELETE FROM claims WHERE run_id = ?", [(r,) for r in removed])
        self._db.executemany("DELETE FROM leases WHERE run_id = ?", [(r,) for r in removed])
        self._db.executemany("DELETE FROM runs WHERE run_id = ?", [(r,) for r in removed])
        self._written.clear()
        return removed

    def _get_claim(self, run_id: str) -> tuple[str, datetime] | None:
        row = self._db.execute(
            "SELECT owner, until FROM claims WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else (row[0], datetime.fromisoformat(row[1]))

    def _put_claim(self, run_id: str, owner: str, until: datetime) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO claims (run_id, owner, until) VALUES (?, ?, ?)",
            (run_id, owner, _stamp(until)),
        )

    def _delete_claim(self, run_id: str) -> None:
        self._db.execute("DELETE FROM claims WHERE run_id = ?", (run_id,))

    def _get_effect(self, key: str) -> _EffectRow | None:
        row = self._db.execute(
            f"SELECT {_EFFECT_COLUMNS} FROM effects WHERE key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        key, run_id, tool, args_hash, status, result, updated_at = row
        blob = None if result is None else bytes(result)
        moment = datetime.fromisoformat(updated_at)
        return _EffectRow(key, run_id, tool, args_hash, status, blob, moment)

    def _put_effect(self, row: _EffectRow) -> None:
        self._db.execute(
            f"INSERT OR REPLACE INTO effects ({_EFFECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*row[:6], _stamp(row.updated_at)),
        )

    def _delete_effect(self, key: str) -> None:
        self._db.execute("DELETE FROM effects WHERE key = ?", (key,))

    def _get_decision(self, run_id: str) -> bytes | None:
        row = self._db.execute("SELECT decision FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def _put_decision(self, run_id: str, blob: bytes | None) -> None:
        self._db.execute("UPDATE runs SET decision = ? WHERE run_id = ?", (blob, run_id))
        self._written.pop(run_id, None)  # its decision_pending is read back when needed

    def _runnable(
        self, agents: tuple[str, ...] | None, now: datetime, limit: int
    ) -> list[RunRecord]:
        stamp = _stamp(now)
        values: list[Any] = [stamp, stamp]
        mine = ""
        if agents is not None:
            mine = f" AND agent IN ({', '.join('?' * len(agents))})" if agents else " AND 0"
            values.extend(agents)
        values.append(limit)
        rows = self._db.execute(
            f"SELECT {_RECORD_COLUMNS} FROM {_RUN_ROWS} WHERE (status = 'running' OR (status = "
            "'failed_resumable' AND (retry_at IS NULL OR retry_at <= ?)) OR (status = "
            "'interrupted' AND decision IS NOT NULL)) AND reason = '' AND NOT EXISTS (SELECT 1 "
            f"FROM claims WHERE claims.run_id = runs.run_id AND claims.until > ?){mine} "
            "ORDER BY moment, runs.run_id LIMIT ?",
            values,
        ).fetchall()
        return [_record_of(row) for row in rows]

    def _open_lease(self, lease: LeaseRecord) -> None:
        self._db.execute(
            f"INSERT INTO leases ({_LEASE_COLUMNS}) VALUES (?, ?, ?, ?, NULL)",
            (lease.run_id, lease.owner, _stamp(lease.claimed_at), _stamp(lease.until)),
        )

    def _extend_lease(self, run_id: str, owner: str, until: datetime) -> bool:
        changed = self._db.execute(
            "UPDATE leases SET until = ? WHERE id = (SELECT max(id) FROM leases WHERE "
            "run_id = ? AND owner = ? AND released_at IS NULL)",
            (_stamp(until), run_id, owner),
        )
        return changed.rowcount > 0

    def _close_lease(self, run_id: str, owner: str, at: datetime) -> None:
        self._db.execute(
            "UPDATE leases SET released_at = ? WHERE run_id = ? AND owner = ? "
            "AND released_at IS NULL",
            (_stamp(at), run_id, owner),
        )

    def _lease_rows(self, run_id: str | None) -> list[LeaseRecord]:
        if run_id is None:
            rows = self._db.execute(
                f"SELECT {_LEASE_COLUMNS} FROM leases ORDER BY claimed_at, id"
            ).fetchall()
        else:
            rows = self._db.execute(
                f"SELECT {_LEASE_COLUMNS} FROM leases WHERE run_id = ? ORDER BY claimed_at, id",
                (run_id,),
            ).fetchall()
        return [_lease_of(row) for row in rows]


if TYPE_CHECKING:  # the store satisfies the protocol, as mypy checks here
    _sqlite: type[Checkpointer] = SQLiteCheckpointer
