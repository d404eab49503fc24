"""Checkpoints written in format version 2 (before version 3's shorter deltas, issue 23)
still load, and their runs resume.

``tests/data/pre-v3-runs.db`` was written by ``tests/data/make_pre_v3_runs.py`` from
commit 7b2495e: three runs of the agent ``looker`` (a long completed one, one waiting
for an approval, one sealed under ``k-old``), every document in version 2, every delta
in version 2's ops (``set`` of the kind and class, ``drop`` and ``order`` of the fields
at each phase change, ``pack`` of full chunks, settled records set field by field).

``tests/data/pre-zlib-runs.db`` was written by ``tests/data/make_pre_zlib_runs.py`` from
commit 8ca8d28, before large snapshots were stored compressed: two runs of 80 lookups
(one waiting for an approval, one sealed) whose last snapshot, over 32 KiB, is stored as
its JSON text and followed by deltas.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from old_stores import KEY, looker, paid, phase_of, resume_waiting
from old_stores import copied as _copied

from statemachine import Done, SQLiteCheckpointer, dumps, loads
from statemachine.persist import dump_phase
from statemachine.persist._chain import _COMPRESS_FROM
from statemachine.persist._codec import DOCUMENT_VERSION

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return _copied("pre-v3-runs.db", tmp_path)


async def test_a_long_version_2_run_loads_whole_and_verifies(store_path: Path) -> None:
    agent = looker()
    async with SQLiteCheckpointer(store_path) as store:
        seq, document = await store.load("long")
        assert await store.verify("long") == seq
        history = await store.history("long")
    assert [entry.seq for entry in history if entry.snapshot] == [0, 50, 100]
    final = phase_of(document, agent, "long")
    assert isinstance(final, Done)
    assert final.answer == "Done."
    transcript = list(final.transcript)
    assert len(transcript) == 1 + 2 * 40 + 1
    assert [m.tool_calls[0].arguments for m in transcript[1:-1:2]] == [
        f'{{"key":"k{n}"}}' for n in range(40)
    ]
    assert transcript[-2].content == '{"key":"k39","value":"value of k39"}'
    assert [a.outcome for a in final.loop.actions] == ["ok"] * 40
    assert seq == 40 * 3 + 3
    assert document["version"] == 2
    # Dumped again in today's format, its fields are the stored ones, and it loads equal.
    again = dump_phase(final)
    assert again["version"] == DOCUMENT_VERSION
    assert dumps(again["fields"]) == dumps(document["fields"])
    assert phase_of(loads(dumps(again)), agent, "long") == final


async def test_a_sealed_version_2_run_loads(store_path: Path) -> None:
    async with SQLiteCheckpointer(store_path, sealer=KEY) as store:
        seq, document = await store.load("sealed")
        assert await store.verify("sealed") == seq
    final = phase_of(document, looker(), "sealed")
    assert isinstance(final, Done)
    assert len(final.loop.actions) == 12
    assert len(list(final.transcript)) == 1 + 2 * 12 + 1


async def test_a_waiting_version_2_run_resumes_to_done_in_today_s_format(
    store_path: Path,
) -> None:
    resumed, seq, document, verified = await resume_waiting(store_path)
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert paid == ["10.00"]
    assert len(resumed.final.loop.actions) == 13
    assert verified == seq
    assert document["version"] == DOCUMENT_VERSION
    again = phase_of(document, looker(), "waiting")
    assert again == resumed.final
    assert len(list(again.transcript)) == 1 + 2 * 13 + 1


def _last_snapshot(path: Path, run_id: str) -> bytes:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        ((blob,),) = db.execute(
            "SELECT blob FROM checkpoints WHERE run_id = ? AND kind = 'full' "
            "ORDER BY seq DESC LIMIT 1",
            (run_id,),
        ).fetchall()
    finally:
        db.close()
    return bytes(blob)


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
async def test_a_large_snapshot_stored_uncompressed_loads_and_verifies(
    tmp_path: Path, sealed: bool
) -> None:
    path = _copied("pre-zlib-runs.db", tmp_path)
    run_id = "sealed" if sealed else "waiting"
    blob = _last_snapshot(path, run_id)
    assert len(blob) > _COMPRESS_FROM  # today's code would store it compressed
    if not sealed:
        assert blob[32:33] == b"{"
    async with SQLiteCheckpointer(path, sealer=KEY if sealed else None) as store:
        seq, document = await store.load(run_id)
        assert await store.verify(run_id) == seq
        history = await store.history(run_id)
    assert not history[-1].snapshot  # the load replayed deltas after the snapshot
    assert document["version"] == 3
    final = phase_of(document, looker(), run_id)
    assert len(final.loop.actions) == 80 + (0 if sealed else 1)
    if sealed:
        assert isinstance(final, Done)
        assert len(list(final.transcript)) == 1 + 2 * 80 + 1


async def test_a_run_with_an_uncompressed_large_snapshot_resumes_to_done(tmp_path: Path) -> None:
    resumed, seq, document, verified = await resume_waiting(_copied("pre-zlib-runs.db", tmp_path))
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert paid == ["10.00"]
    assert verified == seq
    again = phase_of(document, looker(), "waiting")
    assert again == resumed.final
    assert len(list(again.transcript)) == 1 + 2 * 81 + 1
    assert [a.outcome for a in again.loop.actions][-1] == "ok"
