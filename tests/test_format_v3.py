"""Checkpoints written in format version 2 (before version 3's shorter deltas, issue 23)
still load, and their runs resume.

``tests/data/pre-v3-runs.db`` was written by ``tests/data/make_pre_v3_runs.py`` from
commit 7b2495e: three runs of the agent ``looker`` (a long completed one, one waiting
for an approval, one sealed under ``k-old``), every document in version 2, every delta
in version 2's ops (``set`` of the kind and class, ``drop`` and ``order`` of the fields
at each phase change, ``pack`` of full chunks, settled records set field by field).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from old_stores import KEY, looker, paid, phase_of, resume_waiting
from old_stores import copied as _copied

from statemachine import Done, SQLiteCheckpointer, dumps, loads
from statemachine.persist import dump_phase
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
