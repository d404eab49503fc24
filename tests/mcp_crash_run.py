"""One process of the MCP crash tests (tests/test_mcp_stdio.py, tests/test_mcp_http.py).

``python tests/mcp_crash_run.py start DIR stdio REPO PIDFILE`` runs a durable run
(checkpoints in ``DIR/runs.sqlite3``) on mcp-server-git over stdio: stage, commit (a
person approves), answer; ``... start DIR http URL`` one on the notes server over HTTP:
add a note (approved), answer. This process kills itself with SIGKILL right after the
write's result (the commit, the note) reached the side-effect ledger, before the
checkpoint after the call is saved: the effect is made, the run's last checkpoint is
still the approved ``ToolCalling``.

``python tests/mcp_crash_run.py resume DIR ...`` (the same arguments) is a new process:
it connects to the server again (starts mcp-server-git anew), resumes the run, and prints
one JSON line (the phase it resumed from, what the ledger held for the write, the final
phase, how many times it connected).
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
from statemachine.mcp import MCPTools
from statemachine.testing import FunctionModel, reply, tool_call

RUN_ID = "git-crash"
LEASE = timedelta(seconds=1)


KILL_AFTER = ("git_commit", "add_note")


class DyingStore(SQLiteCheckpointer):
    """The SQLite store; the process dies right after a commit's or a note's result is recorded."""

    tools: dict[str, str] = {}  # noqa: RUF012 - one process, one store

    async def record_intent(self, key: str, *, run_id: str, tool: str, args_hash: str) -> Any:
        self.tools[key] = tool
        return await super().record_intent(key, run_id=run_id, tool=tool, args_hash=args_hash)

    async def record_result(self, key: str, result: Any) -> Any:
        recorded = await super().record_result(key, result)
        if self.tools.get(key) in KILL_AFTER:
            (Path(self.path).parent / "write.key").write_text(key)
            os.kill(os.getpid(), signal.SIGKILL)
        return recorded


class Approves:
    """A person who approves every call."""

    async def decide(self, request: Any) -> Approve:
        return Approve(by="ana@example.com")


def model(repo: Path | None) -> FunctionModel:
    def decide(request: ModelRequest) -> ModelReply:
        said = [m.name for m in request.messages if m.role == "tool"]
        if repo is None:
            return reply("Noted.") if said else tool_call("add_note", {"text": "bread"})
        if "git_add" not in said:
            return tool_call("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
        if "git_commit" not in said:
            return tool_call("git_commit", {"repo_path": str(repo), "message": "second"})
        return reply("Committed.")

    return FunctionModel(decide)


def server(where: list[str]) -> tuple[MCPTools, Path | None]:
    """The server the arguments name, and the repository when it is git."""
    if where[0] == "stdio":
        return git_tools(Path(where[1]), Path(where[2])), Path(where[1])
    return MCPTools.http("notes", where[1]), None


async def start(workdir: Path, where: list[str]) -> None:
    tools, repo = server(where)
    async with DyingStore(workdir / "runs.sqlite3") as store, tools as connected:
        agent = Agent[None](name="agent", tools=connected.tools)
        runner = Runner(agent, model=model(repo), gate=Approves(), checkpointer=store, lease=LEASE)
        await runner.run(None, "Write it", run_id=RUN_ID)
    print(json.dumps({"unexpected": "the run ended without the kill"}))


async def resume(workdir: Path, where: list[str]) -> None:
    out: dict[str, Any] = {}
    tools, repo = server(where)
    async with SQLiteCheckpointer(workdir / "runs.sqlite3") as store, tools as connected:
        agent = Agent[None](name="agent", tools=connected.tools)
        _, document = await store.load(RUN_ID)
        out["saved"] = load_phase(document, agents={"agent": agent}, run_id=RUN_ID).kind
        effect = await store.effect((workdir / "write.key").read_text())
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
        out["connections"] = connected.connections
    print(json.dumps(out))


def main(argv: list[str]) -> None:
    mode, workdir, where = argv[1], Path(argv[2]), argv[3:]
    anyio.run(start if mode == "start" else resume, workdir, where)


if __name__ == "__main__":
    main(sys.argv)
