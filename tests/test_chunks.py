"""Checkpoints written before loop memory and the conversation were kept in chunks
(issue 23) still load, and their runs resume.

``tests/data/pre-chunk-runs.db`` was written by ``tests/data/make_pre_chunk_runs.py``
from commit 63c27e5: three runs of the agent ``looker`` (a long completed one, one
waiting for an approval, one sealed under ``k-old``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from old_stores import KEY, looker, paid, phase_of, resume_waiting
from old_stores import copied as _copied

from statemachine import Done, SQLiteCheckpointer, dumps, loads
from statemachine.persist import dump_phase
from statemachine.persist._codec import DOCUMENT_VERSION

pytestmark = pytest.mark.anyio


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return _copied("pre-chunk-runs.db", tmp_path)


async def test_a_long_run_written_before_chunks_loads_whole(store_path: Path) -> None:
    agent = looker()
    async with SQLiteCheckpointer(store_path) as store:
        seq, document = await store.load("long")
    final = phase_of(document, agent, "long")
    assert isinstance(final, Done)
    assert final.answer == "Done."
    transcript = list(final.transcript)
    # The question, a call and its result per lookup, the answer.
    assert len(transcript) == 1 + 2 * 40 + 1
    assert transcript[0].role == "user"
    assert [m.tool_calls[0].arguments for m in transcript[1:-1:2]] == [
        f'{{"key":"k{n}"}}' for n in range(40)
    ]
    assert transcript[-2].role == "tool"
    assert transcript[-2].content == '{"key":"k39","value":"value of k39"}'
    assert (transcript[-1].role, transcript[-1].content) == ("assistant", "Done.")
    assert len(final.loop.actions) == 40
    assert [a.outcome for a in final.loop.actions] == ["ok"] * 40
    assert seq == 40 * 3 + 3
    # Dumped again, it is the document that was stored in today's format (version 2 on):
    # the same JSON, field by field, but for each full chunk of 32 messages or actions,
    # held as one string, their JSON text (each item as the list of its values).
    assert document["version"] == 1
    again = dump_phase(final)
    assert again["version"] == DOCUMENT_VERSION
    fields = dict(document["fields"])
    fields["transcript"] = packed(fields["transcript"])
    fields["loop"] = {**fields["loop"], "actions": packed(fields["loop"]["actions"])}
    assert dumps(again["fields"]) == dumps(fields)
    assert phase_of(loads(dumps(again)), agent, "long") == final


def packed(items: list[Any]) -> list[Any]:
    """A version 1 list as version 2 writes it: every full chunk but the last, as text."""
    full = (len(items) - 1) // 32 * 32 if items else 0
    rows = [list(item.values()) for item in items]
    return [dumps(rows[at : at + 32]) for at in range(0, full, 32)] + items[full:]


async def test_a_sealed_run_written_before_chunks_loads(store_path: Path) -> None:
    async with SQLiteCheckpointer(store_path, sealer=KEY) as store:
        _, document = await store.load("sealed")
    final = phase_of(document, looker(), "sealed")
    assert isinstance(final, Done)
    assert len(final.loop.actions) == 12
    assert len(list(final.transcript)) == 1 + 2 * 12 + 1


async def test_a_waiting_run_written_before_chunks_resumes_to_done(store_path: Path) -> None:
    resumed, _, document, _ = await resume_waiting(store_path)
    assert isinstance(resumed.final, Done)
    assert resumed.final.answer == "Paid."
    assert paid == ["10.00"]
    assert len(resumed.final.loop.actions) == 13
    # The resumed run's checkpoints load again, in today's format.
    assert document["version"] == DOCUMENT_VERSION
    again = phase_of(document, looker(), "waiting")
    assert isinstance(again, Done)
    assert len(list(again.transcript)) == 1 + 2 * 13 + 1
