"""The roles a checkpoint store plays, each a small protocol, and the records it returns.

A checkpoint is an opaque JSON-able document (``dict[str, Any]``) saved under the run
id and its ``seq``, the transition number: 0, 1, 2, ... with no gap (:class:`RunStore`);
how it is stored is ``_base``'s (snapshots and deltas, sealed blobs).

The registry (one row per run: agent, status, phase, what it waits for, when it was
last updated, its last seq, its retry state) is kept beside the checkpoints and answers
"which runs need attention?" without decoding any checkpoint (:class:`Registry`).
Status changes go through :class:`RunLifecycle`; a run a worker cannot go on with is
*held* for a person (``hold``) instead of being retried for ever.

The side-effect ledger (one :class:`EffectRecord` per idempotency key) is kept
beside them too: a write tool's intent is recorded before the call and its result
after, so a replay never runs a committed effect twice. A result is stored as a
blob like a checkpoint (checksum, sealer, associated data
``b"effect:<run_id>:<key>"``); SQLite writes the ledger with ``synchronous=FULL``.

Many workers share one store through leases (:class:`Leases`): ``claim_next`` hands each
runnable run to one worker at a time (a run whose worker died becomes runnable when its
lease lapses, a failed run when its ``retry_at`` has come, a held run never), ``renew``
keeps a lease, ``release`` gives it back, and every lease is kept in a history
(:class:`LeaseRecord`). A person's decision about a run waiting for an
approval is stored with the run (:class:`Decisions`: ``submit_decision``, sealed like a
checkpoint with the associated data ``b"decision:<run_id>"``) and makes it runnable; a
stop request (``request_stop``) is a flag on the run's row that the worker driving it
reads in the row its next ``save`` returns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict

from .._ledger import EffectLedger
from ._lifecycle import RunStatus

__all__ = [
    "DEFAULT_RETENTION",
    "CheckpointEntry",
    "Checkpointer",
    "Decisions",
    "Document",
    "LeaseRecord",
    "Leases",
    "Registry",
    "RunRecord",
    "RunStore",
    "Sealer",
]

Document = dict[str, Any]
DEFAULT_RETENTION: Final = timedelta(days=30)


class RunRecord(BaseModel, defer_build=True):
    """One run's row in the registry: what a person needs to find and triage it.

    ``stop_requested``: someone asked the worker driving the run to stop it (it stops
    at its next checkpoint). ``decision_pending``: a person's decision waits for a
    worker to resume the run with it.

    The retry state (see ``_lifecycle.retry_fields``): ``failures`` is how many times in
    a row the run failed (``failed_resumable``) without getting further; ``retry_at``
    is when a worker may retry it (``None``: at once); ``reason``, when not empty, says
    why the run is *held*: it waits for a person (``interrupted``, or still
    ``failed_resumable``) and no worker takes it, because one could not go on with it
    (:meth:`Registry.hold`). A person resuming it lifts the hold.
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
    reason: str = ""
    failures: int = 0
    retry_at: datetime | None = None

    @property
    def held(self) -> bool:
        """Whether the run waits for a person because a worker could not go on with it."""
        return bool(self.reason)


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

    async def hold(self, run_id: str, reason: str) -> RunRecord:
        """Keep every worker from taking the run until a person resumes it; ``reason`` says why.

        A running run becomes ``interrupted``; an interrupted or failed_resumable one
        keeps its status. A run held already, or cancelled, is returned as it is.
        """
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
    :class:`Leases` and :class:`Registry`, to hold a run it cannot go on with).
    """
