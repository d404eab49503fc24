"""The in-memory store: :class:`MemoryCheckpointer`."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ._base import _Store
from ._lifecycle import ENDINGS, RunStatus
from ._protocol import CheckpointEntry, LeaseRecord, RunRecord, Sealer
from ._rows import _EffectRow, _entry, _Row, _system_clock

if TYPE_CHECKING:
    from ._protocol import Checkpointer

__all__ = ["MemoryCheckpointer"]

_T = TypeVar("_T")


def _runnable(record: RunRecord, now: datetime) -> bool:
    """Whether a worker may take the run now (when no live lease holds it)."""
    if record.reason:  # held for a person
        return False
    if record.status is RunStatus.FAILED_RESUMABLE:
        return record.retry_at is None or record.retry_at <= now
    return record.status is RunStatus.RUNNING or (
        record.status is RunStatus.INTERRUPTED and record.decision_pending
    )


class MemoryCheckpointer(_Store):
    """Checkpoints in this process's memory: for tests, and runs that need not survive it.

    Same semantics as :class:`SQLiteCheckpointer` (deltas, snapshots, sealer, registry,
    lifecycle, purge); everything is lost with the process.
    """

    # No other process can resume a run from it: a context class need not import by name.
    _in_process: ClassVar[bool] = True

    def __init__(
        self,
        *,
        snapshot_every: int = 50,
        sealer: Sealer | None = None,
        clock: Callable[[], datetime] = _system_clock,
    ) -> None:
        super().__init__(
            snapshot_every=snapshot_every,
            sealer=sealer,
            clock=clock,
            where="the in-memory checkpointer",
        )
        self._records: dict[str, RunRecord] = {}
        self._checkpoints: dict[str, list[_Row]] = {}
        self._heads: dict[str, bytes] = {}
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

    def _put_record(self, record: RunRecord, head: bytes | None = None) -> None:
        self._records[record.run_id] = record
        if head is not None:
            self._heads[record.run_id] = head

    def _get_head(self, run_id: str) -> bytes | None:
        return self._heads.get(run_id)

    def _all_rows(self, run_id: str) -> list[_Row]:
        return list(self._checkpoints.get(run_id, []))

    def _put_row(self, run_id: str, row: _Row) -> None:
        self._checkpoints.setdefault(run_id, []).append(row)

    def _chain_rows(self, run_id: str) -> list[_Row]:
        rows = self._checkpoints.get(run_id, [])
        start = max((i for i in range(len(rows) - 1, -1, -1) if rows[i].snapshot), default=0)
        return rows[start:]

    def _rows(self, run_id: str) -> list[CheckpointEntry]:
        return [
            _entry(row.seq, row.phase, row.snapshot, len(row.blob), row.at)
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
            self._heads.pop(run_id, None)
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
            if _runnable(record, now)
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


if TYPE_CHECKING:  # the store satisfies the protocol, as mypy checks here
    _memory: type[Checkpointer] = MemoryCheckpointer
