"""What the memory and SQLite stores share: ``_Store``, their operations over their rows.

Every operation is one synchronous function run inside a transaction of the subclass's
(``_transaction``); the rules of the chain (snapshots, deltas, sealed blobs, replay) are
those of the ``_Chain`` each store holds (``_chain``), as PostgreSQL's store holds one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from hashlib import sha256 as _sha256
from typing import Any, ClassVar, Final, TypeVar

from .._approval import _submitted
from .._errors import (
    CheckpointError,
    ConfigError,
    UnknownRunError,
)
from .._fast._pydantic import _trusted
from .._json import dumps_bytes
from .._ledger import EffectRecord
from ._chain import _Chain, _link
from ._delta import FiniteOps
from ._lifecycle import ATTENTION, RunLifecycle, RunStatus, held_record, retry_fields
from ._protocol import (
    DEFAULT_RETENTION,
    CheckpointEntry,
    Document,
    LeaseRecord,
    RunRecord,
    Sealer,
)
from ._rows import (
    _DIGEST,
    _SAVED_FIELDS,
    _SETTLED,
    _aad,
    _Change,
    _EffectRow,
    _Last,
    _Row,
    _Since,
    _statuses,
    _system_clock,
    _utc,
)

__all__ = ["_Store"]

_T = TypeVar("_T")
_new_tuple: Final = tuple.__new__  # a named tuple's own __new__ calls it (see _next_delta)


class _Store:
    """What the memory and SQLite stores share: the operations. Subclasses keep the rows.

    Every operation is one synchronous function run inside ``_transaction``; the
    subclass decides how it is run (inline, or in a worker thread under a lock).
    """

    # The library's stores take a saver's delta ops and never change a document (the
    # runner reads this; the PostgreSQL store, which does not inherit this, says so too).
    _takes_ops: ClassVar[bool] = True
    _where: str

    def __init__(
        self,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
        where: str,
    ) -> None:
        self._chain = _Chain(snapshot_every=snapshot_every, sealer=sealer, clock=clock, where=where)
        self._where = where

    @property
    def snapshot_every(self) -> int:
        """Checkpoints at least between two full snapshots (see ``_chain``)."""
        return self._chain.snapshot_every

    @snapshot_every.setter
    def snapshot_every(self, value: int) -> None:
        self._chain.snapshot_every = value

    # -- what subclasses provide (synchronous, inside _transaction) --

    def _transaction(self, *, write: bool, durable: bool = False) -> AbstractContextManager[object]:
        raise NotImplementedError

    async def _call(self, run_id: str | None, function: Callable[..., _T], *args: Any) -> _T:
        raise NotImplementedError

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
        """The save run at once, by a backend that can run it where ``save`` is called;
        ``None`` when it was not (nothing was saved): by default, never."""
        return None

    def _get_record(self, run_id: str) -> RunRecord | None:
        raise NotImplementedError

    def _get_record_to_save(self, run_id: str) -> RunRecord | None:
        """The run's row, read to save its next checkpoint (a store may know it already)."""
        return self._get_record(run_id)

    def _put_record(self, record: RunRecord, head: bytes | None = None) -> None:
        """Write the run's row; ``head``, when given, is its chain's new head (a save)."""
        raise NotImplementedError

    def _put_saved(self, before: RunRecord | None, saved: RunRecord, head: bytes) -> None:
        """Write the run's row once a checkpoint is saved (``before``: its row before)."""
        self._put_record(saved, head)

    def _get_head(self, run_id: str) -> bytes | None:
        """The head of the run's chain as its row records it (``None``: none recorded)."""
        raise NotImplementedError

    def _all_rows(self, run_id: str) -> list[_Row]:
        """Every checkpoint of the run, in seq order: the whole chain, to check it."""
        raise NotImplementedError

    def _put_row(self, run_id: str, row: _Row) -> None:
        raise NotImplementedError

    def _chain_rows(self, run_id: str) -> list[_Row]:
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
        """Up to ``limit`` runs no live claim holds that are running, failed_resumable
        with ``retry_at`` come, or interrupted with a decision, of ``agents``, not held;
        oldest update first (then run id)."""
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
        # A member as it is: the enum's call runs two Python frames (about 4,000
        # instructions, callgrind).
        target = status if type(status) is RunStatus else RunStatus(status)
        # _change_of(base, ops), in place (its frame and the named tuple's __new__).
        change = None if ops is None else _new_tuple(_Change, (base, ops, type(ops) is FiniteOps))
        saved = self._save_now(run_id, seq, document, agent, target, phase, waiting_for, change)
        if saved is not None:
            return saved
        return await self._call(
            run_id, self._save, run_id, seq, document, agent, target, phase, waiting_for, change
        )

    async def load(self, run_id: str) -> tuple[int, Document]:
        """The run's latest checkpoint as ``(seq, document)``: one snapshot plus its deltas.

        Raises ``UnknownRunError`` for a run never saved, and ``CheckpointTamperedError``
        (a ``CheckpointCorruptError``, naming the run and the checkpoint) for a chain that
        is not the one saved: a blob changed, moved or cut, a row removed, a head rolled
        back (see ``_chain``).
        """
        return await self._call(run_id, self._load, run_id)

    async def verify(self, run_id: str) -> int:
        """Check the run's whole chain, every checkpoint from seq 0, against its head.

        ``load`` checks the chain from the run's last snapshot on (that snapshot's link
        binds every checkpoint before it); this checks every row, as an audit does.
        Returns the seq of the run's last checkpoint; raises as ``load`` does.
        """
        return await self._call(run_id, self._verify, run_id)

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
        """Runs interrupted, cancelled or failed_resumable, oldest update first.

        Held runs (``reason`` set) are among them: they are interrupted or failed_resumable.
        """
        return await self._call(None, self._read_select, tuple(sorted(ATTENTION)), None)

    async def hold(self, run_id: str, reason: str) -> RunRecord:
        """Keep every worker from taking the run until a person resumes it; ``reason`` says why.

        For a run a worker cannot go on with (its checkpoint cannot be loaded, its
        agent's code is missing, it failed too many times in a row): held once, with
        the reason in its row, instead of being retried for ever. A running run becomes
        ``interrupted`` (waiting for ``a person``); an interrupted one (an approval with
        a decision pending) or a failed_resumable one keeps its status, and what it
        waits for. A run held already keeps its first reason; a cancelled run is
        returned as it is; an ended one raises ``IllegalStatusChangeError``. A person
        lifts the hold by resuming the run (``set_status(run_id, "running")``).
        """
        return await self._call(run_id, self._hold_for_person, run_id, reason)

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

        Runnable: no live lease holds it, it is not held (``reason``), and it is
        ``running`` (its worker died, or it was submitted and never started),
        ``failed_resumable`` with its ``retry_at`` come, or ``interrupted`` with a
        person's decision pending. A run waiting for a person without a decision, and a
        cancelled or ended run, is never taken. A running run with a stop request and
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
            now = self._chain.now()
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
                self._close_lease(run_id, owner, self._chain.now())

    def _claim_next(
        self, owner: str, agents: tuple[str, ...] | None, lease: timedelta
    ) -> RunRecord | None:
        batch = 16
        with self._transaction(write=True):
            now = self._chain.now()
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
            now = self._chain.now()
            held = self._get_claim(run_id)
            if held is None or held[0] != owner or held[1] <= now:
                return False
            self._hold(run_id, owner, now, now + lease, again=True)
            return True

    def _read_leases(self, run_id: str | None) -> list[LeaseRecord]:
        with self._transaction(write=False):
            return self._lease_rows(run_id)

    def _submit_decision(self, run_id: str, document: Document) -> RunRecord:
        with self._transaction(write=True):
            record = self._known(run_id)
            blob, changed = self._chain.decided(record, document)
            self._put_record(changed)
            self._put_decision(run_id, blob)
            return changed

    def _decision(self, run_id: str, take: bool) -> Document | None:
        with self._transaction(write=take):
            record = self._known(run_id)
            blob = self._get_decision(run_id)
            if blob is None:
                return None
            document = self._chain.open_decision(run_id, blob)
            if take:
                self._put_record(record.model_copy(update={"decision_pending": False}))
                self._put_decision(run_id, None)
            return document

    def _request_stop(self, run_id: str) -> RunRecord:
        with self._transaction(write=True):
            record = self._known(run_id)
            now = self._chain.now()
            if record.status is RunStatus.CANCELLED:
                return record
            held = self._get_claim(run_id)
            if record.status is RunStatus.RUNNING and held is not None and held[1] > now:
                changed = record.model_copy(update={"stop_requested": True, "updated_at": now})
                self._put_record(changed)
                return changed
            return self._move(record, RunStatus.CANCELLED, "", now)

    def _hold_for_person(self, run_id: str, reason: str) -> RunRecord:
        with self._transaction(write=True):
            record = self._known(run_id)
            if record.reason or record.status is RunStatus.CANCELLED:
                return record
            changed = held_record(record, reason, self._chain.now())
            self._put_record(changed)
            return changed

    def _move(
        self, record: RunRecord, status: RunStatus, waiting_for: str, now: datetime
    ) -> RunRecord:
        """Change the run's status through its lifecycle (inside a write transaction)."""
        RunLifecycle(record.run_id, record.status).move_to(status)
        update: dict[str, Any] = {"status": status, "waiting_for": waiting_for, "updated_at": now}
        update.update(retry_fields(record, status, now, saved=False))
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
        moment = _utc(now if now is not None else self._chain.clock(), "now")
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
        """Save checkpoint ``seq`` (see :meth:`save`); ``now``, the moment to save it at
        when one was read from the clock already (by a backend's shortcut that let it be)."""
        with self._transaction(write=True):
            record = self._get_record_to_save(run_id)
            chain = self._chain
            next_delta = self._next_delta(run_id, seq, document, record, status, change)
            if next_delta is None:
                snapshot, blob, last, status, waiting_for = self._checkpoint(
                    run_id, seq, document, record, status, waiting_for, change
                )
            else:
                snapshot, (blob, last) = False, next_delta
            if now is None:
                now = chain.now()
            if next_delta is not None and status is not RunStatus.FAILED_RESUMABLE:
                assert record is not None  # a next delta: the run has a row
                # What saved_record and retry_fields give then (the status the run has,
                # not failed: the retry state cleared), in their order, in one dict.
                values = {
                    "run_id": run_id,
                    "agent": agent,
                    "status": status,
                    "phase": phase,
                    "waiting_for": waiting_for,
                    "updated_at": now,
                    "seq": seq,
                    "stop_requested": record.stop_requested and status not in _SETTLED,
                    "decision_pending": False,
                    "reason": "",
                    "failures": 0,
                    "retry_at": None,
                }
                saved = _trusted(RunRecord, values, set(_SAVED_FIELDS))
            else:
                saved = chain.saved_record(
                    record, run_id, seq, agent, status, phase, waiting_for, now
                )
                # The retry state, which saved_record leaves out: a checkpoint saved is
                # progress.
                vars(saved).update(retry_fields(record, status, now, saved=True))
            # Everything that can fail is done: the memory store has no rollback.
            self._put_row(run_id, _Row(seq, snapshot, phase, blob, now))
            self._put_saved(record, saved, last.head)
            if record is not None and record.decision_pending:
                self._put_decision(run_id, None)
        self._chain.remember(run_id, last)
        return saved

    def _next_delta(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        record: RunRecord | None,
        status: RunStatus,
        change: _Change | None,
    ) -> tuple[bytes, _Last] | None:
        """The blob of checkpoint ``seq`` and what to remember of it, when it is the run's
        next delta, given as ops on the document this store saved last, in the status the
        run has: what ``_checkpoint`` gives then, without the frames of its steps (the
        same blob, head and memory: tests/test_save_fast.py). ``None`` otherwise."""
        chain = self._chain
        known = None if change is None else chain.recent.get(run_id)
        if (
            known is None
            or record is None
            or change is None
            or change.base is not known.document
            or known.seq != record.seq
            or seq != known.seq + 1
            or status is not record.status
        ):
            return None
        since = known.since
        # chain.snapshot_due(seq, since), in place: a frame less at every save.
        if seq - since.seq >= chain.snapshot_every and since.deltas >= since.size:
            return None
        plain = dumps_bytes({"kind": "delta", "ops": change.ops}, finite=change.finite)
        previous = known.head
        if chain.sealer is None and len(previous) >= _DIGEST:
            # seal_plain and head as they are without a sealer (seq is 1 or more here):
            # the blob is its checksum and the text, the link follows the head.
            digest = _sha256(plain).digest()
            blob = digest + plain
            head = _link(run_id, seq, False, previous[:_DIGEST], digest)
        else:
            blob = chain.seal_plain(plain, _aad(run_id, seq))
            head = chain.head(run_id, seq, False, blob[:_DIGEST], previous)
        # The named tuples made as their own __new__ makes them, without its frame.
        since = _new_tuple(_Since, (since.seq, since.size, since.deltas + len(blob)))
        return blob, _new_tuple(_Last, (seq, document, None, known.texts, since, head))

    def _checkpoint(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        record: RunRecord | None,
        status: RunStatus,
        waiting_for: str,
        change: _Change | None,
    ) -> tuple[bool, bytes, _Last, RunStatus, str]:
        """Checkpoint ``seq``'s kind, blob and what to remember of it, and the status and
        wait it is saved with (inside the save's transaction): every save's plain path."""
        chain = self._chain
        status, waiting_for = chain.saved_status(run_id, seq, record, status, waiting_for)
        prepared = chain.prepare(run_id, seq, record, document, change, None)
        if prepared is None:  # this store does not know what is stored: read it
            assert record is not None
            stored = chain.stored(run_id, self._chain_rows(run_id), record)
            prepared = chain.prepare(run_id, seq, record, document, change, stored)
            assert prepared is not None
        previous = chain.previous_head(run_id, record)
        if previous is None and record is not None:  # saved last by another store
            previous = self._get_head(run_id)
        snapshot, blob, last = chain.checkpoint(run_id, seq, document, prepared, change, previous)
        return snapshot, blob, last, status, waiting_for

    def _known(self, run_id: str) -> RunRecord:
        record = self._get_record(run_id)
        if record is None:
            raise UnknownRunError(run_id, store=self._where)
        return record

    def _load(self, run_id: str) -> tuple[int, Document]:
        with self._transaction(write=False):
            return self._rebuild(run_id, self._known(run_id))

    def _rebuild(self, run_id: str, record: RunRecord) -> tuple[int, Document]:
        head = self._get_head(run_id)
        document = self._chain.from_snapshot(run_id, self._chain_rows(run_id), record, head)
        if document is not None:
            return record.seq, document
        rows = self._all_rows(run_id)
        start = self._chain.verify(run_id, rows, record, head)
        return self._chain.replay(run_id, rows[start:], record)

    def _verify(self, run_id: str) -> int:
        with self._transaction(write=False):
            record = self._known(run_id)
            self._chain.verify(run_id, self._all_rows(run_id), record, self._get_head(run_id))
            return record.seq

    def _history(self, run_id: str) -> list[CheckpointEntry]:
        with self._transaction(write=False):
            self._known(run_id)
            return self._rows(run_id)

    def _record(self, run_id: str) -> RunRecord:
        with self._transaction(write=False):
            return self._known(run_id)

    def _set_status(self, run_id: str, status: RunStatus, waiting_for: str) -> RunRecord:
        with self._transaction(write=True):
            return self._move(self._known(run_id), status, waiting_for, self._chain.now())

    def _read_select(
        self, statuses: tuple[RunStatus, ...] | None, agent: str | None
    ) -> list[RunRecord]:
        with self._transaction(write=False):
            return self._select(statuses, agent)

    def _record_intent(self, key: str, run_id: str, tool: str, args_hash: str) -> EffectRecord:
        with self._transaction(write=True, durable=True):
            row = self._get_effect(key)
            if row is None:
                row = _EffectRow(key, run_id, tool, args_hash, "intent", None, self._chain.now())
                self._put_effect(row)
        return self._chain.effect_record(row)

    def _record_result(self, key: str, result: Any) -> EffectRecord:
        with self._transaction(write=True, durable=True):
            row = self._get_effect(key)
            if row is None:
                raise CheckpointError(
                    f"effect {key!r} has no recorded intent, so its result was not recorded. "
                    "Record the intent (record_intent) before the call and the result after it."
                )
            if row.status == "intent":
                blob = self._chain.encode_effect(row, {"kind": "effect", "result": result})
                row = row._replace(status="committed", blob=blob, updated_at=self._chain.now())
                self._put_effect(row)
        return self._chain.effect_record(row)

    def _effect(self, key: str) -> EffectRecord | None:
        with self._transaction(write=False):
            row = self._get_effect(key)
        return None if row is None else self._chain.effect_record(row)

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

    def _purge(self, before: datetime) -> int:
        with self._transaction(write=True):
            removed = self._delete_ended(before)
        for run_id in removed:
            self._chain.forget(run_id)
        return len(removed)
