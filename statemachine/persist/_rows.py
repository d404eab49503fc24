"""What a store keeps of a run and remembers of it, shared by the three backends.

The rows (:class:`_Row`, a checkpoint; :class:`_EffectRow`, the ledger's), what a store
remembers of a run's last checkpoint (:class:`_Last`, :class:`_Since`), a caller's delta
(:class:`_Change`), the associated data its blobs are sealed with, and the small checks
every backend makes the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, NamedTuple

from .._errors import ConfigError
from .._fast._pydantic import _trusted
from .._json import Texts
from ._delta import FiniteOps, _Seen
from ._lifecycle import RunStatus
from ._protocol import CheckpointEntry

__all__ = [
    "_DIGEST",
    "_EPOCH",
    "_RECENT_RUNS",
    "_SAVED_FIELDS",
    "_SETTLED",
    "_Change",
    "_EffectRow",
    "_Last",
    "_Row",
    "_Since",
    "_aad",
    "_change_of",
    "_decision_aad",
    "_effect_aad",
    "_entry",
    "_head_aad",
    "_since_of",
    "_statuses",
    "_system_clock",
    "_utc",
]

_DIGEST: Final = 32  # bytes of SHA-256 in front of every stored blob
_RECENT_RUNS: Final = 256  # runs whose last document's fingerprints are kept for diffing
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


class _Change(NamedTuple):
    """A caller's delta: the ops that turn ``base`` into the document it saves;
    ``finite``, the ops came as ``_delta.FiniteOps`` (their floats are all finite)."""

    base: Mapping[str, Any] | None
    ops: list[list[Any]]
    finite: bool = False


def _change_of(base: Mapping[str, Any] | None, ops: list[list[Any]] | None) -> _Change | None:
    """A save's ``base`` and ``ops`` as a ``_Change`` (``None``: no ops given)."""
    if ops is None:
        return None
    return _Change(base, ops, type(ops) is FiniteOps)


class _Since(NamedTuple):
    """A run's last snapshot (its seq and bytes) and the bytes of the deltas stored after it."""

    seq: int
    size: int
    deltas: int

    def after(self, seq: int, snapshot: bool, size: int) -> _Since:
        """What it is once checkpoint ``seq`` (``size`` bytes) is stored."""
        return _Since(seq, size, 0) if snapshot else _Since(self.seq, self.size, self.deltas + size)


def _since_of(rows: list[_Row]) -> _Since:
    """``_Since`` of a chain as ``_chain_rows`` reads it: the last snapshot, then its deltas."""
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
    head: bytes  # the run's head once this checkpoint was stored (see _chain)


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


def _entry(seq: Any, phase: Any, snapshot: Any, size: Any, at: Any) -> CheckpointEntry:
    """``CheckpointEntry(seq=seq, ...)``, one entry of a store's ``history``.

    Made without validating it when each value is of its field's type exactly (an
    ``int``, a ``str``, a ``bool``, an ``int`` and a ``datetime``, as a store reads them
    from its own rows): what validation keeps as it is, in the same fields, set the same
    way (tests/test_history_entries.py). Any other value (a row changed by hand: a seq
    stored as text) is validated, as before. ``history`` makes one a checkpoint of the
    run: the bench's 3,004-checkpoint history takes 7.2 ms so, 9.8 validated (issue 23).
    """
    if (
        type(seq) is int
        and type(phase) is str
        and type(snapshot) is bool
        and type(size) is int
        and type(at) is datetime
    ):
        return _trusted(
            CheckpointEntry,
            {"seq": seq, "phase": phase, "snapshot": snapshot, "size": size, "at": at},
            {"seq", "phase", "snapshot", "size", "at"},
        )
    return CheckpointEntry(seq=seq, phase=phase, snapshot=snapshot, size=size, at=at)


def _utc(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is UTC:  # the system clock's, at every save: in UTC already
        return moment
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


def _aad(run_id: str, seq: int) -> bytes:
    return f"{run_id}:{seq}".encode()


def _effect_aad(row: _EffectRow) -> bytes:
    return f"effect:{row.run_id}:{row.key}".encode()


def _decision_aad(run_id: str) -> bytes:
    return f"decision:{run_id}".encode()


def _head_aad(run_id: str, seq: int, link: bytes) -> bytes:
    return f"head:{run_id}:{seq}:{link.hex()}".encode()
