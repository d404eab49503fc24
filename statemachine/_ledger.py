"""The side-effect ledger, as the core sees it: a small protocol every store satisfies.

``ToolCalling.execute`` records a write call's intent before the call and its result
after, under the call's idempotency key, so that a resumed run never acts twice. The
core needs only these four operations; the stores (in ``statemachine.persist``)
implement them, and :class:`~statemachine.Checkpointer` includes them, so the core
imports no storage.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

__all__ = ["EffectLedger", "EffectRecord"]


class EffectRecord(BaseModel, defer_build=True):
    """One write-tool call in the side-effect ledger, under its idempotency key.

    ``status`` is ``intent`` (recorded before the call: it may or may not have gone
    through) or ``committed`` (the call returned ``result``, a JSON-able value whose
    non-integer numbers are exact ``Decimal``).
    """

    model_config = ConfigDict(frozen=True)

    key: str
    run_id: str
    tool: str
    args_hash: str
    status: Literal["intent", "committed"]
    result: Any = None
    updated_at: datetime


class EffectLedger(Protocol):
    """Records each write call's intent and result under its idempotency key."""

    async def record_intent(
        self, key: str, *, run_id: str, tool: str, args_hash: str
    ) -> EffectRecord:
        """Record that a write call is about to run; an existing record is returned as it is."""
        ...

    async def record_result(self, key: str, result: Any) -> EffectRecord:
        """Record what the call under ``key`` returned: the effect is committed."""
        ...

    async def effect(self, key: str) -> EffectRecord | None:
        """The ledger's record under ``key``, or ``None`` if no call was recorded."""
        ...

    async def discard_intent(self, key: str) -> None:
        """Forget an intent a person found did not go through, so the call may run again."""
        ...
