"""The approvals inbox: a web page where operators see the runs that need a person and decide.

``statemachine inbox --config inbox.toml`` serves it (uvicorn, on loopback unless
configured); :func:`inbox_app` is the ASGI application itself. It needs the
``inbox`` extra (``pip install 'statemachine-agents[inbox]'``).

- ``_config``: the configuration file: operators, their roles and argon2 hashes, the
  session key, the audit trail's file, the webhook.
- ``_reading``: the runs that need a person, and what a run's page shows.
- ``_deciding``: the actions, through the command line's own decision path, and the
  audit trail.
- ``_app``: the Starlette application: log-in, sessions, CSRF, pages, live fragments.
- ``_notify``: the webhook announcing runs that start waiting for a person.
"""

from ._app import inbox_app
from ._config import (
    InboxConfig,
    InboxConfigError,
    Operator,
    WebhookConfig,
    hash_secret,
    load_config,
    new_token,
)
from ._deciding import AuditTrail
from ._notify import SIGNATURE_HEADER, WaitingNotifier, sign, verify

__all__ = [
    "SIGNATURE_HEADER",
    "AuditTrail",
    "InboxConfig",
    "InboxConfigError",
    "Operator",
    "WaitingNotifier",
    "WebhookConfig",
    "hash_secret",
    "inbox_app",
    "load_config",
    "new_token",
    "sign",
    "verify",
]
