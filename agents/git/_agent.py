"""The git agent: mcp-server-git's tools, read or write by the server's own annotations.

mcp-server-git (from PyPI) publishes annotations for every tool: ``git_status``,
``git_log``, ``git_diff*``, ``git_show`` and ``git_branch`` are read-only; ``git_commit``,
``git_checkout`` and ``git_create_branch`` are writes; ``git_add`` and ``git_reset`` are
idempotent writes. So the agent reads status, logs and diffs freely, and every commit,
reset or branch change waits in ``AwaitApproval`` for a person. No rule of this agent
says so: the server's annotations do, and ``statemachine.mcp`` reads them.

One override, towards more caution (always allowed): ``git_reset`` is declared
idempotent, so it would be retried after an error; this agent never retries a reset
(``overrides={"git_reset": "write"}``). An override the other way (a write made a read)
is refused unless ``dangerously_allow_less_caution=True`` is passed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

import attrs

from statemachine import Agent, Budget, Phases, Planning, ReadTool, WriteTool
from statemachine.mcp import Effect, MCPTools

__all__ = ["CAUTION", "GitContext", "GitPlanning", "git_agent", "git_server"]

# Towards more caution only: no opt-in needed.
CAUTION: dict[str, Effect] = {"git_reset": "write"}


@attrs.frozen
class GitContext:
    """The repository the agent works on (the server is confined to it)."""

    repo: str


class GitPlanning(Planning[GitContext]):
    """Planning with the git agent's instructions."""

    def instructions(self) -> str:
        return (
            f"You look after the git repository at {self.ctx.repo}; pass it as repo_path. "
            "Read its status, log and diffs as you need. Stage, commit, reset or change "
            "branches only when the user asks: a person approves each of those."
        )


def git_server(repo: Path | str, *, errlog: TextIO | None = None) -> MCPTools:
    """mcp-server-git over stdio, confined to ``repo``, with this agent's one override."""
    return MCPTools.stdio(
        "git",
        sys.executable,
        ["-m", "mcp_server_git", "--repository", str(repo)],
        overrides=CAUTION,
        errlog=errlog,
    )


def git_agent(tools: Iterable[ReadTool[Any] | WriteTool[Any]]) -> Agent[GitContext]:
    """The agent on the tools of a connected :func:`git_server`."""
    return Agent[GitContext](
        name="git",
        tools=tools,
        phases=Phases(planning=GitPlanning),
        budget=Budget(tool_calls=12, wall_clock=120.0),
    )
