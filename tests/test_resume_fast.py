"""A resume reads its run's snapshot and deltas through the load's shortcut (each blob
read by the JSON scanner directly) exactly as through the plain path (``json.loads`` of
each blob): the same document, the same resumed run, the same errors; and a run another
worker holds is still refused."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    CheckpointCipher,
    Done,
    LoopGovernor,
    ModelReply,
    ModelRequest,
    Runner,
    RunStatus,
    SQLiteCheckpointer,
    read_tool,
)
from statemachine._errors import CheckpointError, RunClaimedError
from statemachine._json import dumps
from statemachine.persist import _chain
from statemachine.persist._chain import _Chain
from statemachine.persist._crypto import generate_key
from statemachine.persist._rows import _Row
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


class KeyArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: KeyArgs) -> dict[str, Any]:
    """Look a key up."""
    return {"key": args.key, "value": 42, "unit": "widgets"}


def agent() -> Agent[None]:
    # Results alike but for their keys: no plateau ends the run early.
    return Agent[None](
        name="fast", tools=[lookup], max_steps=10**6, governor=LoopGovernor(plateau_steps=10**6)
    )


class Dying:
    """Looks ``calls`` keys up, then raises (the process died): the run is resumable."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.asked = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.asked += 1
        if self.asked > self.calls:
            raise RuntimeError("the process died here")
        return tool_call("lookup", {"key": f"k{self.asked}"}, tokens=3, cost="0.01")


def runner(store: SQLiteCheckpointer, model: Any) -> Runner[None]:
    return Runner(agent(), model=model, gate=AutoDenyGate(), checkpointer=store)


KEY = CheckpointCipher({"k1": generate_key()}, "k1")


async def built(path: Path, calls: int, sealer: CheckpointCipher | None) -> None:
    """A run of ``calls`` lookups that died in its next Planning (snapshots and deltas)."""
    async with SQLiteCheckpointer(path, snapshot_every=20, sealer=sealer) as store:
        with pytest.raises(RuntimeError, match="the process died here"):
            await runner(store, Dying(calls)).run(None, "look", run_id="r")


@pytest.fixture(params=[False, True], ids=["shortcuts", "plain"])
def plain(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Snapshots compressed from 1 KiB; ``True``: the load's plain path."""
    monkeypatch.setattr(_chain, "_COMPRESS_FROM", 1024)
    if request.param:
        the_plain_path(monkeypatch)
    return bool(request.param)


def the_plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _Chain, "decode_plain", lambda self, run_id, row: self.decode(run_id, row, checked=True)
    )


async def resumed(path: Path, sealer: CheckpointCipher | None) -> tuple[Any, dict[str, Any]]:
    async with SQLiteCheckpointer(path, snapshot_every=20, sealer=sealer) as store:
        loaded = await store.load("r")
        result = await runner(store, ScriptedModel([reply("done", tokens=1)])).resume("r")
        seq, after = await store.load("r")
        assert (await store.record("r")).status is RunStatus.COMPLETED
    # The clock's reading aside (the two resumes take their own time).
    after = {key: value for key, value in after.items() if key != "elapsed"}
    return result, {"loaded": loaded, "after": (seq, after)}


@pytest.mark.parametrize("sealer", [None, KEY], ids=["plain-store", "sealed"])
@pytest.mark.parametrize("calls", [5, 40, 130])
async def test_a_resume_through_the_shortcuts_equals_the_plain_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sealer: CheckpointCipher | None, calls: int
) -> None:
    """The same stored run resumed both ways: the same loaded document, the same phases,
    transcript, spend and loop memory, and the same checkpoints saved after it."""
    monkeypatch.setattr(_chain, "_COMPRESS_FROM", 1024)
    path = tmp_path / "runs.sqlite3"
    await built(path, calls, sealer)
    copy = tmp_path / "copy.sqlite3"
    shutil.copy(path, copy)
    fast, fast_docs = await resumed(path, sealer)
    with monkeypatch.context() as patch:
        the_plain_path(patch)
        slow, slow_docs = await resumed(copy, sealer)
    assert fast_docs == slow_docs
    assert dumps(fast_docs["loaded"][1]) == dumps(slow_docs["loaded"][1])
    assert isinstance(fast.final, Done)
    assert isinstance(slow.final, Done)
    assert fast.history == slow.history
    assert [state.kind for state in fast.states] == [state.kind for state in slow.states]
    assert list(fast.final.transcript) == list(slow.final.transcript)
    assert len(list(fast.final.transcript)) == 1 + 2 * calls + 1
    assert fast.final.spent == slow.final.spent
    assert fast.final.spent.model_calls == calls + 1
    assert fast.final.loop == slow.final.loop
    assert len(fast.final.loop.actions) == calls
    assert fast.final == slow.final


def rewrite(path: Path, seq: int, plain: bytes) -> None:
    """Checkpoint ``seq``'s blob replaced by ``plain`` under a checksum that matches it."""
    blob = hashlib.sha256(plain).digest() + plain
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE checkpoints SET blob = ? WHERE run_id = 'r' AND seq = ?", (blob, seq))


async def load_error(path: Path) -> str:
    async with SQLiteCheckpointer(path, snapshot_every=20) as store:
        try:
            await store.load("r")
        except CheckpointError as error:
            return f"{type(error).__name__}: {error}"
    raise AssertionError("the damaged run loaded")


@pytest.mark.parametrize(
    "damage",
    [b'{"kind":"delta","ops":[', b'{"kind":"full","ops":[]}', b'{"kind":"delta"} x', b"[1]"],
)
async def test_a_damaged_checkpoint_is_refused_with_the_plain_paths_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: bytes
) -> None:
    """A delta rewritten (checksum and all) fails the load with the same error both ways."""
    monkeypatch.setattr(_chain, "_COMPRESS_FROM", 1024)
    path = tmp_path / "runs.sqlite3"
    await built(path, 20, None)
    async with SQLiteCheckpointer(path) as store:
        last = (await store.record("r")).seq
    rewrite(path, last - 1, damage)
    fast = await load_error(path)
    the_plain_path(monkeypatch)
    assert fast == await load_error(path)


async def test_a_run_held_by_another_worker_is_refused_and_left_as_it_was(
    tmp_path: Path, plain: bool
) -> None:
    """The lease is still taken before anything is read: a run another worker holds is
    refused (RunClaimedError), its status and checkpoints untouched."""
    path = tmp_path / "runs.sqlite3"
    await built(path, 30, None)
    async with SQLiteCheckpointer(path, snapshot_every=20) as store:
        before = await store.history("r")
        assert await store.claim("r", "other worker", lease=timedelta(minutes=5))
        with pytest.raises(RunClaimedError):
            await runner(store, ScriptedModel([reply("done")])).resume("r")
        assert (await store.record("r")).status is RunStatus.FAILED_RESUMABLE
        assert await store.history("r") == before
        await store.release("r", "other worker")
        result = await runner(store, ScriptedModel([reply("done")])).resume("r")
        assert isinstance(result.final, Done)


PAYLOADS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)


def blobs() -> st.SearchStrategy[bytes]:
    good = st.builds(
        lambda kind, ops, pad: dumps({"kind": kind, "ops": ops}).encode() + pad,
        st.sampled_from(["delta", "full", "other"]),
        PAYLOADS,
        st.sampled_from([b"", b" ", b"\n", b"x", b"}", b",1"]),
    )
    mangled = st.builds(
        lambda text, cut, enc: text[:cut].encode(enc, "surrogatepass"),
        st.sampled_from(
            [
                '{"kind":"delta","ops":[["set",["a"],1.5]]}',
                '{"kind":"delta","ops":[NaN]}',
                '{"kind":"delta","ops":"\\ud800"}',
                '{"kind":"delta","ops":[1e400, -0.0, "\u00e9\u4e2d"]}',
                '{"kind":"delta","kind":"full","ops":[]}',
            ]
        ),
        st.integers(0, 60),
        st.sampled_from(["utf-8", "utf-16-le", "utf-32-le", "utf-8-sig"]),
    )
    return good | mangled | st.binary(max_size=24).map(lambda raw: b"{" + raw)


def outcome(function: Any) -> Any:
    try:
        return ("ok", dumps(function()))
    except Exception as error:  # compared: the same type and message
        return ("error", type(error).__name__, str(error))


@settings(max_examples=300, deadline=None)
@given(plain=blobs(), snapshot=st.booleans())
def test_a_blob_read_by_the_scanner_equals_the_plain_decode(plain: bytes, snapshot: bool) -> None:
    """Any blob: the shortcut's value or error is the plain decode's, exactly."""
    chain = _Chain(snapshot_every=50, sealer=None, clock=lambda: datetime.now(UTC), where="here")
    row = _Row(7, snapshot, "Planning", hashlib.sha256(plain).digest() + plain)
    fast = outcome(lambda: chain.decode_plain("r", row))
    assert fast == outcome(lambda: chain.decode("r", row, checked=True))
    scanned = _chain._scanned(row.blob, 32, "full" if snapshot else "delta")
    if scanned is not None:
        assert fast == ("ok", dumps(scanned))


async def test_every_blob_of_a_real_run_takes_the_scanner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortcut is the path taken: each delta (and the snapshot, when it is not
    compressed) of a run as the library writes it is read by the scanner, none refused."""
    path = tmp_path / "runs.sqlite3"
    await built(path, 30, None)
    read: list[bool] = []
    real = _chain._scanned

    def spying(blob: bytes, start: int, kind: str) -> dict[str, Any] | None:
        payload = real(blob, start, kind)
        read.append(payload is not None)
        return payload

    monkeypatch.setattr(_chain, "_scanned", spying)
    async with SQLiteCheckpointer(path, snapshot_every=20) as store:
        seq, _ = await store.load("r")
        history = await store.history("r")
    last = max(entry.seq for entry in history if entry.snapshot)
    assert len(read) == seq - last + 1
    assert all(read)
