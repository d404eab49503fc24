"""The webhook: a JSON POST, signed with HMAC, for each run that starts waiting for a person.

The notifier lives beside the inbox and reads the store's registry every
``poll_seconds``; the runner knows nothing of it. A run that parks (for an approval,
an uncertain effect, a hold) is announced once per checkpoint it waits at (its
``event`` is ``run_id:seq``, which a receiver can use to drop a repeat). So it can
neither slow nor fail a run: it is another task, usually another process, and a
receiver that is slow, failing or down only delays its own deliveries. Each
delivery is retried with exponential back-off (``backoff_seconds`` doubled after
each try, ``attempts`` tries in all), on a connection error or any status but 2xx.

The signature is ``X-Statemachine-Signature: t=<unix time>,v1=<hex>``, where
``hex`` is HMAC-SHA256 with the shared key over ``<unix time>.<body>``: a receiver
recomputes it, compares in constant time, and refuses an old ``t`` (a replay).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any, Final

import anyio
import httpx
import structlog

from .. import Checkpointer, CheckpointError, RunRecord
from ..cli._show import fields, pending
from ._config import WebhookConfig
from ._reading import NEEDS_A_PERSON, uncertain_effect

__all__ = ["SIGNATURE_HEADER", "WaitingNotifier", "sign", "verify"]

SIGNATURE_HEADER: Final = "X-Statemachine-Signature"
_TIMEOUT: Final = 10.0  # seconds per delivery attempt


def sign(secret: bytes, body: bytes, *, at: int | None = None) -> str:
    """The signature header's value for ``body`` sent at ``at`` (now by default)."""
    stamp = int(time.time()) if at is None else at
    digest = hmac.new(secret, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


def verify(secret: bytes, body: bytes, header: str, *, tolerance: float = 300) -> bool:
    """Whether ``header`` signs ``body`` with ``secret``, made at most ``tolerance`` s ago."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        stamp = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs(time.time() - stamp) > tolerance:
        return False
    expected = sign(secret, body, at=stamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))


def _log() -> Any:
    return structlog.get_logger("statemachine.inbox")


class WaitingNotifier:
    """Announces runs that start waiting for a person to the configured webhook."""

    def __init__(
        self,
        store: Checkpointer,
        webhook: WebhookConfig,
        *,
        link: Callable[[str], str],
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.store = store
        self._sleep = sleep  # the back-off between two tries
        self.webhook = webhook
        self.link = link
        self._transport = transport
        self._announced: set[str] = set()
        self.delivered: list[str] = []  # events delivered, in order (for a look from tests)
        self.failed: list[str] = []  # events given up after every attempt
        self.tries: list[str] = []  # the event of each attempt, in order

    async def run(self) -> None:
        """Poll the store and announce new waits until cancelled."""
        async with (
            httpx.AsyncClient(timeout=_TIMEOUT, transport=self._transport) as client,
            anyio.create_task_group() as deliveries,
        ):
            while True:
                try:
                    for event, body in await self.new_events():
                        deliveries.start_soon(self._deliver, client, event, body)
                except Exception as error:  # a store that cannot be read now: try later
                    # (an announcement not sent yet is sent at the next poll that reads it)
                    _log().warning("inbox webhook: store not read", error=repr(error))
                await anyio.sleep(self.webhook.poll_seconds)

    async def new_events(self) -> list[tuple[str, bytes]]:
        """The runs waiting for a person that were not announced yet: (event, JSON body)."""
        records = await self.store.registry(status=list(NEEDS_A_PERSON))
        waiting = {f"{record.run_id}:{record.seq}": record for record in records}
        # Only waits still going on are remembered: the set does not grow with the runs.
        self._announced &= set(waiting)
        found: list[tuple[str, bytes]] = []
        for event, record in waiting.items():
            if record.decision_pending or event in self._announced:
                continue
            self._announced.add(event)
            found.append((event, await self._body(record, event)))
        return found

    async def _body(self, record: RunRecord, event: str) -> bytes:
        tool, amount = "", None
        effect = uncertain_effect(record)
        if effect is not None:
            tool = effect[0]
        else:
            try:
                _, document = await self.store.load(record.run_id)
            except CheckpointError:
                document = {}
            call = pending(str(document.get("kind", "")), fields(document))
            if call is not None:
                tool, amount = str(call["tool"]), call["amount"]
        payload: dict[str, Any] = {
            "event": event,
            "run_id": record.run_id,
            "agent": record.agent,
            "status": record.status.value,
            "waiting_for": record.reason or record.waiting_for,
            "tool": tool,
            # A string, as money is exact: a float would round it.
            "amount": str(amount) if isinstance(amount, Decimal) else None,
            "link": self.link(record.run_id),
        }
        return json.dumps(payload, sort_keys=True).encode()

    async def _deliver(self, client: httpx.AsyncClient, event: str, body: bytes) -> None:
        delay = self.webhook.backoff_seconds
        for attempt in range(1, self.webhook.attempts + 1):
            headers = {
                "content-type": "application/json",
                SIGNATURE_HEADER: sign(self.webhook.secret, body),
                "X-Statemachine-Event": event,
            }
            self.tries.append(event)
            try:
                response = await client.post(self.webhook.url, content=body, headers=headers)
                if response.is_success:
                    self.delivered.append(event)
                    return
                said = f"status {response.status_code}"
            except httpx.HTTPError as error:
                said = repr(error)
            _log().warning("inbox webhook: not delivered", run=event, attempt=attempt, said=said)
            if attempt < self.webhook.attempts:
                await self._sleep(delay)
                delay *= 2
        self.failed.append(event)
