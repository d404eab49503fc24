"""The inbox's configuration file: its operators, their roles and secrets, and the webhook.

A TOML file (``statemachine inbox --config PATH``)::

    [inbox]
    bind = "127.0.0.1"            # loopback unless changed here or with --host
    port = 8765
    base_url = "http://127.0.0.1:8765"   # the links a notification carries
    session_minutes = 480         # a login lasts this long, however active
    secret_env = "STATEMACHINE_INBOX_SECRET"  # signs sessions; unset: a key per process
    audit_log = "inbox-audit.jsonl"           # relative to this file
    secure_cookies = false        # true behind HTTPS: the cookie is sent over HTTPS only

    [[operators]]
    name = "ana"
    role = "decide"               # "view" (read only) or "decide"
    up_to = "500.00"              # optional: the largest amount this person may approve
    password_hash = "$argon2id$..."   # or token_hash, for an issued token

    [webhook]                     # optional
    url = "https://hooks.example/inbox"
    secret_env = "STATEMACHINE_WEBHOOK_SECRET"
    attempts = 5
    backoff_seconds = 1.0

Secrets are never written in the file: passwords and tokens as argon2 hashes
(``statemachine inbox --hash-password``, ``--new-token``), the session and webhook
keys in environment variables the file names.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final, Literal

import attrs
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

__all__ = [
    "InboxConfig",
    "InboxConfigError",
    "Operator",
    "WebhookConfig",
    "hash_secret",
    "load_config",
    "new_token",
]

_HASHER: Final = PasswordHasher()
# Verified against when a name is unknown, so that a wrong name costs what a wrong password does.
_DUMMY: Final = _HASHER.hash(secrets.token_urlsafe(16))
Role = Literal["view", "decide"]


class InboxConfigError(ValueError):
    """The configuration file cannot be used; the message names the file, the place and the fix."""


@attrs.frozen
class Operator:
    """A person who may log in: ``view`` reads, ``decide`` also acts, up to ``up_to`` if set."""

    name: str
    role: Role
    secret_hash: str = attrs.field(repr=False)
    up_to: Decimal | None = None

    @property
    def may_decide(self) -> bool:
        return self.role == "decide"

    def may_approve(self, amount: Decimal | None) -> bool:
        """Whether this person may let a call of ``amount`` go through (``None``: unknown)."""
        if not self.may_decide:
            return False
        if self.up_to is None:
            return True
        return amount is not None and amount <= self.up_to


@attrs.frozen
class WebhookConfig:
    """Where a run waiting for a person is announced, and the key its body is signed with."""

    url: str
    secret: bytes = attrs.field(repr=False)
    attempts: int = 5
    backoff_seconds: float = 1.0
    poll_seconds: float = 2.0


@attrs.frozen
class InboxConfig:
    """Everything the inbox reads from its file (see the module)."""

    operators: Mapping[str, Operator]
    session_key: str = attrs.field(repr=False)
    audit_log: Path
    bind: str = "127.0.0.1"
    port: int = 8765
    base_url: str = ""
    session_minutes: int = 480
    secure_cookies: bool = False
    webhook: WebhookConfig | None = None

    def check_login(self, name: str, secret: str) -> Operator | None:
        """The operator ``name`` if ``secret`` is their password or token; else ``None``."""
        operator = self.operators.get(name)
        try:
            _HASHER.verify(operator.secret_hash if operator else _DUMMY, secret)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        return operator

    def link(self, run_id: str) -> str:
        """The address of a run's page, for a notification."""
        base = self.base_url or f"http://{self.bind}:{self.port}"
        return f"{base.rstrip('/')}/runs/{run_id}"


def hash_secret(secret: str) -> str:
    """The argon2 hash of a password or token, as the configuration file holds it."""
    if len(secret) < 8:
        raise InboxConfigError("a password must be at least 8 characters long")
    return _HASHER.hash(secret)


def new_token() -> tuple[str, str]:
    """A fresh random token and its argon2 hash: give the token, keep the hash."""
    token = secrets.token_urlsafe(24)
    return token, _HASHER.hash(token)


def _table(data: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise InboxConfigError(f"{where}: [{key}] must be a table")
    return dict(value)


def _secret_from_env(table: Mapping[str, Any], where: str, *, required: bool) -> str:
    name = table.get("secret_env", "")
    if not name:
        if required:
            raise InboxConfigError(f"{where}: give secret_env, the variable holding the key")
        return ""
    value = os.environ.get(str(name), "")
    if required and len(value) < 16:
        raise InboxConfigError(
            f"{where}: the environment variable {name} must hold a key of at least 16 "
            "characters (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return value


def _operator(entry: Any, where: str) -> Operator:
    if not isinstance(entry, dict):
        raise InboxConfigError(f"{where}: each [[operators]] entry must be a table")
    fields: dict[str, Any] = dict(entry)
    name = str(fields.get("name", "")).strip()
    if not name:
        raise InboxConfigError(f"{where}: an operator has no name")
    role = fields.get("role", "view")
    if role not in ("view", "decide"):
        raise InboxConfigError(f"{where}: operator {name!r} has role {role!r}; use view or decide")
    hashes = [fields[key] for key in ("password_hash", "token_hash") if key in fields]
    if len(hashes) != 1 or not str(hashes[0]).startswith("$argon2"):
        raise InboxConfigError(
            f"{where}: operator {name!r} needs one argon2 password_hash or token_hash "
            "(statemachine inbox --hash-password, or --new-token)"
        )
    up_to = fields.get("up_to")
    limit: Decimal | None = None
    if up_to is not None:
        try:
            limit = Decimal(str(up_to))
        except InvalidOperation:
            limit = None
        if limit is None or not limit.is_finite() or limit < 0 or isinstance(up_to, float):
            raise InboxConfigError(
                f"{where}: operator {name!r} has up_to = {up_to!r}; write the amount as a "
                'string, e.g. up_to = "500.00"'
            )
        if role != "decide":
            raise InboxConfigError(f"{where}: operator {name!r} has up_to but may not decide")
    return Operator(name=name, role=role, secret_hash=str(hashes[0]), up_to=limit)


def _webhook(data: Mapping[str, Any], where: str) -> WebhookConfig | None:
    table = _table(data, "webhook", where)
    if not table:
        return None
    url = str(table.get("url", ""))
    if not url.startswith(("http://", "https://")):
        raise InboxConfigError(f"{where}: [webhook] url must be an http:// or https:// address")
    secret = _secret_from_env(table, f"{where} [webhook]", required=True)
    return WebhookConfig(
        url=url,
        secret=secret.encode(),
        attempts=int(table.get("attempts", 5)),
        backoff_seconds=float(table.get("backoff_seconds", 1.0)),
        poll_seconds=float(table.get("poll_seconds", 2.0)),
    )


def load_config(path: str | Path) -> InboxConfig:
    """Read and check the configuration file at ``path`` (:class:`InboxConfigError`)."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise InboxConfigError(f"cannot read the inbox configuration {where}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise InboxConfigError(f"{where} is not TOML: {error}") from None
    inbox = _table(data, "inbox", where)
    entries = data.get("operators", [])
    operators = [_operator(entry, where) for entry in entries] if isinstance(entries, list) else []
    if not operators:
        raise InboxConfigError(f"{where}: no [[operators]]; nobody could log in")
    names = [operator.name for operator in operators]
    if len(set(names)) != len(names):
        raise InboxConfigError(f"{where}: an operator name is given twice")
    key = _secret_from_env(inbox, f"{where} [inbox]", required=False)
    minutes = inbox.get("session_minutes", 480)
    if not isinstance(minutes, int) or minutes < 1:
        raise InboxConfigError(
            f"{where}: session_minutes must be a whole number of minutes, 1 or more"
        )
    audit = Path(str(inbox.get("audit_log", "inbox-audit.jsonl")))
    return InboxConfig(
        operators={operator.name: operator for operator in operators},
        session_key=key or secrets.token_urlsafe(32),
        audit_log=audit if audit.is_absolute() else Path(path).parent / audit,
        bind=str(inbox.get("bind", "127.0.0.1")),
        port=int(inbox.get("port", 8765)),
        base_url=str(inbox.get("base_url", "")),
        session_minutes=minutes,
        secure_cookies=bool(inbox.get("secure_cookies", False)),
        webhook=_webhook(data, where),
    )
