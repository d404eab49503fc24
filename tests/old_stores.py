"""The agent and key of the stores written by older versions (``tests/data/*.db``).

``tests/data/make_pre_chunk_runs.py`` and ``make_pre_v3_runs.py`` wrote their stores with
an agent and key defined as these (``looker``: a read tool and a write tool; each script
keeps its own copy, since it runs against the tree of its time);
``tests/test_chunks.py`` and ``tests/test_format_v3.py`` load the stores with these.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from statemachine import Agent, CheckpointCipher, Runner, SQLiteCheckpointer, read_tool, write_tool
from statemachine.persist import load_phase
from statemachine.testing import ScriptedGate, ScriptedModel, reply

DATA = Path(__file__).parent / "data"
KEY = CheckpointCipher(
    {"k-old": base64.b64decode("q1Q4QmR0c2V2Z2h0aGlzaXNhdGVzdGtleW9ubHkhISE=")}, "k-old"
)


class LookupArgs(BaseModel):
    key: str


class PayArgs(BaseModel):
    to: str
    amount: str


# What ``pay`` paid, in order (a test that resumes a run clears it first).
paid: list[str] = []


@read_tool
async def lookup(args: LookupArgs) -> dict[str, str]:
    """Look a key up."""
    return {"key": args.key, "value": f"value of {args.key}"}


@write_tool
async def pay(args: PayArgs) -> dict[str, str]:
    """Move money."""
    paid.append(args.amount)
    return {"paid": args.amount}


def looker() -> Agent[None]:
    return Agent[None](name="looker", tools=[lookup, pay], max_steps=1000)


def phase_of(document: dict[str, Any], agent: Agent[None], run_id: str) -> Any:
    return load_phase(document, agents={"looker": agent}, run_id=run_id)


def copied(name: str, folder: Path) -> Path:
    """A copy of ``tests/data/<name>`` in ``folder`` (a test never changes the original)."""
    path = folder / "runs.db"
    shutil.copy(DATA / name, path)
    return path


async def resume_waiting(path: Path) -> tuple[Any, int, dict[str, Any], int]:
    """Resume the stored run ``waiting`` (a payment waiting for approval) with a person
    approving and the model answering "Paid.": the run's result, the seq and document
    the store then loads, and the seq its verify reaches."""
    paid.clear()
    async with SQLiteCheckpointer(path) as store:
        runner = Runner(
            looker(),
            model=ScriptedModel([reply("Paid.")]),
            gate=ScriptedGate([True], by="kim"),
            checkpointer=store,
        )
        resumed = await runner.resume("waiting")
        seq, document = await store.load("waiting")
        verified = await store.verify("waiting")
    return resumed, seq, dict(document), verified


def opened_at_once(path: Path) -> list[SQLiteCheckpointer]:
    """Two stores on the file at ``path``, opened (and so upgraded) by two threads at the
    same moment; each opened without an error (the caller closes them)."""
    stores = [SQLiteCheckpointer(path), SQLiteCheckpointer(path)]
    barrier = threading.Barrier(2)
    failed: list[BaseException] = []

    def opened(store: SQLiteCheckpointer) -> None:
        barrier.wait()
        try:
            assert store._db is not None  # opens (and upgrades) the file
        except BaseException as exc:  # pragma: no cover - the failure is reported below
            failed.append(exc)

    threads = [threading.Thread(target=opened, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    return stores


def read(path: Path, sql: str, *args: Any) -> list[Any]:
    """The rows ``sql`` reads from the file at ``path``, on a connection of its own."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return db.execute(sql, args).fetchall()


async def opened_at_once_counted(path: Path) -> tuple[int, int, int]:
    """The file at ``path`` opened (and so upgraded) by two stores at once (see
    :func:`opened_at_once`), each then loading the completed run ``long`` (its seq 123)
    and closed: the checkpoint rows there were before, and those after without and with
    a head (the move's markers)."""
    ((before,),) = read(path, "SELECT count(*) FROM checkpoints")
    stores = opened_at_once(path)
    for store in stores:
        assert (await store.load("long"))[0] == 123
        await store.aclose()
    ((plain,),) = read(path, "SELECT count(*) FROM checkpoints WHERE head IS NULL")
    ((marked,),) = read(path, "SELECT count(*) FROM checkpoints WHERE head IS NOT NULL")
    return before, plain, marked
