"""One process of the git agent's crash test (tests/test_mcp_stdio.py): killed after the commit.

``python tests/mcp_crash_run.py start DIR REPO PIDFILE`` runs a durable run (checkpoints in
``DIR/runs.sqlite3``) on mcp-server-git over stdio: stage, commit (a person approves),
answer. This process kills itself with SIGKILL right after the commit's result reached the
side-effect ledger, before the checkpoint after the call is saved: the commit is made,
the run's last checkpoint is still the approved ``ToolCalling``.

``python tests/mcp_crash_run.py resume DIR REPO PIDFILE`` is a new process: it starts the
server again, resumes the run, and prints one JSON line (the phase it resumed from, what
the ledger held for the commit, the final phase, how many times it connected).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
from mcp_support import git_tools

from statemachine import (
    Agent,
    Approve,
    ModelReply,
    ModelRequest,
    RunClaimedError,
    Runner,
    SQLiteCheckpointer,
    load_phase,
)
from statemachine.testing import FunctionModel, reply, tool_call

RUN_ID = "git-crash"
LEASE = timedelta(seconds=1)


class DyingStore(SQLiteCheckpointer):
    """The SQLite store; the process dies right after the commit's result is recorded."""

    tools: dict[str, str] = {}  # noqa: RUF012 - one process, one store

    async def record_intent(self, key: str, *, run_id: str, tool: str, args_hash: str) -> Any:
        self.tools[key] = tool
        return await super().record_intent(key, run_id=run_id, tool=tool, args_hash=args_hash)

    async def record_result(self, key: str, result: Any) -> Any:
        recorded = await super().record_result(key, result)
        if self.tools.get(key) == "git_commit":
            (Path(self.path).parent / "commit.key").write_text(key)
            os.kill(os.getpid(), signal.SIGKILL)
        return recorded


class Approves:
    """A person who approves every call."""

    async def decide(self, request: Any) -> Approve:
        return Approve(by="ana@example.com")


def model(repo: Path) -> FunctionModel:
    def decide(request: ModelRequest) -> ModelReply:
        said = [m.name for m in request.messages if m.role == "tool"]
        if "git_add" not in said:
            return tool_call("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
        if "git_commit" not in said:
            return tool_call("git_commit", {"repo_path": str(repo), "message": "second"})
        return reply("Committed.")

    return FunctionModel(decide)


async def start(workdir: Path, repo: Path, pidfile: Path) -> None:
    async with DyingStore(workdir / "runs.sqlite3") as store, git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        runner = Runner(agent, model=model(repo), gate=Approves(), checkpointer=store, lease=LEASE)
        await runner.run(None, "Commit my change", run_id=RUN_ID)
    print(json.dumps({"unexpected": "the run ended without the kill"}))


async def resume(workdir: Path, repo: Path, pidfile: Path) -> None:
    out: dict[str, Any] = {}
    async with (
        SQLiteCheckpointer(workdir / "runs.sqlite3") as store,
        git_tools(repo, pidfile) as git,
    ):
        agent = Agent[None](name="git", tools=git.tools)
        _, document = await store.load(RUN_ID)
        out["saved"] = load_phase(document, agents={"git": agent}, run_id=RUN_ID).kind
        effect = await store.effect((workdir / "commit.key").read_text())
        out["effect_before_resume"] = None if effect is None else effect.status
        runner = Runner(agent, model=model(repo), gate=Approves(), checkpointer=store)
        for _ in range(100):  # the killed process's lease lapses within a second
            try:
                result = await runner.resume(RUN_ID)
                break
            except RunClaimedError:
                await anyio.sleep(0.1)
        out["final"] = result.final.kind
        out["history"] = list(result.history)
        out["connections"] = git.connections
    print(json.dumps(out))


def main(argv: list[str]) -> None:
    mode, workdir, repo, pidfile = argv[1], Path(argv[2]), Path(argv[3]), Path(argv[4])
    anyio.run(start if mode == "start" else resume, workdir, repo, pidfile)


if __name__ == "__main__":
    main(sys.argv)
