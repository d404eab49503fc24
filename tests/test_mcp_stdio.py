"""MCP tools over stdio on mcp-server-git from PyPI, a real process: read or write by annotations.

Each test starts the server on a scratch repository through a shell that writes the
server's pid, and kills whatever is left of it in teardown. What is checked: the
classification read off the server's annotations, that a commit waits for a person
(denied: nothing is committed; pending: the run stops), that the server killed under
the run ends where the README says, and that a durable run resumed in a new process
reconnects (a new server process) and commits once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import commits, crash_run, git_tools, kill, pid_of, scratch_repository

from statemachine import (
    Agent,
    Approve,
    AwaitApproval,
    Done,
    Failed,
    ModelReply,
    ModelRequest,
    Pending,
    ReadCall,
    ReadTool,
    Runner,
    SetupError,
    SQLiteCheckpointer,
    ToolRegistry,
    UnapprovedWriteError,
    WriteCall,
    WriteTool,
)
from statemachine.testing import AutoDenyGate, FunctionModel, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A scratch repository: one commit, one unstaged change."""
    return scratch_repository(tmp_path / "repo")


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    """Where the server writes its pid; the server is killed in teardown if it still runs."""
    path = tmp_path / "server.pid"
    yield path
    if path.exists():
        kill(pid_of(path))


async def test_tools_are_read_or_write_by_the_servers_annotations(
    repo: Path, pidfile: Path
) -> None:
    """readOnlyHint true: a read tool; false: a write, idempotent when idempotentHint says so."""
    async with git_tools(repo, pidfile) as git:
        kinds = {tool.name: type(tool).__name__ for tool in git.tools}
        effects = {tool.name: git.effect(tool.name) for tool in git.tools}
        assert git.connections == 1
    reads = {"git_status", "git_log", "git_diff", "git_diff_staged", "git_diff_unstaged"}
    reads |= {"git_show", "git_branch"}
    assert {name for name, kind in kinds.items() if kind == "ReadTool"} == reads
    assert effects["git_commit"] == "write"
    assert effects["git_checkout"] == "write"
    assert effects["git_create_branch"] == "write"
    assert effects["git_add"] == "idempotent write"
    assert effects["git_reset"] == "idempotent write"
    assert kinds["git_commit"] == "WriteTool"


async def test_a_commit_routes_to_a_write_call_that_cannot_run_unapproved(
    repo: Path, pidfile: Path
) -> None:
    """The registry routes the model's git_commit to a WriteCall; run without approval, refused."""
    async with git_tools(repo, pidfile) as git:
        registry = ToolRegistry(git.tools)
        arguments = {"repo_path": str(repo), "message": "sneaky"}
        routed = registry.route("git_commit", arguments)
        assert isinstance(routed, WriteCall)
        assert isinstance(registry.route("git_status", {"repo_path": str(repo)}), ReadCall)
        agent = Agent[None](name="git", tools=git.tools)
        planning = agent.start(None, "commit").receive("commit")
        # A WriteCall forced past the types into call_tool is refused at run time.
        with pytest.raises(UnapprovedWriteError):
            planning.call_tool(routed)  # type: ignore[arg-type]
        assert isinstance(git.read("git_status"), ReadTool)
        assert isinstance(git.write("git_commit"), WriteTool)
    assert commits(repo) == ["first"]


async def test_a_denied_commit_commits_nothing(repo: Path, pidfile: Path) -> None:
    """The person says no: the model is told, and the repository is as it was."""
    model = ScriptedModel(
        [
            tool_call("git_status", {"repo_path": str(repo)}),
            tool_call("git_commit", {"repo_path": str(repo), "message": "second"}),
            reply("The commit was not approved."),
        ]
    )
    gate = AutoDenyGate()
    async with git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        result = await Runner(agent, model=model, gate=gate).run(None, "Commit my change")
    assert isinstance(result.final, Done)
    assert "AwaitApproval" in result.history
    assert [request.tool for request in gate.requests] == ["git_commit"]
    assert commits(repo) == ["first"]


async def test_an_invalid_call_is_feedback_to_the_model_and_reaches_no_server(
    repo: Path, pidfile: Path
) -> None:
    """Arguments the tool's JSON schema refuses are told to the model; the server is not called."""
    model = ScriptedModel(
        [
            tool_call("git_add", {"repo_path": str(repo), "files": []}),
            reply("I could not stage anything."),
        ]
    )
    gate = AutoDenyGate()
    async with git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        result = await Runner(agent, model=model, gate=gate).run(None, "Stage nothing")
    told = [m.content for m in result.final.transcript if m.role == "tool"]
    assert len(told) == 1
    assert "files: [] should be non-empty" in told[0]
    assert gate.requests == []  # never even asked for approval


async def test_the_server_killed_under_a_read_is_retried_on_a_new_server(
    repo: Path, pidfile: Path
) -> None:
    """A read whose server died fails, Retrying calls it again, and that starts a new server."""
    model = ScriptedModel(
        [tool_call("git_status", {"repo_path": str(repo)}), reply("Clean enough.")]
    )
    async with git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        first = pid_of(pidfile)
        kill(first)
        result = await Runner(agent, model=model, gate=AutoDenyGate(), seed=1).run(None, "Status?")
        assert git.connections == 2
    assert pid_of(pidfile) != first
    assert result.history[:6] == (
        "Idle",
        "Planning",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Observing",
    )
    assert isinstance(result.final, Done)
    told = [m.content for m in result.final.transcript if m.role == "tool"]
    assert "Repository status" in told[0]


async def test_the_server_killed_under_a_commit_fails_the_run_without_a_retry(
    repo: Path, pidfile: Path
) -> None:
    """A write that is not idempotent is not retried: the run fails and says to check the server."""
    model = ScriptedModel([tool_call("git_commit", {"repo_path": str(repo), "message": "second"})])

    class KillingGate:
        """Approves, after killing the server: the approved call finds it dead."""

        async def decide(self, request: Any) -> Approve:
            kill(pid_of(pidfile))
            return Approve(by="ana@example.com")

    async with git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        result = await Runner(agent, model=model, gate=KillingGate()).run(None, "Commit")
    assert isinstance(result.final, Failed)
    assert "Retrying" not in result.history
    assert result.final.reason.startswith(
        "git_commit failed: MCPCallError: MCP server 'git' failed during the call of 'git_commit'"
    )
    assert "check the server's state" in result.final.reason
    assert commits(repo) == ["first"]


async def test_an_override_may_add_caution_and_may_remove_it_only_when_told_loudly(
    repo: Path, pidfile: Path
) -> None:
    """git_add made a plain write is fine; git_commit made a read is refused without the opt-in."""
    async with git_tools(repo, pidfile, overrides={"git_add": "write", "git_log": "write"}) as git:
        assert git.effect("git_add") == "write"
        assert git.declared("git_add") == "idempotent write"
        assert isinstance(git.write("git_log"), WriteTool)
        assert not git.write("git_add").idempotent
    with pytest.raises(SetupError, match="dangerously_allow_less_caution=True"):
        async with git_tools(repo, pidfile, overrides={"git_commit": "read"}):
            pass
    with pytest.raises(SetupError, match="has no tool 'git_comit'"):
        async with git_tools(repo, pidfile, overrides={"git_comit": "write"}):
            pass
    loose = git_tools(
        repo, pidfile, overrides={"git_commit": "read"}, dangerously_allow_less_caution=True
    )
    async with loose as git:
        assert isinstance(git.read("git_commit"), ReadTool)


def _git_turn(repo: Path) -> Any:
    """The model of the durable run: status, stage, commit, answer (from the conversation)."""

    def decide(request: ModelRequest) -> ModelReply:
        said = [m.name for m in request.messages if m.role == "tool"]
        if "git_add" not in said:
            return tool_call("git_add", {"repo_path": str(repo), "files": ["notes.txt"]})
        if "git_commit" not in said:
            return tool_call("git_commit", {"repo_path": str(repo), "message": "second"})
        return reply("Committed.")

    return decide


async def test_a_paused_durable_run_resumes_on_a_new_server_and_commits_once(
    repo: Path, pidfile: Path, tmp_path: Path
) -> None:
    """Paused for the commit's approval; the server and store are closed; the resume starts a
    new server process, commits once, and a second resume does not commit again."""
    store_path = tmp_path / "runs.sqlite3"
    pending = CommitLaterGate()
    async with SQLiteCheckpointer(store_path) as store, git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        runner = Runner(
            agent, model=FunctionModel(_git_turn(repo)), gate=pending, checkpointer=store
        )
        first = await runner.run(None, "Commit my change", run_id="git-1")
    first_pid = pid_of(pidfile)
    assert first.status == "paused"
    assert isinstance(first.final, AwaitApproval)
    assert first.final.call.name == "git_commit"
    assert commits(repo) == ["first"]
    yes = Approve.of(first.final.request("git-1"), by="ana@example.com")
    async with SQLiteCheckpointer(store_path) as store, git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        runner = Runner(
            agent, model=FunctionModel(_git_turn(repo)), gate=pending, checkpointer=store
        )
        resumed = await runner.resume("git-1", decision=yes)
    assert pid_of(pidfile) != first_pid
    assert isinstance(resumed.final, Done)
    assert resumed.history[:3] == ("AwaitApproval", "ToolCalling", "Observing")
    assert commits(repo) == ["second", "first"]
    async with SQLiteCheckpointer(store_path) as store, git_tools(repo, pidfile) as git:
        agent = Agent[None](name="git", tools=git.tools)
        runner = Runner(
            agent, model=FunctionModel(_git_turn(repo)), gate=pending, checkpointer=store
        )
        with pytest.raises(SetupError, match="it is at Done"):
            await runner.resume("git-1", decision=yes)
    assert commits(repo) == ["second", "first"]


class CommitLaterGate:
    """A person who lets staging through at once and answers on a commit later (Pending)."""

    async def decide(self, request: Any) -> Approve | Pending:
        if request.tool == "git_commit":
            return Pending(reason="sent to the maintainer")
        return Approve(by="ana@example.com")


def test_a_run_killed_after_the_commit_resumes_in_a_new_process_without_committing_again(
    repo: Path, pidfile: Path, tmp_path: Path
) -> None:
    """The agent's process is killed right after the commit's result reached the ledger, before
    the next checkpoint; a new process resumes, starts a new server and replays the commit."""
    started = crash_run("start", str(tmp_path), "stdio", str(repo), str(pidfile))
    assert started["code"] == -9, started["err"]
    assert commits(repo) == ["second", "first"]
    first_pid = pid_of(pidfile)
    resumed = crash_run("resume", str(tmp_path), "stdio", str(repo), str(pidfile))
    assert resumed["code"] == 0, resumed["err"]
    out = resumed["out"]
    assert out["saved"] == "ToolCalling"
    assert out["effect_before_resume"] == "committed"
    assert out["final"] == "Done"
    assert out["connections"] == 1
    assert pid_of(pidfile) != first_pid
    assert commits(repo) == ["second", "first"]  # committed once, by the first process
