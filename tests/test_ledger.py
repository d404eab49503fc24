"""The side-effect ledger: a write call's intent before it runs, its result after it."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import exactly

from statemachine import (
    Agent,
    CheckpointCipher,
    Checkpointer,
    CheckpointError,
    Done,
    EffectUncertainError,
    Money,
    Runner,
    RunStatus,
    SQLiteCheckpointer,
    current_idempotency_key,
    generate_key,
    idempotency_key,
    write_tool,
)
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class ChargeArgs(BaseModel):
    card: str
    amount: Money


class ProcessDied(BaseException):
    """The process stops dead: nothing in the library catches it or marks the run."""


class PaymentsService:
    """A payments provider that honours idempotency keys: one charge per key."""

    def __init__(self) -> None:
        self.charges: list[tuple[str, Decimal]] = []
        self.receipts: dict[str, dict[str, Any]] = {}

    def charge(self, key: str, amount: Decimal) -> dict[str, Any]:
        if key not in self.receipts:
            self.charges.append((key, amount))
            self.receipts[key] = {"receipt": f"r-{len(self.charges)}", "amount": amount}
        return self.receipts[key]


class Checkout:
    """A ``charge`` write tool over a payments service; it can die before or after charging."""

    def __init__(self, *, idempotent: bool) -> None:
        self.service = PaymentsService()
        self.keys_seen: list[str | None] = []  # current_idempotency_key() at each real call
        self.die: str = ""  # "before" or "after" the charge, on the next call only

        @write_tool(idempotent=idempotent)
        async def charge(args: ChargeArgs) -> dict[str, Any]:
            self.keys_seen.append(current_idempotency_key())
            die, self.die = self.die, ""
            if die == "before":
                raise ProcessDied
            receipt = self.service.charge(current_idempotency_key() or "", args.amount)
            if die == "after":
                raise ProcessDied
            return receipt

        self.charge = charge

    def agent(self) -> Agent[None]:
        return Agent[None](name="checkout", tools=(self.charge,))

    def key(self, run_id: str) -> str:
        args_hash = self.charge.call(ARGS).args_hash
        return idempotency_key(run_id, "charge", args_hash)


ARGS = {"card": "c-1", "amount": Decimal("800.00")}
CHARGE = tool_call("charge", ARGS)
ANSWER = reply("Charged $800.00.")


def runner(checkout: Checkout, model: Any, store: Any) -> Runner[None]:
    """A runner that saves every phase to ``store`` and approves every write call."""
    return Runner(checkout.agent(), model=model, gate=AutoApproveGate(), checkpointer=store)


class FailsToSaveObserving:
    """The store, except that saving an Observing phase fails once: a crash after the call."""

    def __init__(self, store: Checkpointer) -> None:
        self.store = store
        self.failed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def save(self, run_id: str, seq: int, document: Mapping[str, Any], **row: Any) -> Any:
        if row["phase"] == "Observing" and not self.failed:
            self.failed = True
            raise RuntimeError("the disk filled up")
        return await self.store.save(run_id, seq, document, **row)


async def test_an_intent_and_its_result_round_trip_with_money_exact(store: Checkpointer) -> None:
    """Intent, then result: recorded once, committed, Decimal amounts exactly as given."""
    assert await store.effect("k") is None
    intent = await store.record_intent("k", run_id="run-1", tool="charge", args_hash="h")
    assert (intent.status, intent.result, intent.run_id, intent.tool) == (
        "intent",
        None,
        "run-1",
        "charge",
    )
    assert await store.record_intent("k", run_id="run-1", tool="charge", args_hash="h") == intent
    result = {"receipt": "r-1", "amount": Decimal("800.00"), "fee": Decimal("0.1"), "n": 2}
    committed = await store.record_result("k", result)
    assert committed.status == "committed"
    assert committed.result == result
    assert str(committed.result["amount"]) == "800.00"
    assert type(committed.result["n"]) is int
    assert await store.effect("k") == committed
    # Recording again changes nothing: the first result is what happened.
    assert await store.record_result("k", {"receipt": "r-2"}) == committed
    assert await store.record_intent("k", run_id="run-1", tool="charge", args_hash="h") == committed


async def test_a_result_needs_its_intent_and_a_committed_effect_cannot_be_discarded(
    store: Checkpointer,
) -> None:
    """The ledger refuses a result out of order, and never forgets an effect that happened."""
    with pytest.raises(CheckpointError, match="effect 'k' has no recorded intent"):
        await store.record_result("k", {"receipt": "r-1"})
    await store.record_intent("k", run_id="run-1", tool="charge", args_hash="h")
    await store.record_result("k", {"receipt": "r-1"})
    with pytest.raises(CheckpointError, match="is committed: it went through"):
        await store.discard_intent("k")
    assert (await store.effect("k")) is not None


async def test_the_sqlite_ledger_survives_reopening_and_seals_its_results(tmp_path: Path) -> None:
    """A committed effect is on disk when the store is reopened, and sealed at rest."""
    path = tmp_path / "runs.sqlite3"
    cipher = CheckpointCipher({"k1": generate_key()}, "k1")
    async with SQLiteCheckpointer(path, sealer=cipher) as first:
        await first.record_intent("k", run_id="run-1", tool="charge", args_hash="h")
        await first.record_result("k", {"card": "4242-secret", "amount": Decimal("800.00")})
    with closing(sqlite3.connect(path)) as raw:
        (blob,) = raw.execute("SELECT result FROM effects WHERE key = 'k'").fetchone()
    assert b"4242-secret" not in bytes(blob)
    async with SQLiteCheckpointer(path, sealer=cipher) as second:
        effect = await second.effect("k")
    assert effect is not None
    assert effect.result == {"card": "4242-secret", "amount": Decimal("800.00")}


async def test_a_committed_effect_is_replayed_and_never_charged_twice(store: Checkpointer) -> None:
    """Crash after the charge, before Observing was saved: resume uses the recorded receipt."""
    checkout = Checkout(idempotent=False)
    crashing = FailsToSaveObserving(store)
    with pytest.raises(RuntimeError, match="the disk filled up"):
        await runner(checkout, ScriptedModel([CHARGE, ANSWER]), crashing).run(
            None, "Charge my card.", run_id="run-1"
        )
    record = await store.record("run-1")
    assert (record.status, record.phase) == (RunStatus.FAILED_RESUMABLE, "ToolCalling")
    key = checkout.key("run-1")
    effect = await store.effect(key)
    assert effect is not None
    assert effect.status == "committed"

    result = await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-1")
    assert isinstance(result.final, Done)
    assert checkout.keys_seen == [key]  # the tool ran once, before the crash
    assert checkout.service.charges == [(key, Decimal("800.00"))]
    observed = [m for m in result.final.transcript if m.role == "tool"]
    assert [m.content for m in observed] == ['{"receipt":"r-1","amount":800.00}']
    # Counted once: the checkpoint it resumed from was saved before the call was counted.
    assert result.final.spent.tool_calls == 1


async def test_an_uncertain_write_stops_the_run_for_a_person(store: Checkpointer) -> None:
    """Intent without result, tool not idempotent: interrupted, the effect named, no new call."""
    checkout = Checkout(idempotent=False)
    checkout.die = "after"
    with pytest.raises(ProcessDied):
        await runner(checkout, ScriptedModel([CHARGE]), store).run(
            None, "Charge my card.", run_id="run-2"
        )
    key = checkout.key("run-2")
    message = (
        f"run 'run-2' stopped while charge was running (idempotency key {key}); it may or "
        "may not have gone through, and charge is not idempotent, so it is not sent again. "
        "A person must check with its service whether it went through: if it did, record "
        "its result (checkpointer.record_result(key, result)); if not, discard the intent "
        "(checkpointer.discard_intent(key)). Then resume the run."
    )
    for _ in range(2):  # however often it is resumed, it does not call again on its own
        with pytest.raises(EffectUncertainError, match=exactly(message)) as raised:
            await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-2")
        error = raised.value
        assert (error.run_id, error.tool, error.key) == ("run-2", "charge", key)
        record = await store.record("run-2")
        assert record.status == RunStatus.INTERRUPTED
        assert record.waiting_for == (
            f"a person to check whether charge went through (effect {key})"
        )
        assert [r.run_id for r in await store.needing_attention()] == ["run-2"]
    assert len(checkout.keys_seen) == 1
    assert len(checkout.service.charges) == 1

    # The person finds the charge at the provider and records its receipt.
    await store.record_result(key, checkout.service.receipts[key])
    result = await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-2")
    assert isinstance(result.final, Done)
    assert len(checkout.keys_seen) == 1
    assert len(checkout.service.charges) == 1


async def test_an_intent_a_person_discards_is_sent_again(store: Checkpointer) -> None:
    """The person found no charge: the intent is discarded and resume charges once."""
    checkout = Checkout(idempotent=False)
    checkout.die = "before"
    with pytest.raises(ProcessDied):
        await runner(checkout, ScriptedModel([CHARGE]), store).run(
            None, "Charge my card.", run_id="run-3"
        )
    with pytest.raises(EffectUncertainError):
        await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-3")
    key = checkout.key("run-3")
    await store.discard_intent(key)
    result = await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-3")
    assert isinstance(result.final, Done)
    assert checkout.keys_seen == [key, key]
    assert checkout.service.charges == [(key, Decimal("800.00"))]
    effect = await store.effect(key)
    assert effect is not None
    assert effect.status == "committed"


async def test_an_idempotent_write_is_resent_with_the_same_key_and_charged_once(
    store: Checkpointer,
) -> None:
    """Intent without result, idempotent tool: sent again with its key; the service dedupes."""
    checkout = Checkout(idempotent=True)
    checkout.die = "after"
    with pytest.raises(ProcessDied):
        await runner(checkout, ScriptedModel([CHARGE]), store).run(
            None, "Charge my card.", run_id="run-4"
        )
    result = await runner(checkout, ScriptedModel([ANSWER]), store).resume("run-4")
    assert isinstance(result.final, Done)
    key = checkout.key("run-4")
    assert checkout.keys_seen == [key, key]
    assert checkout.service.charges == [(key, Decimal("800.00"))]
    effect = await store.effect(key)
    assert effect is not None
    assert (effect.key, effect.status, effect.result) == (
        key,
        "committed",
        {"receipt": "r-1", "amount": Decimal("800.00")},
    )


async def test_the_key_a_tool_sees_is_the_ledger_key_and_only_inside_the_call(
    store: Checkpointer,
) -> None:
    """current_idempotency_key() is the ledger's key in the tool, None outside it."""
    checkout = Checkout(idempotent=False)
    result = await runner(checkout, ScriptedModel([CHARGE, ANSWER]), store).run(
        None, "Charge my card.", run_id="run-5"
    )
    assert result.ok
    key = checkout.key("run-5")
    assert checkout.keys_seen == [key]
    effect = await store.effect(key)
    assert effect is not None
    assert (effect.key, effect.tool) == (key, "charge")
    assert current_idempotency_key() is None


async def test_without_a_checkpointer_a_write_still_gets_its_key() -> None:
    """No ledger: nothing is recorded, but the service still gets a key to dedupe retries."""
    checkout = Checkout(idempotent=False)
    plain = Runner(checkout.agent(), model=ScriptedModel([CHARGE, ANSWER]), gate=AutoApproveGate())
    result = await plain.run(None, "Charge my card.", run_id="run-6")
    assert result.ok
    assert checkout.keys_seen == [checkout.key("run-6")]


def test_the_idempotency_key_is_the_hash_of_run_tool_and_arguments() -> None:
    """Same run, tool and canonical arguments: same key; any of the three differs: another."""
    key = idempotency_key("run-1", "charge", "h")
    assert len(key) == 64
    assert int(key, 16) >= 0
    assert key == idempotency_key("run-1", "charge", "h")
    others = {
        idempotency_key("run-2", "charge", "h"),
        idempotency_key("run-1", "refund", "h"),
        idempotency_key("run-1", "charge", "h2"),
        idempotency_key("run-1", "charge:h", ""),
    }
    assert key not in others
    assert len(others) == 4
