"""Checkpoint stores: one checkpoint per transition, and a registry row per run.

A checkpoint is an opaque JSON-able document (``dict[str, Any]``) saved under the run
id and its ``seq``, the transition number: 0, 1, 2, ... with no gap. The store never
looks inside the document beyond its shape: a snapshot holds it whole, and a delta
holds only what changed since the checkpoint before::

    {"kind": "full",  "document": {...}}
    {"kind": "delta", "ops": [["set", path, value], ["append", path, items],
                              ["drop", path], ["order", path, keys]]}

A path leads through objects up to three levels deep (``["fields", "loop",
"actions"]``). A list is diffed item by item: one that grew (a transcript) is stored
as the items appended, one whose last item changed (an action settled) as a splice,
a sliding window as a shift, so the bytes per transition stay flat as a run grows.

A full snapshot is written at seq 0, then at the first checkpoint at least
``snapshot_every`` (default 50) after the last snapshot at which the deltas stored since
add up to that snapshot's size. A state grows with its run, so a fixed interval would
make snapshots cost more per transition the longer the run; by this rule they never cost
more bytes than the deltas between them, so the bytes per transition stay flat, and a
load reads one snapshot and at most about its size again in deltas. A store that did
not write the run's last checkpoint (another process, a restart) reads the sizes from
the stored chain, so every process applies the same rule to the same rows.

The runner's saver knows what changed (it dumps each phase from the one before, see
``PhaseDumper``), so it hands the store the delta's ops with the document (``ops=``,
``base=``). The store uses them, without looking at the document, only when ``base`` is
the very document it saved as the run's latest checkpoint; otherwise (another process
saved since, the store forgot the run, or it never saw it) it diffs as above. Such
documents never change once given, so they are written with the C JSON writer, and a
snapshot writes again only the list items no earlier snapshot of the run wrote.

Each stored blob is ``sha256(sealed) + sealed``, where ``sealed`` is the encoded JSON
passed through the optional :class:`Sealer` (encryption at rest) with the
associated data ``b"<run_id>:<seq>"``. The checksum catches a truncated or
overwritten blob even without encryption; the sealer's own tag catches tampering.

The registry (one row per run: agent, status, phase, what it waits for, when it was
last updated, its last seq) is kept beside the checkpoints and answers "which runs
need attention?" without decoding any checkpoint. Status changes go through
:class:`RunLifecycle`.

The side-effect ledger (one :class:`EffectRecord` per idempotency key) is kept
beside them too: a write tool's intent is recorded before the call and its result
after, so a replay never runs a committed effect twice. A result is stored as a
blob like a checkpoint (checksum, sealer, associated data
``b"effect:<run_id>:<key>"``); SQLite writes the ledger with ``synchronous=FULL``.

Many workers share one store through leases: ``claim_next`` hands each runnable run
to one worker at a time (a run whose worker died becomes runnable when its lease
lapses), ``renew`` keeps a lease, ``release`` gives it back, and every lease is kept
in a history (:class:`LeaseRecord`). A person's decision about a run waiting for an
approval is stored with the run (``submit_decision``, sealed like a checkpoint with
the associated data ``b"decision:<run_id>"``) and makes it runnable; a stop request
(``request_stop``) is a flag on the run's row that the worker driving it reads in the
row its next ``save`` returns.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol, TypeVar

import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from .._approval import _submitted, waits_for_approval
from .._errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointOrderError,
    ConfigError,
    DecisionRefusedError,
    UnknownRunError,
)
from .._fast._pydantic import _trusted
from .._json import JSON, Texts, dumps, dumps_fast, dumps_reusing, fingerprint, loads
from .._ledger import EffectLedger, EffectRecord
from ._lifecycle import ATTENTION, ENDINGS, RunLifecycle, RunStatus

__all__ = [
    "DEFAULT_RETENTION",
    "CheckpointEntry",
    "Checkpointer",
    "Decisions",
    "Leases",
    "Registry",
    "RunStore",
    "EffectRecord",
    "LeaseRecord",
    "MemoryCheckpointer",
    "RunRecord",
    "SQLiteCheckpointer",
    "Sealer",
]

Document = dict[str, Any]
DEFAULT_RETENTION: Final = timedelta(days=30)
_DIGEST: Final = 32  # bytes of SHA-256 in front of every stored blob
_RECENT_RUNS: Final = 256  # runs whose last document's fingerprints are kept for diffing
_BUSY_MS: Final = 5000  # how long SQLite waits for another connection's write lock
# Pages written to SQLite's WAL after which it is copied back into the database file (by
# a thread of the checkpointer's own, not by the commit that crossed the mark): SQLite's
# own default for its automatic checkpoint.
_WAL_PAGES: Final = 1000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)  # the time of a checkpoint saved with none
# A stop request and a pending decision end with the run's part in them.
_SETTLED: Final = frozenset({RunStatus.CANCELLED, RunStatus.COMPLETED, RunStatus.ABORTED})
# The fields of the row a save writes that it sets (``decision_pending`` is its default).
_SAVED_FIELDS: Final = (
    "run_id",
    "agent",
    "status",
    "phase",
    "waiting_for",
    "updated_at",
    "seq",
    "stop_requested",
)
_T = TypeVar("_T")


class RunRecord(BaseModel, defer_build=True):
    """One run's row in the registry: what a person needs to find and triage it.

    ``stop_requested``: someone asked the worker driving the run to stop it (it stops
    at its next checkpoint). ``decision_pending``: a person's decision waits for a
    worker to resume the run with it.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    agent: str
    status: RunStatus
    phase: str
    waiting_for: str
    updated_at: datetime
    seq: int
    stop_requested: bool = False
    decision_pending: bool = False


class CheckpointEntry(BaseModel, defer_build=True):
    """One stored checkpoint, read without decoding it: its phase, form, size and time.

    ``at`` is when it was saved, by the store's clock (UTC).
    """

    model_config = ConfigDict(frozen=True)

    seq: int
    phase: str
    snapshot: bool
    size: int
    at: datetime


class LeaseRecord(BaseModel, defer_build=True):
    """One lease in the history: who held a run, from when, until when.

    ``until`` is where the lease lapses (moved on by each renewal); ``released_at`` is
    when the holder gave the run back, or ``None`` if it never did (it still holds
    it, or the lease lapsed at ``until``: its holder died or lost it).
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    owner: str
    claimed_at: datetime
    until: datetime
    released_at: datetime | None = None

    @property
    def ended_at(self) -> datetime:
        """When the holder stopped holding the run, as far as the store knows."""
        if self.released_at is None:
            return self.until
        return min(self.released_at, self.until)


class Sealer(Protocol):
    """Encryption at rest: ``open(seal(p, aad=a), aad=a) == p``; any other ``aad`` fails.

    ``CheckpointCipher`` is one. ``open`` raises a ``CheckpointError`` for a blob it
    refuses; anything else it raises is reported as a corrupt checkpoint.
    """

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes: ...

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes: ...


class RunStore(Protocol):
    """Where a run's checkpoints are kept: one per transition, in order."""

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
        """Store checkpoint ``seq`` (the run's next: 0 for a new run) and update its row.

        ``ops``, with ``base``, is optional help a store may ignore: the delta ops that
        turn ``base`` (the document this caller saved as checkpoint ``seq - 1``) into
        ``document``. A caller that gives them leaves both documents unchanged after.
        """
        ...

    async def load(self, run_id: str) -> tuple[int, Document]:
        """The run's latest checkpoint: ``(seq, document)``."""
        ...

    async def history(self, run_id: str) -> list[CheckpointEntry]:
        """Every stored checkpoint of the run, oldest first, without decoding any."""
        ...


class Registry(Protocol):
    """One row per run: its status, phase and what it waits for, without decoding a checkpoint."""

    async def record(self, run_id: str) -> RunRecord:
        """The run's registry row."""
        ...

    async def set_status(
        self, run_id: str, status: RunStatus | str, *, waiting_for: str = ""
    ) -> RunRecord:
        """Move the run to ``status`` if its lifecycle allows it; return the new row."""
        ...

    async def registry(
        self,
        *,
        status: RunStatus | str | Collection[RunStatus | str] | None = None,
        agent: str | None = None,
    ) -> list[RunRecord]:
        """Registry rows, oldest update first, filtered by status and agent."""
        ...

    async def needing_attention(self) -> list[RunRecord]:
        """Runs interrupted, cancelled or failed_resumable, oldest update first."""
        ...

    async def purge(
        self, older_than: timedelta = DEFAULT_RETENTION, *, now: datetime | None = None
    ) -> int:
        """Remove ended runs last updated before ``now - older_than``; return how many."""
        ...


class Leases(Protocol):
    """Who drives a run now: a lease taken, renewed and given back, and every lease kept."""

    async def claim(self, run_id: str, owner: str, *, lease: timedelta = ...) -> bool:
        """Take the run for ``owner`` (one at a time); False when another holds it."""
        ...

    async def release(self, run_id: str, owner: str) -> None:
        """Give the run back, if ``owner`` holds it."""
        ...

    async def claim_next(
        self, owner: str, *, agents: Collection[str] | None = None, lease: timedelta
    ) -> RunRecord | None:
        """Take the oldest runnable run no live lease holds for ``owner``; ``None`` if none."""
        ...

    async def renew(self, run_id: str, owner: str, *, lease: timedelta) -> bool:
        """Extend ``owner``'s live lease to ``lease`` from now; False if it was lost."""
        ...

    async def leases(self, run_id: str | None = None) -> list[LeaseRecord]:
        """The lease history of one run (or of every run), oldest claim first."""
        ...


class Decisions(Protocol):
    """A person's decision about a waiting run, and a stop asked from anywhere."""

    async def submit_decision(self, run_id: str, decision: Mapping[str, Any]) -> RunRecord:
        """Store a person's decision for a run waiting for an approval; it becomes runnable."""
        ...

    async def decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it stays pending."""
        ...

    async def take_decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it is no longer pending."""
        ...

    async def request_stop(self, run_id: str) -> RunRecord:
        """Stop the run: at its next checkpoint if a worker drives it, else at once."""
        ...


class Checkpointer(RunStore, Registry, Leases, Decisions, EffectLedger, Protocol):
    """Where runs are checkpointed: every role a store plays, as the runner needs them all.

    One checkpoint per transition (:class:`RunStore`), one registry row per run
    (:class:`Registry`), leases (:class:`Leases`), decisions and stops
    (:class:`Decisions`), and the side-effect ledger (:class:`EffectLedger`, the part
    the core uses). A consumer that needs fewer roles asks for those (the worker,
    :class:`Leases`).
    """


# --- deltas ------------------------------------------------------------------------------

# What the store remembers of the last document of a run, to diff the next one against:
# per key, the exact JSON fingerprint of the value and, for a list, the fingerprint of
# each item (else None); objects down to _DEPTH levels hold the same one level down.
_Leaf = tuple[str, tuple[str, ...] | None]
_Seen = dict[str, Any]  # key -> _Leaf, or (an object within _DEPTH) key -> _Seen
# Objects are diffed inside down to this depth: the document, its "fields", and the
# objects among them (the governor's "loop"), so that a list deep in the state (the
# loop's actions) changes by the items that changed, not as a whole.
_DEPTH: Final = 3
# A list that keeps its last items but drops a few from the front (a sliding window):
# how many dropped items are looked for.
_SHIFT: Final = 8


def _leaf(value: Any) -> _Leaf:
    """Exact fingerprint: 1, 1.0, True and Decimal("1.00") all differ; written in C.

    A list is fingerprinted item by item, so that a change can be told apart from
    items appended, dropped from the front, or replaced at the end.
    """
    encode = fingerprint
    if isinstance(value, list | tuple):
        items = tuple(encode(item) for item in value)
        return "[" + ",".join(items) + "]", items
    return encode(value), None


def _seen_of(document: Mapping[str, Any], depth: int = 1) -> _Seen:
    return {
        key: _seen_of(value, depth + 1)
        if isinstance(value, dict) and depth < _DEPTH
        else _leaf(value)
        for key, value in document.items()
    }


def _list_op(at: list[str], value: Any, new: tuple[str, ...], old: tuple[str, ...]) -> list[Any]:
    """The smallest op among append, shift (drop from the front, append) and splice
    (keep a prefix, replace the rest) that turns the old list into the new one."""
    kept = 0
    for before, after in zip(old, new, strict=False):
        if before != after:
            break
        kept += 1
    if kept == len(old):
        return ["append", at, list(value[kept:])]
    for dropped in range(1, min(_SHIFT, len(old)) + 1):
        rest = len(old) - dropped
        if rest <= len(new) and old[dropped:] == new[:rest]:
            if rest >= kept:
                return ["shift", at, dropped, list(value[rest:])]
            break
    if kept:
        return ["splice", at, kept, list(value[kept:])]
    return ["set", at, value]


def _diff(
    old: Mapping[str, Any], new: Mapping[str, Any], path: list[str], ops: list[list[Any]]
) -> _Seen:
    """Append to ``ops`` what turns ``old`` into ``new``; return the fingerprints of ``new``."""
    nested = len(path) + 1 < _DEPTH  # objects down to _DEPTH levels are diffed inside
    seen: _Seen = {}
    for key in old:
        if key not in new:
            ops.append(["drop", [*path, key]])
    for key, value in new.items():
        if not isinstance(key, str):
            raise TypeError(f"JSON object keys must be strings, got {key!r}")
        at = [*path, key]
        before = old.get(key)
        if nested and isinstance(value, dict):
            if isinstance(before, dict):
                seen[key] = _diff(before, value, at, ops)
            else:
                ops.append(["set", at, value])
                seen[key] = _seen_of(value, len(at) + 1)
            continue
        leaf = _leaf(value)
        seen[key] = leaf
        if isinstance(before, tuple) and before[0] == leaf[0]:
            continue
        if isinstance(before, tuple) and before[1] is not None and leaf[1] is not None:
            ops.append(_list_op(at, value, leaf[1], before[1]))
        else:
            ops.append(["set", at, value])
    expected = [key for key in old if key in new] + [key for key in new if key not in old]
    if list(new) != expected:
        ops.append(["order", path, list(new)])
    return seen


def _apply(document: Document, ops: Any) -> None:
    """Apply a delta's ops in place; a malformed op raises (the caller reports corruption)."""
    if not isinstance(ops, list):
        raise TypeError("ops is not a list")
    for op in ops:
        name, path = op[0], op[1]
        target: Any = document
        if name == "order":
            for key in path:
                target = target[key]
            if set(op[2]) != set(target):
                raise ValueError("the order names other keys than the object has")
            items = {key: target[key] for key in op[2]}
            target.clear()
            target.update(items)
            continue
        *parents, last = path
        for key in parents:
            target = target[key]
        if not isinstance(target, dict) or not isinstance(last, str):
            raise TypeError(f"path {path!r} does not lead into an object")
        if name == "set":
            target[last] = op[2]
        elif name == "append":
            target[last].extend(op[2])
        elif name in ("shift", "splice"):
            items, count, added = target[last], op[2], op[3]
            if not isinstance(items, list) or not isinstance(count, int):
                raise TypeError(f"{name} at {path!r} needs a list and a count")
            if not 0 <= count <= len(items):
                raise ValueError(f"{name} at {path!r}: {count} is outside the list")
            if name == "shift":
                del items[:count]
            else:
                del items[count:]
            items.extend(added)
        elif name == "drop":
            del target[last]
        else:
            raise ValueError(f"unknown op {name!r}")


# --- the store -----------------------------------------------------------------------------


class _Change(NamedTuple):
    """A caller's delta: the ops that turn ``base`` into the document it saves."""

    base: Mapping[str, Any] | None
    ops: list[list[Any]]


class _Since(NamedTuple):
    """A run's last snapshot (its seq and bytes) and the bytes of the deltas stored after it."""

    seq: int
    size: int
    deltas: int

    def after(self, seq: int, snapshot: bool, size: int) -> _Since:
        """What it is once checkpoint ``seq`` (``size`` bytes) is stored."""
        return _Since(seq, size, 0) if snapshot else self._replace(deltas=self.deltas + size)


def _since_of(rows: list[_Row]) -> _Since:
    """``_Since`` of a chain as ``_chain`` reads it: the last snapshot, then its deltas."""
    return _Since(rows[0].seq, len(rows[0].blob), sum(len(row.blob) for row in rows[1:]))


class _Last(NamedTuple):
    """What a store remembers of a run's latest checkpoint that it saved itself.

    ``seen`` (the fingerprints to diff the next document against) is ``None`` when the
    document came with a caller's ops: it is then taken from ``document`` if needed.
    """

    seq: int
    document: Mapping[str, Any]
    seen: _Seen | None
    texts: Texts  # the JSON text of list items a snapshot wrote, to write the next one
    since: _Since  # the last snapshot and the deltas after it, for the next snapshot rule


class _Row(NamedTuple):
    seq: int
    snapshot: bool
    phase: str
    blob: bytes
    at: datetime = _EPOCH  # when it was saved


class _EffectRow(NamedTuple):
    key: str
    run_id: str
    tool: str
    args_hash: str
    status: Literal["intent", "committed"]
    blob: bytes | None  # the sealed result; None while only the intent is recorded
    updated_at: datetime


def _utc(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigError(
            (
                f"{what} is a naive datetime ({moment.isoformat()}); use timezone-aware "
                "datetimes, such as datetime.now(UTC)",
            )
        )
    return moment.astimezone(UTC)


def _statuses(
    status: RunStatus | str | Collection[RunStatus | str] | None,
) -> tuple[RunStatus, ...] | None:
    if status is None:
        return None
    if isinstance(status, str):
        return (RunStatus(status),)
    return tuple(RunStatus(item) for item in status)


def _system_clock() -> datetime:
    return datetime.now(UTC)


def _runnable(record: RunRecord) -> bool:
    """Whether a worker may take the run (when no live lease holds it)."""
    return record.status in (RunStatus.RUNNING, RunStatus.FAILED_RESUMABLE) or (
        record.status is RunStatus.INTERRUPTED and record.decision_pending
    )


class _Store:
    """What both stores share: deltas, blobs, lifecycle checks. Subclasses keep the rows.

    Every operation is one synchronous function run inside ``_transaction``; the
    subclass decides how it is run (inline, or in a worker thread under a lock).
    """

    _where: str

    def __init__(
        self,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
    ) -> None:
        if snapshot_every < 1:
            raise ConfigError((f"snapshot_every must be a positive int, got {snapshot_every!r}",))
        self.snapshot_every = snapshot_every
        self._sealer = sealer
        self._clock = clock
        self._recent: OrderedDict[str, _Last] = OrderedDict()

    # -- what subclasses provide (synchronous, inside _transaction) --

    def _transaction(self, *, write: bool, durable: bool = False) -> AbstractContextManager[object]:
        raise NotImplementedError

    async def _call(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        raise NotImplementedError

    async def _call_save(self, run_id: str, function: Callable[..., _T], *args: Any) -> _T:
        """Run a save (a short write): by default as every other operation."""
        return await self._call(run_id, function, *args)

    def _get_record(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError

    def _get_record_to_save(self, run_id: str) -> RunRecord | None:
        """The run's row, read to save its next checkpoint (a store may know it already)."""
        return self._get_record(run_id)

    def _put_record(self, record: RunRecord) -> None:
        raise NotImplementedError

    def _put_row(self, run_id: str, row: _Row) -> None:
        raise NotImplementedError

    def _chain(self, run_id: str) -> list[_Row]:
        """The run's last full snapshot and every checkpoint after it, in seq order."""
        raise NotImplementedError

    def _rows(self, run_id: str) -> list[CheckpointEntry]:
        raise NotImplementedError

    def _select(self, statuses: tuple[RunStatus, ...] | None, agent: str | None) -> list[RunRecord]:
        raise NotImplementedError

    def _delete_ended(self, before: datetime) -> list[str]:
        raise NotImplementedError

    def _get_claim(self, run_id: str) -> tuple[str, datetime] | None:
        raise NotImplementedError

    def _put_claim(self, run_id: str, owner: str, until: datetime) -> None:
        raise NotImplementedError

    def _delete_claim(self, run_id: str) -> None:
        raise NotImplementedError

    def _get_effect(self, key: str) -> _EffectRow | None:
        raise NotImplementedError

    def _put_effect(self, row: _EffectRow) -> None:
        raise NotImplementedError

    def _delete_effect(self, key: str) -> None:
        raise NotImplementedError

    def _get_decision(self, run_id: str) -> bytes | None:
        raise NotImplementedError

    def _put_decision(self, run_id: str, blob: bytes | None) -> None:
        """Store the sealed decision of a run that has a row, or clear it (``None``)."""
        raise NotImplementedError

    def _runnable(
        self, agents: tuple[str, ...] | None, now: datetime, limit: int
    ) -> list[RunRecord]:
        """Up to ``limit`` runs no live claim holds that are running, failed_resumable, or
        interrupted with a decision, of ``agents``; oldest update first (then run id)."""
        raise NotImplementedError

    def _open_lease(self, lease: LeaseRecord) -> None:
        raise NotImplementedError

    def _extend_lease(self, run_id: str, owner: str, until: datetime) -> bool:
        """Move ``until`` of ``owner``'s latest unreleased lease of the run; False if none."""
        raise NotImplementedError

    def _close_lease(self, run_id: str, owner: str, at: datetime) -> None:
        """Set ``released_at`` of ``owner``'s unreleased leases of the run."""
        raise NotImplementedError

    def _lease_rows(self, run_id: str | None) -> list[LeaseRecord]:
        raise NotImplementedError

    # -- the public operations --

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
        saved. A run cancelled since its last save stays ``cancelled`` (the checkpoint
        is saved) unless ``status`` is ``completed``: the runner driving it sees that in
        the row returned and stops. A pending decision is cleared; a stop request is
        kept until the run is cancelled, completed or aborted.

        ``ops`` (the delta from ``base``, see :class:`Checkpointer`) is used as the
        checkpoint's delta when ``base`` is the very document this store saved as the
        run's latest checkpoint; else the store diffs ``document`` itself.
        """
        target = RunStatus(status)
        change = None if ops is None else _Change(base, ops)
        return await self._call_save(
            run_id, self._save, run_id, seq, document, agent, target, phase, waiting_for, change
        )

    async def load(self, run_id: str) -> tuple[int, Document]:
        """The run's latest checkpoint as ``(seq, document)``: one snapshot plus its deltas.

        Raises ``UnknownRunError`` for a run never saved, and ``CheckpointCorruptError``
        (naming the run) for a blob truncated or overwritten or a checkpoint missing.
        """
        return await self._call(run_id, self._load, run_id)

    async def history(self, run_id: str) -> list[CheckpointEntry]:
        """Every stored checkpoint of the run, oldest first, without decoding any."""
        return await self._call(run_id, self._history, run_id)

    async def record(self, run_id: str) -> RunRecord:
        """The run's registry row; ``UnknownRunError`` if it has none."""
        return await self._call(run_id, self._record, run_id)

    async def set_status(
        self, run_id: str, status: RunStatus | str, *, waiting_for: str = ""
    ) -> RunRecord:
        """Move the run to ``status`` through its lifecycle; set what it waits for.

        An illegal change raises ``IllegalStatusChangeError`` and changes nothing.
        Setting the status it already has only updates ``waiting_for`` and the time.
        """
        target = RunStatus(status)
        return await self._call(run_id, self._set_status, run_id, target, waiting_for)

    async def registry(
        self,
        *,
        status: RunStatus | str | Collection[RunStatus | str] | None = None,
        agent: str | None = None,
    ) -> list[RunRecord]:
        """Registry rows, oldest update first; ``status`` is one status or several."""
        return await self._call(None, self._read_select, _statuses(status), agent)

    async def needing_attention(self) -> list[RunRecord]:
        """Runs interrupted, cancelled or failed_resumable, oldest update first."""
        return await self._call(None, self._read_select, tuple(sorted(ATTENTION)), None)

    async def claim(
        self, run_id: str, owner: str, *, lease: timedelta = timedelta(minutes=10)
    ) -> bool:
        """Take the run for ``owner``: at most one holder at a time, across processes.

        Two processes resuming one run at once: exactly one gets it. A claim lapses
        after ``lease`` (its holder may have died), so a run is never locked for good.
        """
        return await self._call(run_id, self._claim, run_id, owner, lease)

    async def release(self, run_id: str, owner: str) -> None:
        """Give the run back, if ``owner`` holds it."""
        await self._call(run_id, self._release, run_id, owner)

    async def claim_next(
        self, owner: str, *, agents: Collection[str] | None = None, lease: timedelta
    ) -> RunRecord | None:
        """Take the oldest runnable run for ``owner``, atomically; ``None`` when there is none.

        Runnable: no live lease holds it, and it is ``running`` (its worker died, or it
        was submitted and never started), ``failed_resumable``, or ``interrupted`` with
        a person's decision pending. A run waiting for a person without a decision, and
        a cancelled or ended run, is never taken. A running run with a stop request and
        no live lease is marked cancelled instead. ``agents`` limits the runs to those
        agents' names. Returns the run's row (its status unchanged), held for ``lease``.
        """
        chosen = None if agents is None else tuple(sorted(set(agents)))
        if lease <= timedelta(0):
            raise ConfigError((f"lease must be a positive duration, got {lease!r}",))
        return await self._call(None, self._claim_next, owner, chosen, lease)

    async def renew(self, run_id: str, owner: str, *, lease: timedelta) -> bool:
        """Extend ``owner``'s lease of the run to ``lease`` from now.

        False (and nothing changes) when ``owner`` no longer holds a live lease: it
        lapsed, or the run was given back or taken by another worker. The holder must
        then stop driving the run.
        """
        return await self._call(run_id, self._renew, run_id, owner, lease)

    async def leases(self, run_id: str | None = None) -> list[LeaseRecord]:
        """Every lease of the run (of every run when ``run_id`` is ``None``), oldest first."""
        return await self._call(run_id, self._read_leases, run_id)

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
        return await self._call(run_id, self._submit_decision, run_id, document)

    async def decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it stays pending."""
        return await self._call(run_id, self._decision, run_id, False)

    async def take_decision(self, run_id: str) -> Document | None:
        """The run's pending decision document, or ``None``; it is cleared."""
        return await self._call(run_id, self._decision, run_id, True)

    async def request_stop(self, run_id: str) -> RunRecord:
        """Ask for the run to stop; returns its row.

        A run a worker drives (``running`` under a live lease) gets ``stop_requested``:
        the worker stops it at its next checkpoint and marks it ``cancelled``. A run
        nobody drives (running with no live lease, interrupted, failed_resumable) is
        marked ``cancelled`` at once, and any pending decision is dropped. A cancelled
        run is returned as it is; a completed or aborted one raises
        ``IllegalStatusChangeError``.
        """
        return await self._call(run_id, self._request_stop, run_id)

    def _claim(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._transaction(write=True):
            now = self._now()
            held = self._get_claim(run_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._hold(run_id, owner, now, now + lease, again=held is not None and held[0] == owner)
            return True

    def _hold(
        self, run_id: str, owner: str, now: datetime, until: datetime, *, again: bool
    ) -> None:
        self._put_claim(run_id, owner, until)
        if not (again and self._extend_lease(run_id, owner, until)):
            self._open_lease(LeaseRecord(run_id=run_id, owner=owner, claimed_at=now, until=until))

    def _release(self, run_id: str, owner: str) -> None:
        with self._transaction(write=True):
            held = self._get_claim(run_id)
            if held is not None and held[0] == owner:
                self._delete_claim(run_id)
                self._close_lease(run_id, owner, self._now())

    def _claim_next(
        self, owner: str, agents: tuple[str, ...] | None, lease: timedelta
    ) -> RunRecord | None:
        batch = 16
        with self._transaction(write=True):
            now = self._now()
            while True:
                found = self._runnable(agents, now, batch)
                for record in found:
                    if record.status is RunStatus.RUNNING and record.stop_requested:
                        self._move(record, RunStatus.CANCELLED, "", now)
                        continue
                    self._hold(record.run_id, owner, now, now + lease, again=False)
                    return record
                if len(found) < batch:
                    return None

    def _renew(self, run_id: str, owner: str, lease: timedelta) -> bool:
        with self._transaction(write=True):
            now = self._now()
            held = self._get_claim(run_id)
            if held is None or held[0] != owner or held[1] <= now:
                return False
            self._hold(run_id, owner, now, now + lease, again=True)
            return True

    def _read_leases(self, run_id: str | None) -> list[LeaseRecord]:
        with self._transaction(write=False):
            return self._lease_rows(run_id)

    def _decided(self, record: RunRecord, document: Document) -> tuple[bytes, RunRecord]:
        """The sealed decision and the run's new row, or DecisionRefusedError (both stores)."""
        run_id = record.run_id
        waits = (
            record.status is RunStatus.INTERRUPTED
            and record.phase == "AwaitApproval"
            and waits_for_approval(record.waiting_for)
        )
        if not waits:
            where = f"{record.status.value} at {record.phase}"
            if record.waiting_for:
                where += f", waiting for {record.waiting_for}"
            raise DecisionRefusedError(
                f"it is not waiting for an approval (it is {where}). Approve or deny "
                "only a run that is interrupted waiting for an approval; list those "
                "with the registry (status interrupted).",
                run_id=run_id,
            )
        if record.decision_pending:
            raise DecisionRefusedError(
                "it already has a decision waiting for a worker to resume it with; "
                "nothing was changed. One decision per approval: wait for the run to "
                "go on, or stop it.",
                run_id=run_id,
            )
        blob = self._seal({"kind": "decision", "decision": document}, _decision_aad(run_id))
        changed = record.model_copy(update={"decision_pending": True, "updated_at": self._now()})
        return blob, changed

    def _submit_decision(self, run_id: str, document: Document) -> RunRecord:
        with self._transaction(write=True):
            record = self._known(run_id)
            blob, changed = self._decided(record, document)
            self._put_record(changed)
            self._put_decision(run_id, blob)
            return changed

    def _decision(self, run_id: str, take: bool) -> Document | None:
        with self._transaction(write=take):
            record = self._known(run_id)
            blob = self._get_decision(run_id)
            if blob is None:
                return None
            document = self._open_decision(run_id, blob)
            if take:
                self._put_record(record.model_copy(update={"decision_pending": False}))
                self._put_decision(run_id, None)
            return document

    def _open_decision(self, run_id: str, blob: bytes) -> Document:
        payload = self._unseal(blob, _decision_aad(run_id), run_id, "its pending decision")
        if not isinstance(payload, dict) or payload.get("kind") != "decision":
            raise self._damaged(run_id, "its pending decision", "is not a decision")
        document = payload.get("decision")
        if not isinstance(document, dict):
            raise self._damaged(run_id, "its pending decision", "is not a decision")
        return document

    def _request_stop(self, run_id: str) -> RunRecord:
        with self._transaction(write=True):
            record = self._known(run_id)
            now = self._now()
            if record.status is RunStatus.CANCELLED:
                return record
            held = self._get_claim(run_id)
            if record.status is RunStatus.RUNNING and held is not None and held[1] > now:
                changed = record.model_copy(update={"stop_requested": True, "updated_at": now})
                self._put_record(changed)
                return changed
            return self._move(record, RunStatus.CANCELLED, "", now)

    def _move(
        self, record: RunRecord, status: RunStatus, waiting_for: str, now: datetime
    ) -> RunRecord:
        """Change the run's status through its lifecycle (inside a write transaction)."""
        RunLifecycle(record.run_id, record.status).move_to(status)
        update: dict[str, Any] = {"status": status, "waiting_for": waiting_for, "updated_at": now}
        settled = status in _SETTLED
        if settled:
            update.update(stop_requested=False, decision_pending=False)
        changed = record.model_copy(update=update)
        self._put_record(changed)
        if settled and record.decision_pending:
            self._put_decision(record.run_id, None)
        return changed

    async def purge(
        self, older_than: timedelta = DEFAULT_RETENTION, *, now: datetime | None = None
    ) -> int:
        """Remove completed and aborted runs last updated before ``now - older_than``.

        Their checkpoints go with them; runs in any other status are kept however old.
        ``now`` defaults to the store's clock. Returns how many runs were removed.
        """
        moment = _utc(now if now is not None else self._clock(), "now")
        return await self._call(None, self._purge, moment - older_than)

    # -- the side-effect ledger --

    async def record_intent(
        self, key: str, *, run_id: str, tool: str, args_hash: str
    ) -> EffectRecord:
        """Record, durably, that the write call under ``key`` is about to run.

        Idempotent: if ``key`` is already recorded (an intent or a committed effect)
        that record is returned unchanged, so a replay never loses a result.
        """
        return await self._call(run_id, self._record_intent, key, run_id, tool, args_hash)

    async def record_result(self, key: str, result: Any) -> EffectRecord:
        """Record, durably, what the call under ``key`` returned; the effect is committed.

        ``result`` is a JSON-able document (``Decimal`` stays exact), sealed like a
        checkpoint. The intent must have been recorded first (else ``CheckpointError``);
        a result already committed is kept: it is what happened, and it is returned.
        """
        return await self._call(None, self._record_result, key, result)

    async def effect(self, key: str) -> EffectRecord | None:
        """The ledger's record under ``key``, or ``None`` if no call was recorded there."""
        return await self._call(None, self._effect, key)

    async def discard_intent(self, key: str) -> None:
        """Forget the intent under ``key``: a person checked that the call did not go through.

        The next resume then runs the call again. A committed effect is refused
        (``CheckpointError``): it did go through. An unknown key is left as it is.
        """
        await self._call(None, self._discard_intent, key)

    # -- the synchronous bodies --

    def _now(self) -> datetime:
        return _utc(self._clock(), "the checkpointer's clock")

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
    ) -> RunRecord:
        with self._transaction(write=True):
            record = self._get_record_to_save(run_id)
            status, waiting_for = self._saved_status(run_id, seq, record, status, waiting_for)
            prepared = self._prepare(run_id, seq, record, document, change, None)
            if prepared is None:  # this store does not know what is stored: read it
                assert record is not None
                stored = self._stored(run_id, self._chain(run_id), record)
                prepared = self._prepare(run_id, seq, record, document, change, stored)
                assert prepared is not None
            snapshot, blob, last = self._checkpoint(run_id, seq, document, prepared, change)
            now = self._now()
            saved = self._saved_record(record, run_id, seq, agent, status, phase, waiting_for, now)
            # Everything that can fail is done: the memory store has no rollback.
            self._put_row(run_id, _Row(seq, snapshot, phase, blob, now))
            self._put_record(saved)
            if record is not None and record.decision_pending:
                self._put_decision(run_id, None)
        self._remember(run_id, last)
        return saved

    def _stored(
        self, run_id: str, rows: list[_Row], record: RunRecord
    ) -> tuple[Mapping[str, Any], _Since]:
        """The stored document and ``_Since`` of a chain read by ``_chain`` (both stores)."""
        return self._replay(run_id, rows, record)[1], _since_of(rows)

    def _checkpoint(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        prepared: tuple[dict[str, Any], _Seen | None, _Since],
        change: _Change | None,
    ) -> tuple[bool, bytes, _Last]:
        """Whether checkpoint ``seq`` is a snapshot, its blob, and what to remember of it
        once it is stored (both stores)."""
        payload, seen, since = prepared
        blob, texts = self._blob(run_id, seq, payload, change)
        snapshot = payload["kind"] == "full"
        return (
            snapshot,
            blob,
            _Last(seq, document, seen, texts, since.after(seq, snapshot, len(blob))),
        )

    def _saved_status(
        self,
        run_id: str,
        seq: int,
        record: RunRecord | None,
        status: RunStatus,
        waiting_for: str,
    ) -> tuple[RunStatus, str]:
        """The status and wait a checkpoint ``seq`` is saved with, or the error refusing it.

        ``CheckpointOrderError`` unless ``seq`` is the run's next; ``IllegalStatusChangeError``
        for a change the lifecycle refuses. Both stores use it.
        """
        expected = 0 if record is None else record.seq + 1
        if seq != expected:
            raise CheckpointOrderError(run_id, seq=seq, expected=expected)
        current = RunStatus.RUNNING if record is None else record.status
        if current is RunStatus.CANCELLED and status is not RunStatus.CANCELLED:
            # Stopped from elsewhere while a runner still drove it (a resume sets it
            # running first): the phase it finished is kept, and the run stays
            # stopped - unless that phase ended it.
            if status is RunStatus.COMPLETED:
                current = RunStatus.RUNNING
            else:
                status, waiting_for = RunStatus.CANCELLED, ""
        if status != current:  # building the machine costs more than the whole delta
            RunLifecycle(run_id, current).move_to(status)
        return status, waiting_for

    @staticmethod
    def _saved_record(
        record: RunRecord | None,
        run_id: str,
        seq: int,
        agent: str,
        status: RunStatus,
        phase: str,
        waiting_for: str,
        now: datetime,
    ) -> RunRecord:
        """The run's row once checkpoint ``seq`` is saved (both stores)."""
        # Every value is of its field's type already: made as model_construct makes it.
        values = {
            "run_id": run_id,
            "agent": agent,
            "status": status,
            "phase": phase,
            "waiting_for": waiting_for,
            "updated_at": now,
            "seq": seq,
            # A stop request stands until the run is stopped (or ends); a pending
            # decision was used by the phase whose result this checkpoint is.
            "stop_requested": record is not None
            and record.stop_requested
            and status not in _SETTLED,
            "decision_pending": False,
        }
        return _trusted(RunRecord, values, set(_SAVED_FIELDS))

    def _prepare(
        self,
        run_id: str,
        seq: int,
        record: RunRecord | None,
        document: Mapping[str, Any],
        change: _Change | None,
        stored: tuple[Mapping[str, Any], _Since] | None,
    ) -> tuple[dict[str, Any], _Seen | None, _Since] | None:
        """The payload of checkpoint ``seq``, what to remember of it, and the run's
        ``_Since`` before it (both stores).

        ``None`` when this store does not know the run's latest checkpoint (another
        process saved since, or it forgot the run): call again with the stored document
        and the ``_Since`` of the stored chain as ``stored``. The caller's ops are
        the delta when their base is the document this store saved last, as the run's
        latest checkpoint; nothing is fingerprinted then. A caller that gives ops keeps
        its documents unchanged, so the fingerprints are taken later if ever needed.
        """
        last = self._recent.get(run_id)
        if last is not None and (record is None or last.seq != record.seq):
            last = None  # another process saved since, or the run is new again
        remember_later = change is not None
        if record is None:  # seq 0 is always a snapshot
            seen = None if remember_later else _seen_of(document)
            return {"kind": "full", "document": document}, seen, _Since(seq, 0, 0)
        if last is not None:
            since = last.since
        elif stored is not None:
            since = stored[1]
        else:
            return None
        if self._snapshot_due(seq, since):
            seen = None if remember_later else _seen_of(document)
            return {"kind": "full", "document": document}, seen, since
        if change is not None and last is not None and change.base is last.document:
            return {"kind": "delta", "ops": change.ops}, None, since
        if last is not None:
            previous = last.seen if last.seen is not None else _seen_of(last.document)
        else:
            assert stored is not None
            previous = _seen_of(stored[0])
        ops: list[list[Any]] = []
        seen = _diff(previous, document, [], ops)
        return {"kind": "delta", "ops": ops}, seen, since

    def _snapshot_due(self, seq: int, since: _Since) -> bool:
        """Whether checkpoint ``seq`` is a full snapshot (see the module's docstring).

        At least ``snapshot_every`` checkpoints after the last snapshot, and once the
        deltas stored since add up to that snapshot's size.
        """
        return seq - since.seq >= self.snapshot_every and since.deltas >= since.size

    def _blob(
        self, run_id: str, seq: int, payload: dict[str, Any], change: _Change | None
    ) -> tuple[bytes, Texts]:
        """Checkpoint ``seq``'s blob, and the texts of its list items to reuse (both stores).

        A caller that gives ops gives documents whose parts never change (from the phase
        codec): they are written in C, and a snapshot reuses the text of every list item
        an earlier snapshot of the run already wrote, so it costs what is new.
        """
        last = self._recent.get(run_id)
        texts: Texts = {} if last is None else last.texts
        if change is None:
            return self._encode(run_id, seq, payload), texts
        if payload["kind"] != "full":
            return self._encode(run_id, seq, payload, fast=True), texts
        text, texts = dumps_reusing(payload, texts)
        return self._seal_text(text, _aad(run_id, seq)), texts

    def _remember(self, run_id: str, last: _Last) -> None:
        self._recent[run_id] = last
        self._recent.move_to_end(run_id)
        while len(self._recent) > _RECENT_RUNS:
            self._recent.popitem(last=False)

    def _known(self, run_id: str) -> RunRecord:
        record = self._get_record(run_id)
        if record is None:
            raise UnknownRunError(run_id, store=self._where)
        return record

    def _load(self, run_id: str) -> tuple[int, Document]:
        with self._transaction(write=False):
            return self._rebuild(run_id, self._known(run_id))

    def _rebuild(self, run_id: str, record: RunRecord) -> tuple[int, Document]:
        return self._replay(run_id, self._chain(run_id), record)

    def _replay(self, run_id: str, rows: list[_Row], record: RunRecord) -> tuple[int, Document]:
        """The document that ``rows`` (a snapshot, then the deltas after it) build up."""
        if not rows or not rows[0].snapshot:
            raise self._corrupt(run_id, "has no full snapshot to start from", seq=None)
        document: Document = {}
        expected = rows[0].seq
        for row in rows:
            if row.seq != expected:
                raise self._corrupt(run_id, "is missing", seq=expected)
            payload = self._decode(run_id, row)
            try:
                if row.snapshot:
                    document = payload["document"]
                    if not isinstance(document, dict):
                        raise TypeError("the document is not an object")
                else:
                    _apply(document, payload["ops"])
            except (LookupError, TypeError, ValueError, AttributeError) as exc:
                raise self._corrupt(run_id, f"cannot be applied ({exc})", seq=row.seq) from None
            expected += 1
        if rows[-1].seq != record.seq:
            raise self._corrupt(
                run_id, f"is missing (the registry's last is {record.seq})", seq=rows[-1].seq + 1
            )
        return record.seq, document

    def _history(self, run_id: str) -> list[CheckpointEntry]:
        with self._transaction(write=False):
            self._known(run_id)
            return self._rows(run_id)

    def _record(self, run_id: str) -> RunRecord:
        with self._transaction(write=False):
            return self._known(run_id)

    def _set_status(self, run_id: str, status: RunStatus, waiting_for: str) -> RunRecord:
        with self._transaction(write=True):
            return self._move(self._known(run_id), status, waiting_for, self._now())

    def _read_select(
        self, statuses: tuple[RunStatus, ...] | None, agent: str | None
    ) -> list[RunRecord]:
        with self._transaction(write=False):
            return self._select(statuses, agent)

    def _record_intent(self, key: str, run_id: str, tool: str, args_hash: str) -> EffectRecord:
        with self._transaction(write=True, durable=True):
            row = self._get_effect(key)
            if row is None:
                row = _EffectRow(key, run_id, tool, args_hash, "intent", None, self._now())
                self._put_effect(row)
        return self._effect_record(row)

    def _record_result(self, key: str, result: Any) -> EffectRecord:
        with self._transaction(write=True, durable=True):
            row = self._get_effect(key)
            if row is None:
                raise CheckpointError(
                    f"effect {key!r} has no recorded intent, so its result was not recorded. "
                    "Record the intent (record_intent) before the call and the result after it."
                )
            if row.status == "intent":
                blob = self._encode_effect(row, {"kind": "effect", "result": result})
                row = row._replace(status="committed", blob=blob, updated_at=self._now())
                self._put_effect(row)
        return self._effect_record(row)

    def _effect(self, key: str) -> EffectRecord | None:
        with self._transaction(write=False):
            row = self._get_effect(key)
        return None if row is None else self._effect_record(row)

    def _discard_intent(self, key: str) -> None:
        with self._transaction(write=True, durable=True):
            row = self._get_effect(key)
            if row is not None and row.status == "committed":
                raise CheckpointError(
                    f"effect {key!r} of {row.tool} is committed: it went through, and its "
                    "result is kept. Resume the run to use that result.",
                    run_id=row.run_id,
                )
            if row is not None:
                self._delete_effect(key)

    def _effect_record(self, row: _EffectRow) -> EffectRecord:
        result = None
        if row.blob is not None:
            payload = self._unseal(
                row.blob, _effect_aad(row), row.run_id, f"the result of effect {row.key!r}"
            )
            if not isinstance(payload, dict) or payload.get("kind") != "effect":
                raise self._corrupt_effect(row, "is not an effect's result")
            result = payload.get("result")
        return EffectRecord(
            key=row.key,
            run_id=row.run_id,
            tool=row.tool,
            args_hash=row.args_hash,
            status=row.status,
            result=result,
            updated_at=row.updated_at,
        )

    def _purge(self, before: datetime) -> int:
        with self._transaction(write=True):
            removed = self._delete_ended(before)
        for run_id in removed:
            self._recent.pop(run_id, None)
        return len(removed)

    # -- blobs --

    def _encode(
        self, run_id: str, seq: int, payload: Mapping[str, Any], *, fast: bool = False
    ) -> bytes:
        return self._seal(payload, _aad(run_id, seq), fast=fast)

    def _encode_effect(self, row: _EffectRow, payload: Mapping[str, Any]) -> bytes:
        return self._seal(payload, _effect_aad(row))

    def _seal(self, payload: Mapping[str, Any], aad: bytes, *, fast: bool = False) -> bytes:
        # ``fast``: a document from the phase codec (text keys only), written in C.
        return self._seal_text(dumps_fast(payload) if fast else dumps(payload), aad)

    def _seal_text(self, text: str, aad: bytes) -> bytes:
        plain = text.encode("utf-8")
        sealed = plain if self._sealer is None else self._sealer.seal(plain, aad=aad)
        return hashlib.sha256(sealed).digest() + sealed

    def _decode(self, run_id: str, row: _Row) -> dict[str, Any]:
        payload = self._unseal(row.blob, _aad(run_id, row.seq), run_id, f"checkpoint {row.seq}")
        kind = "full" if row.snapshot else "delta"
        if not isinstance(payload, dict) or payload.get("kind") != kind:
            raise self._corrupt(run_id, f"is not a {kind} checkpoint", seq=row.seq)
        return payload

    def _unseal(self, blob: bytes, aad: bytes, run_id: str, which: str) -> JSON:
        """A stored blob's JSON value, checked (checksum) and opened (sealer)."""
        digest, sealed = blob[:_DIGEST], blob[_DIGEST:]
        if len(blob) <= _DIGEST or hashlib.sha256(sealed).digest() != digest:
            raise self._damaged(
                run_id, which, "does not match its checksum (truncated or overwritten)"
            )
        if self._sealer is None:
            plain = sealed
        else:
            try:
                plain = self._sealer.open(sealed, aad=aad, run_id=run_id)
            except CheckpointError:
                raise
            except Exception as exc:
                raise self._damaged(run_id, which, f"cannot be unsealed ({exc})") from exc
        try:
            payload = loads(plain)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self._damaged(run_id, which, f"is not JSON ({exc})") from None
        return payload

    def _corrupt_effect(self, row: _EffectRow, problem: str) -> CheckpointCorruptError:
        return self._damaged(row.run_id, f"the result of effect {row.key!r}", problem)

    def _damaged(self, run_id: str, which: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"{which} {problem}. Nothing was loaded and nothing in {self._where} was "
            "changed; other runs are unaffected. Restore the store from a backup to "
            "resume this run, or abort it and start it again.",
            run_id=run_id,
        )

    def _corrupt(self, run_id: str, problem: str, *, seq: int | None) -> CheckpointCorruptError:
        which = "its checkpoints" if seq is None else f"checkpoint {seq}"
        return self._damaged(run_id, which, problem)


def _aad(run_id: str, seq: int) -> bytes:
    return f"{run_id}:{seq}".encode()


def _effect_aad(row: _EffectRow) -> bytes:
    return f"effect:{row.run_id}:{row.key}".encode()


def _decision_aad(run_id: str) -> bytes:
    return f"decision:{run_id}".encode()


class MemoryCheckpointer(_Store):
    """Checkpoints in this process's memory: for tests, and runs that need not survive it.

    Same semantics as :class:`SQLiteCheckpointer` (deltas, snapshots, sealer, registry,
    lifecycle, purge); everything is lost with the process.
    """

    _where = "the in-memory checkpointer"

    def __init__(
        self,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
    ) -> None:
        super().__init__(snapshot_every=snapshot_every, sealer=sealer, clock=clock)
        self._records: dict[str, RunRecord] = {}
        self._checkpoints: dict[str, list[_Row]] = {}
        self._effects: dict[str, _EffectRow] = {}
        self._claims: dict[str, tuple[str, datetime]] = {}
        self._decisions: dict[str, bytes] = {}
        self._leases: dict[str, list[LeaseRecord]] = {}

    def _transaction(self, *, write: bool, durable: bool = False) -> AbstractContextManager[object]:
        # Every operation runs to its end without awaiting, so none can interleave.
        return nullcontext()

    async def _call(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        return function(*args)

    def _get_record(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    def _put_record(self, record: RunRecord) -> None:
        self._records[record.run_id] = record

    def _put_row(self, run_id: str, row: _Row) -> None:
        self._checkpoints.setdefault(run_id, []).append(row)

    def _chain(self, run_id: str) -> list[_Row]:
        rows = self._checkpoints.get(run_id, [])
        start = max((i for i in range(len(rows) - 1, -1, -1) if rows[i].snapshot), default=0)
        return rows[start:]

    def _rows(self, run_id: str) -> list[CheckpointEntry]:
        return [
            CheckpointEntry(
                seq=row.seq, phase=row.phase, snapshot=row.snapshot, size=len(row.blob), at=row.at
            )
            for row in self._checkpoints.get(run_id, [])
        ]

    def _select(self, statuses: tuple[RunStatus, ...] | None, agent: str | None) -> list[RunRecord]:
        chosen = [
            record
            for record in self._records.values()
            if (statuses is None or record.status in statuses)
            and (agent is None or record.agent == agent)
        ]
        return sorted(chosen, key=lambda record: (record.updated_at, record.run_id))

    def _delete_ended(self, before: datetime) -> list[str]:
        removed = [
            run_id
            for run_id, record in self._records.items()
            if record.status in ENDINGS and record.updated_at < before
        ]
        for run_id in removed:
            del self._records[run_id]
            self._checkpoints.pop(run_id, None)
            self._claims.pop(run_id, None)
            self._leases.pop(run_id, None)
            self._decisions.pop(run_id, None)
        gone = set(removed)
        for key in [key for key, row in self._effects.items() if row.run_id in gone]:
            del self._effects[key]
        return removed

    def _get_claim(self, run_id: str) -> tuple[str, datetime] | None:
        return self._claims.get(run_id)

    def _put_claim(self, run_id: str, owner: str, until: datetime) -> None:
        self._claims[run_id] = (owner, until)

    def _delete_claim(self, run_id: str) -> None:
        self._claims.pop(run_id, None)

    def _get_effect(self, key: str) -> _EffectRow | None:
        return self._effects.get(key)

    def _put_effect(self, row: _EffectRow) -> None:
        self._effects[row.key] = row

    def _delete_effect(self, key: str) -> None:
        del self._effects[key]

    def _get_decision(self, run_id: str) -> bytes | None:
        return self._decisions.get(run_id)

    def _put_decision(self, run_id: str, blob: bytes | None) -> None:
        if blob is None:
            self._decisions.pop(run_id, None)
        else:
            self._decisions[run_id] = blob

    def _runnable(
        self, agents: tuple[str, ...] | None, now: datetime, limit: int
    ) -> list[RunRecord]:
        def free(run_id: str) -> bool:
            held = self._claims.get(run_id)
            return held is None or held[1] <= now

        chosen = [
            record
            for record in self._records.values()
            if _runnable(record)
            and (agents is None or record.agent in agents)
            and free(record.run_id)
        ]
        return sorted(chosen, key=lambda record: (record.updated_at, record.run_id))[:limit]

    def _open_lease(self, lease: LeaseRecord) -> None:
        self._leases.setdefault(lease.run_id, []).append(lease)

    def _extend_lease(self, run_id: str, owner: str, until: datetime) -> bool:
        rows = self._leases.get(run_id, [])
        for index in range(len(rows) - 1, -1, -1):
            if rows[index].owner == owner and rows[index].released_at is None:
                rows[index] = rows[index].model_copy(update={"until": until})
                return True
        return False

    def _close_lease(self, run_id: str, owner: str, at: datetime) -> None:
        rows = self._leases.get(run_id, [])
        for index, row in enumerate(rows):
            if row.owner == owner and row.released_at is None:
                rows[index] = row.model_copy(update={"released_at": at})

    def _lease_rows(self, run_id: str | None) -> list[LeaseRecord]:
        if run_id is not None:
            return list(self._leases.get(run_id, []))
        every = [lease for rows in self._leases.values() for lease in rows]
        return sorted(every, key=lambda lease: lease.claimed_at)  # stable: claim order on ties


_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS runs (
    run_id      TEXT PRIMARY KEY,
    agent       TEXT NOT NULL,
    status      TEXT NOT NULL,
    phase       TEXT NOT NULL,
    waiting_for TEXT NOT NULL,
    updated_at  TEXT NOT NULL,  -- ISO 8601 in UTC, one width: sorts as time does
    seq         INTEGER NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    decision    BLOB            -- a person's decision, sealed; NULL when none is pending
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, updated_at);
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    kind   TEXT NOT NULL CHECK (kind IN ('full', 'delta')),
    phase  TEXT NOT NULL,
    blob   BLOB NOT NULL,
    at     TEXT NOT NULL DEFAULT '1970-01-01T00:00:00.000000+00:00',  -- when it was saved
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX IF NOT EXISTS snapshots ON checkpoints (run_id, seq) WHERE kind = 'full';
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
_EFFECT_COLUMNS: Final = "key, run_id, tool, args_hash, status, result, updated_at"
_RECORD_COLUMNS: Final = (
    "run_id, agent, status, phase, waiting_for, updated_at, seq, stop_requested, "
    "decision IS NOT NULL"
)
# Columns added since the first release, for files written before them.
_ADDED_COLUMNS: Final = (
    ("runs", "stop_requested", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "decision", "BLOB"),
    ("checkpoints", "at", "TEXT NOT NULL DEFAULT '1970-01-01T00:00:00.000000+00:00'"),
)
_LEASE_COLUMNS: Final = "run_id, owner, claimed_at, until, released_at"


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _record_of(row: tuple[Any, ...]) -> RunRecord:
    run_id, agent, status, phase, waiting_for, updated_at, seq, stop, decided = row
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
    )


def _lease_of(row: tuple[Any, ...]) -> LeaseRecord:
    run_id, owner, claimed_at, until, released_at = row
    return LeaseRecord(
        run_id=run_id,
        owner=owner,
        claimed_at=datetime.fromisoformat(claimed_at),
        until=datetime.fromisoformat(until),
        released_at=None if released_at is None else datetime.fromisoformat(released_at),
    )


def _upgrade(connection: sqlite3.Connection) -> None:
    """Add the columns a file written by an earlier version lacks."""
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


class _SQLiteTransaction:
    """One transaction of a :class:`SQLiteCheckpointer`'s connection (``with``).

    A class rather than a generator: a save opens one per checkpoint.
    """

    __slots__ = ("_db", "_durable", "_store", "_write")

    def __init__(self, store: SQLiteCheckpointer, write: bool, durable: bool) -> None:
        self._store, self._write, self._durable = store, write, durable

    def __enter__(self) -> sqlite3.Connection:
        self._db = self._store._begin(self._write, self._durable)
        return self._db

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        store, db = self._store, self._db
        try:
            if kind is not None:
                store._written.clear()  # what was written is undone
                db.execute("ROLLBACK")
                return
            try:
                db.execute("COMMIT")
            except BaseException:
                store._written.clear()
                raise
        finally:
            pages = store._end(db, self._durable)
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
    has committed since this one wrote it (``PRAGMA data_version``).
    ``synchronous=NORMAL``: a process crash loses nothing committed; a power cut may
    lose the last commits, never the file. The side-effect ledger is written with
    ``synchronous=FULL``: a recorded intent or result survives a power cut too. Its
    ``effects`` table is created, like the others, when the file is first opened. Call
    ``aclose()`` (or use ``async with``) when done.

    The WAL is copied back into the database file (a checkpoint, which waits for the
    disk) by a thread of this checkpointer's own, with a connection of its own, once
    about 1,000 pages were written since the last one: not by the commit that happens to
    cross the mark, as SQLite's automatic checkpoint does. A checkpoint that fails (the
    disk is full) is tried again after the next 1,000 pages; what was committed stays in
    the WAL, which SQLite reads as part of the file, so nothing is lost.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
    ) -> None:
        super().__init__(snapshot_every=snapshot_every, sealer=sealer, clock=clock)
        self.path = Path(path)
        self._where = f"the checkpoint store {str(self.path)!r}"
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        # The rows this connection wrote last, valid while no other connection has
        # committed since (PRAGMA data_version stays ``_version``): a save reads its
        # run's row from here instead of the file.
        self._written: dict[str, RunRecord] = {}
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
            self._version = None  # each connection counts data_version on its own
            self._wal_pages = 0

    async def _call(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        def locked() -> _T:
            with self._lock:
                self._wait_for_locks(_BUSY_MS)
                return self._guarded(run_id, function, *args)

        return await anyio.to_thread.run_sync(locked)

    async def _call_save(self, run_id: str, function: Callable[..., _T], *args: Any) -> _T:
        """Run a save on the event loop when that cannot wait: else in a worker thread.

        A save is one short transaction; with WAL and ``synchronous=NORMAL`` its commit
        does not wait for the disk, so a hop to a thread would cost more than the save.
        It runs here only when the connection is open and free, and it does not wait
        for another process's write lock: then (``SQLITE_BUSY``) it goes to a thread.
        """
        if self._connection is None or not self._lock.acquire(blocking=False):
            return await self._call(run_id, function, *args)
        try:
            # Set only when it changes: a run's saves follow each other on the event loop.
            self._wait_for_locks(0)
            try:
                return self._guarded(run_id, function, *args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
        finally:
            self._lock.release()
        return await self._call(run_id, function, *args)  # nothing was saved: wait for it

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
            raise CheckpointCorruptError(
                f"{self._where} cannot be read ({exc}). Nothing was changed. Restore "
                "the file from a backup, or move it aside to start with an empty store.",
                run_id=run_id,
            ) from exc

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
                    _upgrade(connection)
                except BaseException:
                    connection.execute("ROLLBACK")
                    raise
                connection.execute("COMMIT")
            except BaseException:
                connection.close()
                raise
            self._connection = connection
            self._busy_ms = _BUSY_MS
        return self._connection

    def _transaction(self, *, write: bool, durable: bool = False) -> _SQLiteTransaction:
        return _SQLiteTransaction(self, write, durable)

    def _begin(self, write: bool, durable: bool) -> sqlite3.Connection:
        db = self._db
        if durable:  # set outside the transaction: the commit is what must reach the disk
            db.execute("PRAGMA synchronous = FULL")
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
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
        # A page or two of each table and index the transaction wrote, and its blobs.
        self._wal_pages += 4 + pages
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
            f"SELECT {_RECORD_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else _record_of(row)

    def _get_record_to_save(self, run_id: str) -> RunRecord | None:
        # Inside the save's write transaction: no other connection can commit until it ends.
        (version,) = self._db.execute("PRAGMA data_version").fetchone()
        if version != self._version:
            self._written.clear()  # another connection committed: any row may have changed
            self._version = version
        record = self._written.get(run_id)
        return self._get_record(run_id) if record is None else record

    def _put_record(self, record: RunRecord) -> None:
        # An upsert, not a replace: the row's decision is written by _put_decision only.
        self._db.execute(
            "INSERT INTO runs (run_id, agent, status, phase, waiting_for, updated_at, seq, "
            "stop_requested) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE "
            "SET agent = excluded.agent, status = excluded.status, phase = excluded.phase, "
            "waiting_for = excluded.waiting_for, updated_at = excluded.updated_at, "
            "seq = excluded.seq, stop_requested = excluded.stop_requested",
            (
                record.run_id,
                record.agent,
                record.status.value,
                record.phase,
                record.waiting_for,
                self._stamp(record.updated_at),
                record.seq,
                int(record.stop_requested),
            ),
        )
        self._written[record.run_id] = record

    def _put_row(self, run_id: str, row: _Row) -> None:
        self._tx_pages += len(row.blob) >> 12
        self._db.execute(
            "INSERT INTO checkpoints (run_id, seq, kind, phase, blob, at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                run_id,
                row.seq,
                "full" if row.snapshot else "delta",
                row.phase,
                row.blob,
                self._stamp(row.at),
            ),
        )

    def _chain(self, run_id: str) -> list[_Row]:
        rows = self._db.execute(
            "SELECT seq, kind, phase, blob FROM checkpoints WHERE run_id = ?1 AND seq >= "
            "coalesce((SELECT max(seq) FROM checkpoints WHERE run_id = ?1 AND kind = 'full'), 0)"
            " ORDER BY seq",
            (run_id,),
        ).fetchall()
        return [_Row(seq, kind == "full", phase, bytes(blob)) for seq, kind, phase, blob in rows]

    def _rows(self, run_id: str) -> list[CheckpointEntry]:
        rows = self._db.execute(
            "SELECT seq, phase, kind, length(blob), at FROM checkpoints WHERE run_id = ? "
            "ORDER BY seq",
            (run_id,),
        ).fetchall()
        return [
            CheckpointEntry(
                seq=seq,
                phase=phase,
                snapshot=kind == "full",
                size=size,
                at=datetime.fromisoformat(at),
            )
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
            f"SELECT {_RECORD_COLUMNS} FROM runs{clause} ORDER BY updated_at, run_id", values
        ).fetchall()
        return [_record_of(row) for row in rows]

    def _delete_ended(self, before: datetime) -> list[str]:
        endings = tuple(status.value for status in sorted(ENDINGS))
        removed = [
            run_id
            for (run_id,) in self._db.execute(
                "SELECT run_id FROM runs WHERE status IN (?, ?) AND updated_at < ?",
                (*endings, _stamp(before)),
            )
        ]
        self._db.executemany("DELETE FROM checkpoints WHERE run_id = ?", [(r,) for r in removed])
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
        values: list[Any] = [_stamp(now)]
        mine = ""
        if agents is not None:
            mine = f" AND agent IN ({', '.join('?' * len(agents))})" if agents else " AND 0"
            values.extend(agents)
        values.append(limit)
        rows = self._db.execute(
            f"SELECT {_RECORD_COLUMNS} FROM runs WHERE (status IN ('running', 'failed_resumable')"
            " OR (status = 'interrupted' AND decision IS NOT NULL)) AND NOT EXISTS (SELECT 1 "
            f"FROM claims WHERE claims.run_id = runs.run_id AND claims.until > ?){mine} "
            "ORDER BY updated_at, run_id LIMIT ?",
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


if TYPE_CHECKING:  # both stores satisfy the protocol, as mypy checks here
    _memory: type[Checkpointer] = MemoryCheckpointer
    _sqlite: type[Checkpointer] = SQLiteCheckpointer
