"""The git agent's scenarios, offline: a scratch repository, mcp-server-git, a scripted model.

Each scenario makes its own repository (one commit, then an unstaged change to
``notes.txt``) in a temporary folder, starts mcp-server-git on it over stdio, and runs
the agent with a model that is a function of the conversation (so a resumed run goes on
where it stopped). The person is scripted too: :class:`Person` answers each approval as
told and remembers what was asked.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from statemachine import (
    ApprovalRequest,
    Approve,
    AwaitApproval,
    Denial,
    ModelReply,
    ModelRequest,
    Pending,
    Runner,
    RunResult,
    SetupError,
    SQLiteCheckpointer,
)
from statemachine.mcp import Effect, MCPTools
from statemachine.testing import FunctionModel, reply, tool_call

from ._agent import GitContext, git_agent, git_server

__all__ = [
    "Outcome",
    "Person",
    "classification",
    "commit_reviewed",
    "less_caution_refused",
    "reset_and_branch_denied",
    "resumed_commit",
    "scratch_repository",
]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def scratch_repository(path: Path) -> Path:
    """A new repository at ``path``: one commit, then an unstaged change to ``notes.txt``."""
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "agent@git.example")
    _git(path, "config", "user.name", "git agent demo")
    (path / "notes.txt").write_text("Buy milk.\n")
    _git(path, "add", "notes.txt")
    _git(path, "commit", "-q", "-m", "Start the notes")
    (path / "notes.txt").write_text("Buy milk.\nCall the plumber.\n")
    return path


def commit_subjects(repo: Path) -> list[str]:
    """The subjects of the repository's commits, newest first."""
    return _git(repo, "log", "--format=%s").splitlines()


def current_branch(repo: Path) -> str:
    """The branch checked out."""
    return _git(repo, "branch", "--show-current").strip()


@attrs.define
class Person:
    """A scripted person: approves or denies each tool as told (``Pending``: answers later)."""

    answers: Mapping[str, str]
    asked: list[str] = attrs.field(factory=lambda: list[str]())

    async def decide(self, request: ApprovalRequest) -> Approve | Denial | Pending:
        """The answer for the tool asked about."""
        self.asked.append(request.tool)
        answer = self.answers.get(request.tool, "deny")
        if answer == "approve":
            return Approve(by="maintainer@git.example")
        if answer == "later":
            return Pending(reason="sent to the maintainer")
        return Denial(reason="the maintainer said no", denied_by="maintainer@git.example")


@attrs.frozen
class Outcome:
    """What a scenario did: the run, the person's questions, the repository after it."""

    title: str
    result: RunResult[GitContext]
    asked: list[str]
    commits: list[str]
    branch: str
    connections: int


def classification(repo: Path) -> list[tuple[str, Effect, Effect]]:
    """Each tool with the effect its annotations declare and the one it has in the agent."""
    import anyio

    async def read() -> list[tuple[str, Effect, Effect]]:
        async with git_server(repo) as git:
            return [(t.name, git.declared(t.name), git.effect(t.name)) for t in git.tools]

    return anyio.run(read)


Step = tuple[str, dict[str, Any]]


def _script(steps: list[Step], answer: str) -> FunctionModel:
    """A model that makes ``steps`` in order (one per tool answer seen), then answers."""

    def decide(request: ModelRequest) -> ModelReply:
        done = sum(1 for message in request.messages if message.role == "tool")
        if done < len(steps):
            name, arguments = steps[done]
            return tool_call(name, arguments)
        return reply(answer)

    return FunctionModel(decide)


async def _run(title: str, repo: Path, steps: list[Step], answer: str, person: Person) -> Outcome:
    async with git_server(repo) as git:
        runner = Runner(git_agent(git.tools), model=_script(steps, answer), gate=person)
        result = await runner.run(GitContext(str(repo)), "Please commit my notes.")
        connections = git.connections
    return Outcome(
        title, result, person.asked, commit_subjects(repo), current_branch(repo), connections
    )


async def commit_reviewed(workdir: Path) -> Outcome:
    """Status and diff read freely; staging and the commit each wait for the person (yes)."""
    repo = scratch_repository(workdir / "review")
    at: dict[str, Any] = {"repo_path": str(repo)}
    steps: list[Step] = [
        ("git_status", at),
        ("git_diff_unstaged", at),
        ("git_add", {**at, "files": ["notes.txt"]}),
        ("git_commit", {**at, "message": "Note the plumber"}),
        ("git_log", {**at, "max_count": 2}),
    ]
    person = Person({"git_add": "approve", "git_commit": "approve"})
    return await _run(
        "Review the change and commit it (a person approves)",
        repo,
        steps,
        "Committed 'Note the plumber'.",
        person,
    )


async def reset_and_branch_denied(workdir: Path) -> Outcome:
    """A reset and a branch change the person refuses: nothing happens to the repository."""
    repo = scratch_repository(workdir / "denied")
    at = {"repo_path": str(repo)}
    _git(repo, "add", "notes.txt")  # something staged, for the reset to throw away
    steps = [
        ("git_diff_staged", at),
        ("git_reset", at),
        ("git_create_branch", {**at, "branch_name": "experiment"}),
    ]
    person = Person({})
    return await _run(
        "Unstage everything and start a branch (the person says no)",
        repo,
        steps,
        "Nothing was reset and no branch was made: the maintainer said no.",
        person,
    )


async def resumed_commit(workdir: Path) -> Outcome:
    """The run waits for the commit's approval and stops; the server process ends with it.
    Later a new process starts the server again and resumes with the approval: one commit."""
    repo = scratch_repository(workdir / "durable")
    at: dict[str, Any] = {"repo_path": str(repo)}
    steps: list[Step] = [
        ("git_add", {**at, "files": ["notes.txt"]}),
        ("git_commit", {**at, "message": "Note the plumber"}),
    ]
    person = Person({"git_add": "approve", "git_commit": "later"})
    store = workdir / "runs.sqlite3"
    context = GitContext(str(repo))
    async with SQLiteCheckpointer(store) as saved, git_server(repo) as git:
        runner = Runner(
            git_agent(git.tools), model=_script(steps, "Done."), gate=person, checkpointer=saved
        )
        first = await runner.run(context, "Please commit my notes.", run_id="git-demo")
    waiting = first.final
    if not isinstance(waiting, AwaitApproval):
        raise RuntimeError(
            f"the run should wait for the commit's approval; it is at {waiting.kind}"
        )
    yes = Approve.of(waiting.request("git-demo"), by="maintainer@git.example")
    async with SQLiteCheckpointer(store) as saved, git_server(repo) as git:
        runner = Runner(
            git_agent(git.tools),
            model=_script(steps, "Committed."),
            gate=person,
            checkpointer=saved,
        )
        result = await runner.resume("git-demo", decision=yes)
        connections = git.connections
    return Outcome(
        f"Wait for the commit's approval, stop, resume later on a new server ({first.status} "
        "first)",
        result,
        person.asked,
        commit_subjects(repo),
        current_branch(repo),
        connections,
    )


async def less_caution_refused(repo: Path) -> str:
    """What an override making git_commit a read is told without the loud opt-in."""
    try:
        async with MCPTools.stdio(
            "git",
            sys.executable,
            ["-m", "mcp_server_git", "--repository", str(repo)],
            overrides={"git_commit": "read"},
        ):
            pass
    except SetupError as error:
        return str(error)
    return "accepted (unexpected)"
