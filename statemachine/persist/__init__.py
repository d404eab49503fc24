"""Persistence, public as ``statemachine.persist``: the role protocols, records and stores.

A store plays five roles, each a small protocol: :class:`RunStore` (checkpoints),
:class:`Registry` (one row per run), :class:`Leases` (who drives a run),
:class:`Decisions` (a person's decision, a stop) and :class:`EffectLedger` (the
side-effect ledger, the one role the core uses). :class:`Checkpointer` is all five, as
the runner needs them; ask for fewer where fewer are used (the worker: ``Leases``).

The stores: :class:`MemoryCheckpointer`, :class:`SQLiteCheckpointer` (the embedded
default) and :class:`PostgresCheckpointer` (it needs psycopg, the ``postgres`` extra);
:class:`CheckpointCipher` encrypts checkpoints at rest. Each name is imported from its
module on first use, and is the same object as the one of the same name in
``statemachine``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._lazy import by_module as _by_module
from .._lazy import lazy_names

if TYPE_CHECKING:
    from .._ledger import EffectLedger, EffectRecord
    from ._codec import dump_phase, load_phase
    from ._crypto import CheckpointCipher
    from ._lifecycle import RunLifecycle, RunStatus
    from ._memory import MemoryCheckpointer
    from ._postgres import PostgresCheckpointer
    from ._protocol import (
        DEFAULT_RETENTION,
        CheckpointEntry,
        Checkpointer,
        Decisions,
        LeaseRecord,
        Leases,
        Registry,
        RunRecord,
        RunStore,
        Sealer,
    )
    from ._sqlite import SQLiteCheckpointer

__all__ = (
    "DEFAULT_RETENTION",
    "CheckpointCipher",
    "CheckpointEntry",
    "Checkpointer",
    "Decisions",
    "EffectLedger",
    "EffectRecord",
    "LeaseRecord",
    "Leases",
    "MemoryCheckpointer",
    "PostgresCheckpointer",
    "Registry",
    "RunLifecycle",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "SQLiteCheckpointer",
    "Sealer",
    "dump_phase",
    "load_phase",
)

# Every name is imported from its module on first use, as ``statemachine``'s are: a
# run without a checkpointer loads the protocols it names and none of the stores, the
# codec or the chain; psycopg and cryptography wait for PostgreSQL and the cipher.
_LAZY: Final[dict[str, str]] = _by_module(
    {
        ".._ledger": ("EffectLedger", "EffectRecord"),
        "._codec": ("dump_phase", "load_phase"),
        "._crypto": ("CheckpointCipher",),
        "._lifecycle": ("RunLifecycle", "RunStatus"),
        "._memory": ("MemoryCheckpointer",),
        "._postgres": ("PostgresCheckpointer",),
        "._protocol": (
            "DEFAULT_RETENTION",
            "CheckpointEntry",
            "Checkpointer",
            "Decisions",
            "LeaseRecord",
            "Leases",
            "Registry",
            "RunRecord",
            "RunStore",
            "Sealer",
        ),
        "._sqlite": ("SQLiteCheckpointer",),
    }
)


if not TYPE_CHECKING:  # hidden from the type checkers, so a misspelt name stays an error
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
