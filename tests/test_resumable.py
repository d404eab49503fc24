"""A durable run is resumable by any process, or refused up front; a new run holds a lease.

Issue 18: a context class defined in the script being run (``__main__``) or inside a
function is refused before anything is saved, with what to do; a run saved before that
rule by a script is refused on resume with a message that says why. A new run driven on
a store holds a lease from its first checkpoint to its end, as a resumed run does.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from statemachine import (
    Agent,
    Checkpointer,
    CheckpointMismatchError,
    Done,
    RunClaimedError,
    Runner,
    SetupError,
    SQLiteCheckpointer,
)
from statemachine.testing import AutoDenyGate, FunctionModel, ScriptedModel, reply

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]


class Ctx(BaseModel):
    customer: str


def runner(store: Checkpointer | None, agent: Agent[Ctx] | None = None) -> Runner[Ctx]:
    return Runner(
        agent or Agent[Ctx](name="shop"),
        model=ScriptedModel([reply("Hello.")]),
        gate=AutoDenyGate(),
        checkpointer=store,
    )


SCRIPT = textwrap.dedent(
    """
    import sys
    import anyio
    from pydantic import BaseModel
    from statemachine import Agent, Runner, SQLiteCheckpointer
    from statemachine.testing import AutoDenyGate, ScriptedModel, reply

    class Ctx(BaseModel):
        customer: str

    async def main() -> None:
        async with SQLiteCheckpointer(sys.argv[1]) as store:
            runner = Runner(
                Agent[Ctx](name="shop"), model=ScriptedModel([reply("Hi.")]),
                gate=AutoDenyGate(), checkpointer=store,
            )
            await runner.run(Ctx(customer="ada"), "hello", run_id="r1")

    anyio.run(main)
    """
)


def test_a_context_defined_in_the_script_is_refused_before_anything_is_saved(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    store = tmp_path / "runs.db"
    done = subprocess.run(
        [sys.executable, str(script), str(store)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert (
        "SetupError: the context class Ctx is defined in the script being run (module "
        "__main__), so another process (a worker, or `runs resume`) could not import it by "
        "name to resume this run; nothing was saved. Define the context class at module "
        "level in a module of its own"
    ) in done.stderr
    assert not store.exists() or no_runs_in(store)


def no_runs_in(path: Path) -> bool:
    import sqlite3

    with closing(sqlite3.connect(path)) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        return "runs" not in tables or db.execute("SELECT count(*) FROM runs").fetchone() == (0,)


async def test_a_context_defined_in_a_function_is_refused_on_a_store(tmp_path: Path) -> None:
    class Local(BaseModel):
        customer: str

    agent = Agent[Local](name="shop")
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        local = Runner(
            agent, model=ScriptedModel([reply("x")]), gate=AutoDenyGate(), checkpointer=store
        )
        with pytest.raises(SetupError, match=r"is defined inside a function \(test_resumable:"):
            await local.run(Local(customer="ada"), "hello", run_id="r1")
        with pytest.raises(SetupError, match="is defined inside a function"):
            await local.submit(Local(customer="ada"), "hello", run_id="r2")
        assert await store.registry() == []


async def test_a_run_saved_by_a_script_says_why_another_process_cannot_resume_it(
    tmp_path: Path,
) -> None:
    """A store written before the rule: its context class is ``__main__:Ctx``."""
    path = tmp_path / "runs.db"
    async with SQLiteCheckpointer(path) as store:
        await runner(store).submit(Ctx(customer="ada"), "hello", run_id="r1")
        _, document = await store.load("r1")
    assert "test_resumable:Ctx" in str(document)
    import sqlite3

    with sqlite3.connect(path, isolation_level=None) as db:
        for seq, blob in db.execute(
            "SELECT seq, blob FROM checkpoints WHERE run_id = 'r1' AND head IS NULL"
        ).fetchall():
            body = bytes(blob)[32:].replace(b"test_resumable:Ctx", b"__main__:Ctx")
            import hashlib

            db.execute(
                "UPDATE checkpoints SET blob = ? WHERE run_id = 'r1' AND seq = ?",
                (hashlib.sha256(body).digest() + body, seq),
            )
        rows = db.execute(
            "SELECT seq, kind, blob FROM checkpoints WHERE run_id = 'r1' AND head IS NULL "
            "ORDER BY seq"
        ).fetchall()
        from statemachine.persist._chain import _link

        link = bytes(32)
        for seq, kind, blob in rows:
            link = _link("r1", seq, kind == "full", link, bytes(blob)[:32])
        db.execute(  # the head, in the run's end marker
            "UPDATE checkpoints SET head = ? WHERE run_id = 'r1' AND head IS NOT NULL", (link,)
        )
    db.close()
    async with SQLiteCheckpointer(path) as store:
        with pytest.raises(
            CheckpointMismatchError,
            match=r"the context class __main__:Ctx was defined in the script that started the "
            r"run \(module __main__\), which this process is not; only that script can resume it",
        ):
            await runner(store).resume("r1")


async def test_a_new_run_on_a_store_holds_a_lease_until_it_ends(tmp_path: Path) -> None:
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        seen: list[bool] = []

        async def answer(request: object) -> object:
            # While the run is driven here, no one else (a worker) can claim it.
            seen.append(await store.claim("r1", "a-worker"))
            return reply("Hello.")

        agent = Agent[Ctx](name="shop")
        driving = Runner(
            agent, model=FunctionModel(answer), gate=AutoDenyGate(), checkpointer=store
        )
        result = await driving.run(Ctx(customer="ada"), "hello", run_id="r1")
        assert isinstance(result.final, Done)
        assert seen == [False]
        [lease] = await store.leases("r1")
        assert lease.released_at is not None  # given back at the end
        assert await store.claim("r1", "a-worker")  # free again


async def test_a_new_run_whose_id_another_holds_is_refused(tmp_path: Path) -> None:
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        assert await store.claim("r1", "a-worker")
        with pytest.raises(RunClaimedError):
            await runner(store).run(Ctx(customer="ada"), "hello", run_id="r1")
        assert await store.registry() == []


async def test_two_runners_starting_the_same_new_run_at_once_run_it_once(tmp_path: Path) -> None:
    async with SQLiteCheckpointer(tmp_path / "runs.db") as store:
        outcomes: list[str] = []

        async def start() -> None:
            try:
                await runner(store).run(Ctx(customer="ada"), "hello", run_id="r1")
                outcomes.append("ran")
            except Exception as error:  # the other one holds it, or saved seq 0 first
                outcomes.append(type(error).__name__)

        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(start)
        assert outcomes.count("ran") == 1, outcomes
