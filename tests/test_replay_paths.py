"""The load's shortcuts (issue 23) read what the plain path reads.

A load from the last snapshot checks every blob's checksum once and then decodes without
checking it again; it reads each blob with one JSON decoder made once, and hashes the
chain's links with the run's part made once. Each is compared here with the plain path:
``_json.loads``, ``_link`` folded over the rows, and ``_Chain.replay`` checking every
checksum as it decodes. A snapshot of 32 KiB or more is stored compressed, and reads
back as the same snapshot stored as its text would.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    CheckpointCipher,
    CheckpointCorruptError,
    CheckpointTamperedError,
    Runner,
    SQLiteCheckpointer,
    read_tool,
)
from statemachine._json import dumps, dumps_reusing, loads
from statemachine.persist._chain import (
    _COMPRESS_FROM,
    _PIECE,
    _adler_joined,
    _Chain,
    _compressed,
    _last_link,
    _link,
    _loads,
    _text,
    _whole,
    _written,
)
from statemachine.persist._protocol import RunRecord
from statemachine.persist._rows import _DIGEST, _Row, _system_clock
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

KEY = CheckpointCipher({"k1": bytes(range(32))}, "k1")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _read(read: Any, plain: bytes) -> tuple[str, str]:
    """What ``read`` gives for ``plain``: the value (its repr, so types count) or the error."""
    try:
        return ("value", repr(read(plain)))
    except ValueError as error:
        return ("ValueError", type(error).__name__)


@settings(max_examples=300)
@given(
    value=json_values,
    ascii_only=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-16-le", "utf-32-be"]),
)
def test_the_stores_json_reader_reads_what_loads_reads(
    value: Any, ascii_only: bool, encoding: str
) -> None:
    plain = json.dumps(value, ensure_ascii=ascii_only).encode(encoding, "surrogatepass")
    assert _read(_loads, plain) == _read(loads, plain)


@settings(max_examples=300)
@given(plain=st.binary(max_size=40) | st.text(max_size=40).map(lambda text: text.encode()))
def test_the_stores_json_reader_refuses_what_loads_refuses(plain: bytes) -> None:
    assert _read(_loads, plain) == _read(loads, plain)


@pytest.mark.parametrize("plain", [b"NaN", b"[Infinity]", b'{"a": -Infinity}', b"", b"{"])
def test_the_stores_json_reader_refuses_constants_and_damage_as_loads_does(
    plain: bytes,
) -> None:
    assert _read(_loads, plain)[0] == "ValueError"
    assert _read(_loads, plain) == _read(loads, plain)


def test_the_stores_json_reader_reads_a_byte_order_mark_as_loads_does() -> None:
    plain = b"\xef\xbb\xbf" + b'{"a": 2.5}'
    assert _read(_loads, plain) == _read(loads, plain) == ("value", repr({"a": Decimal("2.5")}))


def test_the_stores_json_reader_reads_a_sealers_other_types_as_loads_does() -> None:
    assert _loads(bytearray(b'{"a": 1.5}')) == {"a": Decimal("1.5")}  # type: ignore[arg-type]


@given(
    run_id=st.text(min_size=1, max_size=12),
    rows=st.lists(st.tuples(st.booleans(), st.binary(min_size=_DIGEST + 1, max_size=40))),
    first=st.integers(min_value=0, max_value=2**40),
    before=st.binary(min_size=_DIGEST, max_size=_DIGEST + 8),
)
def test_the_last_link_is_each_rows_link_in_turn(
    run_id: str, rows: list[tuple[bool, bytes]], first: int, before: bytes
) -> None:
    chain = [_Row(first + n, snapshot, "P", blob) for n, (snapshot, blob) in enumerate(rows)]
    expected = before
    for row in chain:
        expected = _link(run_id, row.seq, row.snapshot, expected, row.blob[:_DIGEST])
    assert _last_link(run_id, chain, before) == expected


def _stored(path: Path, run_id: str) -> tuple[list[_Row], bytes]:
    """The rows from the run's last snapshot, and its head, as the store reads them."""
    db = sqlite3.connect(path)
    try:
        found = db.execute(
            "SELECT seq, kind, phase, blob FROM checkpoints WHERE run_id = ? AND seq >= "
            "(SELECT max(seq) FROM checkpoints WHERE run_id = ? AND kind = 'full') "
            "AND head IS NULL ORDER BY seq",
            (run_id, run_id),
        ).fetchall()
        # The head, held by the run's end marker (the row after its newest checkpoint).
        ((head,),) = db.execute(
            "SELECT head FROM checkpoints WHERE run_id = ? AND head IS NOT NULL", (run_id,)
        ).fetchall()
    finally:
        db.close()
    return [
        _Row(seq, kind == "full", phase, bytes(blob)) for seq, kind, phase, blob in found
    ], bytes(head)


finite_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
steps = st.lists(
    st.tuples(
        st.lists(st.text(max_size=6), max_size=3),  # appended to a list
        st.dictionaries(st.sampled_from("abcd"), finite_values, max_size=3),  # set
        st.booleans(),  # the list shifts
    ),
    min_size=1,
    max_size=25,
)


@pytest.mark.parametrize("large", [False, True], ids=["small", "compressed"])
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(changes=steps, every=st.integers(min_value=1, max_value=6))
def test_a_load_from_the_last_snapshot_builds_what_the_plain_replay_builds(
    tmp_path_factory: pytest.TempPathFactory, sealed: bool, large: bool, changes: Any, every: int
) -> None:
    import anyio

    path = tmp_path_factory.mktemp("replay") / "runs.db"
    sealer = KEY if sealed else None
    document: dict[str, Any] = {"kind": "P", "fields": {"items": [], "step": 0}}
    if large:  # every snapshot is stored compressed
        document["pad"] = [f"{n:05}" for n in range(_COMPRESS_FROM // 8)]

    async def save_and_load() -> tuple[int, Any]:
        async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=every) as store:
            for seq, (added, values, shift) in enumerate(changes):
                fields = document["fields"]
                items = fields["items"][1:] if shift else list(fields["items"])
                fields.update(values)
                fields["items"], fields["step"] = [*items, *added], seq
                await store.save(
                    "r",
                    seq,
                    json.loads(json.dumps(document)),
                    agent="a",
                    status="running",
                    phase="P",
                )
        async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=every) as store:
            return await store.load("r")

    seq, loaded = anyio.run(save_and_load)
    rows, head = _stored(path, "r")
    record = RunRecord.model_construct(seq=seq)
    chain = _Chain(snapshot_every=every, sealer=sealer, clock=_system_clock, where="test")
    fast = chain.from_snapshot("r", rows, record, head)
    plain = chain.replay("r", rows, record)[1]  # every checksum checked as it decodes
    assert fast is not None
    assert repr(fast) == repr(plain) == repr(loaded)
    assert repr(loaded) == repr(loads(dumps(document)))  # the last document saved
    if not sealed:
        assert (rows[0].blob[_DIGEST : _DIGEST + 1] == b"x") is large


@pytest.mark.anyio
async def test_a_changed_delta_after_the_snapshot_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path, snapshot_every=50) as store:
        for seq in range(6):
            document = {"kind": "P", "fields": {"step": seq, "items": list(range(seq))}}
            await store.save("r", seq, document, agent="a", status="running", phase="P")
    db = sqlite3.connect(path)
    (blob,) = db.execute("SELECT blob FROM checkpoints WHERE run_id = 'r' AND seq = 3").fetchone()
    changed = bytes(blob).replace(b'"step"', b'"stop"')
    db.execute("UPDATE checkpoints SET blob = ? WHERE run_id = 'r' AND seq = 3", (changed,))
    db.commit()
    db.close()
    async with SQLiteCheckpointer(path, snapshot_every=50) as store:
        with pytest.raises(CheckpointTamperedError, match="checkpoint 3"):
            await store.load("r")


class LookupArgs(BaseModel):
    key: str


@read_tool
async def lookup(args: LookupArgs) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key}


async def _real_run(path: Path, sealer: CheckpointCipher | None) -> list[tuple[int, bytes]]:
    """A real run of 5 lookups (18 checkpoints: a snapshot, then deltas), its rows."""
    agent = Agent[None](name="looker", tools=[lookup], max_steps=100)
    turns = [tool_call("lookup", {"key": f"k{n}"}) for n in range(5)] + [reply("done")]
    async with SQLiteCheckpointer(path, sealer=sealer) as store:
        runner = Runner(agent, model=ScriptedModel(turns), gate=AutoDenyGate(), checkpointer=store)
        assert (await runner.run(None, "go", run_id="r")).ok
    db = sqlite3.connect(path)
    try:
        rows = db.execute(  # its checkpoints, not its end marker
            "SELECT seq, blob FROM checkpoints WHERE run_id = 'r' AND head IS NULL ORDER BY seq"
        )
        return [(seq, bytes(blob)) for seq, blob in rows]
    finally:
        db.close()


def _changed(path: Path, seq: int, blob: bytes) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE checkpoints SET blob = ? WHERE run_id = 'r' AND seq = ?", (blob, seq))
    db.commit()
    db.close()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "edit",
    [(b'["phase","Observing"]', b'["phase","Retrying"]'), (b'{"step":', b'{"stop":')],
    ids=["phase", "merge"],
)
async def test_a_changed_version_3_delta_is_refused(
    tmp_path: Path, edit: tuple[bytes, bytes]
) -> None:
    """A real run's deltas change the phase with one op (format version 3): one whose
    ``phase`` op names another kind, or whose ``merge`` sets another field, is refused
    as any changed checkpoint is, by load and by verify, naming it."""
    path = tmp_path / "runs.db"
    rows = await _real_run(path, None)
    assert [seq for seq, blob in rows if b'"kind":"full"' in blob] == [0]
    ops = [op for _, blob in rows[1:] for op in json.loads(blob[_DIGEST:])["ops"]]
    assert ["phase", "ToolCalling"] in ops  # a phase change is one op, not these:
    assert not [op for op in ops if op[0] in ("drop", "order") or op[1] in (["kind"], ["class"])]
    seq, blob = next((seq, blob) for seq, blob in rows if edit[0] in blob)
    _changed(path, seq, blob.replace(edit[0], edit[1], 1))
    async with SQLiteCheckpointer(path) as store:
        with pytest.raises(CheckpointTamperedError, match=f"checkpoint {seq} "):
            await store.load("r")
        with pytest.raises(CheckpointTamperedError, match=f"checkpoint {seq} "):
            await store.verify("r")


@pytest.mark.anyio
async def test_a_changed_sealed_version_3_delta_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    rows = await _real_run(path, KEY)
    async with SQLiteCheckpointer(path, sealer=KEY) as store:
        _, document = await store.load("r")
    assert document["kind"] == "Done"
    seq, blob = rows[7]
    _changed(path, seq, blob[:-1] + bytes([blob[-1] ^ 1]))
    async with SQLiteCheckpointer(path, sealer=KEY) as store:
        with pytest.raises(CheckpointTamperedError, match=f"checkpoint {seq} "):
            await store.load("r")


def _unsealed(chain: _Chain, plain: bytes) -> tuple[str, str]:
    """What ``chain`` reads from the blob it makes of ``plain``: the value's repr, or the
    error's first words."""
    blob = chain.seal_plain(plain, b"r:0")
    try:
        return ("value", repr(chain.unseal(blob, b"r:0", "r", "checkpoint 0")))
    except CheckpointCorruptError as error:
        return ("error", error.detail.split(" (")[0])


@settings(max_examples=200)
@given(value=json_values)
def test_a_compressed_blob_reads_as_its_text_reads(value: Any) -> None:
    """What ``unseal`` gives for a compressed blob is what it gives for the text (plain
    and sealed), whatever the JSON."""
    plain = json.dumps(value).encode()
    for sealer in (None, KEY):
        chain = _Chain(snapshot_every=50, sealer=sealer, clock=_system_clock, where="test")
        assert _unsealed(chain, zlib.compress(plain, 1)) == _unsealed(chain, plain)


@settings(max_examples=300)
@given(first=st.binary(max_size=300), second=st.binary(max_size=70_000))
def test_two_adler_32_sums_joined_are_the_sum_of_the_bytes_joined(
    first: bytes, second: bytes
) -> None:
    joined = _adler_joined(zlib.adler32(first), zlib.adler32(second), len(second))
    assert joined == zlib.adler32(first + second)


long_texts = st.builds(
    lambda seed, size: (seed * (_PIECE // max(len(seed), 1) + size))[: _PIECE + size],
    st.text(min_size=1, max_size=12),
    st.integers(min_value=0, max_value=300),
)
documents = st.recursive(
    st.none() | st.integers() | st.text(max_size=8) | long_texts,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


def _parts(payload: Any, texts: Any) -> tuple[list[Any], Any]:
    parts: list[Any] = []
    kept: Any = {}
    _written(payload, texts, kept, parts)
    return parts, kept


@settings(max_examples=150, deadline=None)
@given(first=documents, second=documents)
def test_a_snapshot_compressed_by_pieces_is_its_text_compressed(first: Any, second: Any) -> None:
    """``_written`` gives ``dumps_reusing``'s text (and the same texts to reuse) with the
    long texts left as they are, and ``_compressed`` (each long text deflated once, kept
    for the next snapshot) what ``zlib.decompress`` reads back as ``_whole``'s form of
    it, which reads as that text does; the next snapshot, sharing some of the same
    objects, too."""
    payload = {"kind": "full", "document": {"a": [first], "b": first, "c": [[first]]}}
    text, texts = dumps_reusing(payload, {})
    parts, kept = _parts(payload, {})
    assert _text(parts) == text
    assert {key: value[1] for key, value in kept.items()} == {
        key: value[1] for key, value in texts.items()
    }
    blob, pieces = _compressed(payload, parts, {})
    assert zlib.decompress(blob) == zlib.decompress(_whole(payload, parts))
    assert _read_back(blob) == _read_back(zlib.compress(text.encode(), 1))
    # The next snapshot holds the same objects (their texts and pieces reused) and others.
    payload = {"kind": "full", "document": {"a": [first, second], "b": [second, first]}}
    text, again_texts = dumps_reusing(payload, texts)
    parts, kept = _parts(payload, kept)
    assert _text(parts) == text
    assert kept.keys() == again_texts.keys()
    again, _ = _compressed(payload, parts, pieces)
    assert zlib.decompress(again) == zlib.decompress(_whole(payload, parts))
    assert _read_back(again) == _read_back(zlib.compress(text.encode(), 1))
    assert again == _compressed(payload, parts, {})[0]


def _read_back(plain: bytes) -> str:
    """The JSON of what ``unseal`` reads from a compressed blob (keys in their order)."""
    chain = _Chain(snapshot_every=50, sealer=None, clock=_system_clock, where="test")
    return dumps(chain.unseal(chain.seal_plain(plain, b"r:0"), b"r:0", "r", "checkpoint 0"))


async def _large_run(path: Path, sealer: CheckpointCipher | None) -> list[tuple[int, bytes]]:
    """A run whose snapshot (seq 0) is stored compressed, then 4 deltas; its rows."""
    async with SQLiteCheckpointer(path, sealer=sealer) as store:
        for seq in range(5):
            document = {"kind": "P", "pad": "ab" * _COMPRESS_FROM, "step": seq}
            await store.save("r", seq, document, agent="a", status="running", phase="P")
    db = sqlite3.connect(path)
    try:
        rows = db.execute(  # its checkpoints, not its end marker
            "SELECT seq, blob FROM checkpoints WHERE run_id = 'r' AND head IS NULL ORDER BY seq"
        )
        return [(seq, bytes(blob)) for seq, blob in rows]
    finally:
        db.close()


@pytest.mark.anyio
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_a_changed_compressed_snapshot_is_refused(tmp_path: Path, sealed: bool) -> None:
    path = tmp_path / "runs.db"
    sealer = KEY if sealed else None
    rows = await _large_run(path, sealer)
    seq, blob = rows[0]
    if sealed:  # a sealed store never compresses (test below)
        assert len(blob) > 2 * _COMPRESS_FROM
    else:
        assert len(blob) < _COMPRESS_FROM  # stored compressed
        assert blob[_DIGEST : _DIGEST + 1] == b"x"
    middle = len(blob) // 2
    _changed(path, seq, blob[:middle] + bytes([blob[middle] ^ 1]) + blob[middle + 1 :])
    async with SQLiteCheckpointer(path, sealer=sealer) as store:
        with pytest.raises(CheckpointTamperedError, match="checkpoint 0 "):
            await store.load("r")
        with pytest.raises(CheckpointTamperedError, match="checkpoint 0 "):
            await store.verify("r")


@pytest.mark.anyio
async def test_a_sealed_store_never_compresses_a_snapshot(tmp_path: Path) -> None:
    """Compressed, then encrypted, a blob's length would tell how much of its text
    repeats other text (CRIME, BREACH): with a sealer a large snapshot is sealed as its
    JSON text, and its stored length follows the text's."""
    path = tmp_path / "runs.db"
    rows = await _large_run(path, KEY)
    seq, blob = rows[0]
    plain = KEY.open(blob[_DIGEST:], aad=f"r:{seq}".encode(), run_id="r")
    assert plain[:1] == b"{"
    assert len(plain) > 2 * _COMPRESS_FROM
    assert len(blob) > len(plain)
    async with SQLiteCheckpointer(path, sealer=KEY) as store:
        assert (await store.load("r"))[1]["step"] == 4


@pytest.mark.anyio
async def test_a_snapshot_that_does_not_decompress_is_refused_though_its_chain_holds(
    tmp_path: Path,
) -> None:
    """Without a sealer a forger can recompute every checksum and link (see
    ``tests/test_chain.py``): a snapshot that starts as compressed data does but is not
    is still refused, as corrupt, naming it."""
    path = tmp_path / "runs.db"
    rows = await _large_run(path, None)
    body = b"x" + bytes(range(200))
    rows[0] = (0, hashlib.sha256(body).digest() + body)
    link = bytes(_DIGEST)
    db = sqlite3.connect(path)
    for seq, blob in rows:
        db.execute("UPDATE checkpoints SET blob = ? WHERE run_id = 'r' AND seq = ?", (blob, seq))
        link = _link("r", seq, seq == 0, link, blob[:_DIGEST])
    db.execute("UPDATE checkpoints SET head = ? WHERE run_id = 'r' AND head IS NOT NULL", (link,))
    db.commit()
    db.close()
    async with SQLiteCheckpointer(path) as store:
        with pytest.raises(CheckpointCorruptError, match="checkpoint 0 cannot be decompressed"):
            await store.load("r")


class PageArgs(BaseModel):
    page: int


@read_tool
async def read_page(args: PageArgs) -> dict[str, str]:
    """Read a page."""
    return {"page": f"page {args.page}: " + "lorem ipsum dolor " * (20 + args.page % 7)}


@pytest.mark.anyio
@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_a_real_run_s_compressed_snapshots_load_as_its_last_phase(
    tmp_path: Path, sealed: bool
) -> None:
    """A real run whose snapshots grow past 32 KiB: they are stored compressed, their
    chunks compressed once and reused (``_compressed``), and a load - from the last
    snapshot, and by the full check's replay - gives the last phase's document."""
    from statemachine.persist import dump_phase

    path = tmp_path / "runs.db"
    sealer = KEY if sealed else None
    agent = Agent[None](name="reader", tools=[read_page], max_steps=1000)
    turns = [tool_call("read_page", {"page": n}) for n in range(90)] + [reply("done")]
    async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=10) as store:
        runner = Runner(agent, model=ScriptedModel(turns), gate=AutoDenyGate(), checkpointer=store)
        result = await runner.run(None, "go", run_id="r")
        assert result.ok
        history = await store.history("r")
    snapshots = [entry for entry in history if entry.snapshot]
    if not sealed:
        assert len([entry for entry in snapshots if entry.size < 20_000]) >= 3
    else:  # stored as text: as large as the state, so fewer of them
        assert all(entry.size > 0 for entry in snapshots)
        assert max(entry.size for entry in snapshots) > _COMPRESS_FROM
    db = sqlite3.connect(path)
    try:
        blobs = [
            bytes(blob)
            for (blob,) in db.execute(
                "SELECT blob FROM checkpoints WHERE run_id = 'r' AND kind = 'full' ORDER BY seq"
            )
        ]
    finally:
        db.close()
    if not sealed:
        assert [blob[_DIGEST : _DIGEST + 1] for blob in blobs][-3:] == [b"x"] * 3
    else:
        opened = [
            KEY.open(blob[_DIGEST:], aad=f"r:{entry.seq}".encode(), run_id="r")
            for blob, entry in zip(blobs, snapshots, strict=True)
        ]
        assert [plain[:1] for plain in opened] == [b"{"] * len(opened)
    async with SQLiteCheckpointer(path, sealer=sealer, snapshot_every=10) as store:
        seq, loaded = await store.load("r")
        assert await store.verify("r") == seq
    rows, _ = _stored(path, "r")
    chain = _Chain(snapshot_every=10, sealer=sealer, clock=_system_clock, where="test")
    record = RunRecord.model_construct(seq=seq)
    assert repr(chain.replay("r", rows, record)[1]) == repr(loaded)
    expected = loads(dumps(dump_phase(result.final)))
    assert repr({key: loaded[key] for key in expected}) == repr(expected)
