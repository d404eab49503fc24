"""The payments service: a small SQLite ledger of refunds that honours idempotency keys.

It is the refund agent's *external* service, so it keeps a database of its own,
separate from the runs' checkpoints: what it promises is what a real payments API
promises (Stripe's ``Idempotency-Key``, say). A refund is recorded under its key
(``UNIQUE``), in one transaction with the check for that key, so a key already seen
returns the refund already made and nothing is paid twice, whoever asks and however
often. Amounts are stored as ``TEXT`` and read back as the exact ``Decimal``.
"""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path
from types import TracebackType

import attrs

from statemachine import money_difference, money_sum

__all__ = ["IdempotencyConflictError", "PaymentsService", "Receipt", "RefundRefusedError"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS refunds (
    number          INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT NOT NULL UNIQUE,
    order_id        INTEGER NOT NULL,
    amount          TEXT NOT NULL,
    reason          TEXT NOT NULL
)
"""


@attrs.frozen
class Receipt:
    """One refund the service made; ``replayed``: this key had been seen before."""

    reference: str
    order_id: int
    amount: Decimal
    reason: str
    idempotency_key: str
    replayed: bool = False


class IdempotencyConflictError(ValueError):
    """A key already used for another refund (another order or amount): nothing is paid."""

    def __init__(self, key: str, *, recorded: Receipt) -> None:
        self.key = key
        self.recorded = recorded
        super().__init__(
            f"idempotency key {key} was used for {recorded.reference} (order "
            f"{recorded.order_id}, {recorded.amount}); a different refund needs a new key"
        )


class RefundRefusedError(ValueError):
    """A refund of more than is left to refund on the order: nothing is paid."""

    def __init__(self, order_id: int, *, amount: Decimal, left: Decimal) -> None:
        self.order_id = order_id
        self.amount = amount
        self.left = left
        super().__init__(
            f"refund of {amount} on order {order_id} refused: only {left} is left to refund"
        )


class PaymentsService:
    """Refunds recorded in a SQLite file of their own; one refund per idempotency key.

    Calls are synchronous and short (one small transaction). ``isolation_level=None``
    with an explicit ``BEGIN IMMEDIATE`` takes the write lock before the look-up, so
    two processes refunding under one key cannot both insert.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # Any thread may close it: worker_runner closes a service it opened when its desk
        # is collected, in whichever thread that happens (sqlite3 serializes calls).
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a refund, once paid, stays recorded
        self._db.execute(_SCHEMA)

    def refund(
        self,
        order_id: int,
        amount: Decimal,
        reason: str,
        *,
        key: str,
        limit: Decimal | None = None,
    ) -> Receipt:
        """Refund ``amount`` on ``order_id`` under ``key``; a key seen before pays nothing.

        Returns the new receipt, or the one already made under ``key`` (``replayed``).
        The key is looked at first, so a refund sent again after a crash gets its
        receipt back even though the order has no money left to refund.
        ``limit`` (what the order captured) caps everything refunded on the order:
        :class:`RefundRefusedError` beyond it. :class:`IdempotencyConflictError` if
        ``key`` was used for a different refund.
        """
        if not isinstance(amount, Decimal):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"amount must be a Decimal, got {type(amount).__name__}")
        if not key:
            raise ValueError("a refund needs an idempotency key")
        self._db.execute("BEGIN IMMEDIATE")
        try:
            recorded = self._find(key)
            if recorded is None:
                left = None if limit is None else money_difference(limit, self.refunded(order_id))
                if left is not None and amount > left:
                    raise RefundRefusedError(order_id, amount=amount, left=left)
                self._db.execute(
                    "INSERT INTO refunds (idempotency_key, order_id, amount, reason) "
                    "VALUES (?, ?, ?, ?)",
                    (key, order_id, str(amount), reason),
                )
                made = self._find(key)
                assert made is not None  # inserted just above, in this transaction
                self._db.execute("COMMIT")
                return made
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        if recorded.order_id != order_id or recorded.amount != amount:
            raise IdempotencyConflictError(key, recorded=recorded)
        return attrs.evolve(recorded, replayed=True)

    def _find(self, key: str) -> Receipt | None:
        row = self._db.execute(
            "SELECT number, order_id, amount, reason FROM refunds WHERE idempotency_key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        number, order_id, amount, reason = row
        return Receipt(
            reference=f"RF-{number:04d}",
            order_id=order_id,
            amount=Decimal(amount),
            reason=reason,
            idempotency_key=key,
        )

    def receipts(self) -> list[Receipt]:
        """Every refund made, oldest first."""
        keys = self._db.execute("SELECT idempotency_key FROM refunds ORDER BY number").fetchall()
        return [receipt for (key,) in keys if (receipt := self._find(key)) is not None]

    def refunded(self, order_id: int) -> Decimal:
        """Everything refunded on ``order_id`` so far."""
        rows = self._db.execute("SELECT amount FROM refunds WHERE order_id = ?", (order_id,))
        return money_sum(*(Decimal(amount) for (amount,) in rows))

    def count(self) -> int:
        """How many refunds were made (not how many were asked for)."""
        (count,) = self._db.execute("SELECT COUNT(*) FROM refunds").fetchone()
        return int(count)

    def total(self) -> Decimal:
        """The sum of every refund made, exactly."""
        rows = self._db.execute("SELECT amount FROM refunds")
        return money_sum(*(Decimal(amount) for (amount,) in rows))

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> PaymentsService:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
