"""The support agent: order look-ups, customer verification and refunds a person approves.

``python -m agents.support`` runs four scenarios offline: an approved refund paid
once; a duplicate refund suppressed; a denied refund tried again within five tool
iterations (suppressed); and a run that waits for a person, is resumed from its
SQLite checkpoint in a "new process", re-establishes who is verified, and pays once.
Refunds go to :class:`PaymentsService`, a SQLite ledger of its own that honours
idempotency keys.

For workers sharing a store: ``python -m statemachine worker --agent agents.support``
drives runs with :func:`worker_runner`, and ``python -m agents.support submit --db
PATH --count N`` submits customers' requests for them (:func:`support_requests`).
"""

from ._agent import (
    INSTRUCTIONS,
    ORDERS,
    LookupArgs,
    Order,
    RefundArgs,
    SupportContext,
    SupportDesk,
    SupportPlanning,
    SupportToolCalling,
    VerificationService,
    VerifiedSessions,
    VerifyArgs,
    reestablish,
    support_agent,
)
from ._payments import IdempotencyConflictError, PaymentsService, Receipt, RefundRefusedError
from ._scenarios import (
    LaterGate,
    Outcome,
    approved_refund,
    denied_then_retried,
    duplicate_refund,
    waits_then_resumes,
)
from ._worker import (
    AUTO_APPROVE_UP_TO,
    PAYMENTS_VAR,
    WORKER_ORDERS,
    DeskModel,
    RefundPolicy,
    support_requests,
    worker_runner,
)

__all__ = (
    "AUTO_APPROVE_UP_TO",
    "INSTRUCTIONS",
    "ORDERS",
    "PAYMENTS_VAR",
    "WORKER_ORDERS",
    "DeskModel",
    "IdempotencyConflictError",
    "LaterGate",
    "LookupArgs",
    "Order",
    "Outcome",
    "PaymentsService",
    "Receipt",
    "RefundArgs",
    "RefundPolicy",
    "RefundRefusedError",
    "SupportContext",
    "SupportDesk",
    "SupportPlanning",
    "SupportToolCalling",
    "VerificationService",
    "VerifiedSessions",
    "VerifyArgs",
    "approved_refund",
    "denied_then_retried",
    "duplicate_refund",
    "reestablish",
    "support_agent",
    "support_requests",
    "waits_then_resumes",
    "worker_runner",
)
