"""Tools an MCP server lists at run time are routed by their effect like any other tool.

Nothing about a server's tools is known before it is connected, yet the types still hold:
``MCPTools.write`` gives a ``WriteTool`` whose calls are ``WriteCall``, which
``Planning.call_tool`` refuses, and a call the model makes is ``ReadCall | WriteCall |
InvalidCall`` until it is narrowed.
"""

from __future__ import annotations

from typing import assert_never

from statemachine import (
    AwaitApproval,
    InvalidCall,
    Planning,
    ReadCall,
    ReadTool,
    ToolCalling,
    ToolRegistry,
    WriteCall,
    WriteTool,
)
from statemachine.mcp import MCPArguments, MCPTools

from ._fixtures import Ctx

REPO = {"repo_path": "/tmp/repo"}


def a_servers_write_tool_needs_an_approval(planning: Planning[Ctx], git: MCPTools) -> None:
    commit = git.write("git_commit")
    # Rule: a write tool of a server makes a WriteCall, which cannot run from Planning.
    planning.call_tool(commit.call({**REPO, "message": "m"}))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    # Its way to ToolCalling is AwaitApproval.
    waiting: AwaitApproval[Ctx, MCPArguments] = planning.request_approval(
        commit.call({**REPO, "message": "m"})
    )
    # Rule: a read tool of a server makes a ReadCall: it needs no approval (and gets none).
    planning.request_approval(git.read("git_status").call(REPO))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    del waiting


def a_read_tool_of_a_server_runs_from_planning(planning: Planning[Ctx], git: MCPTools) -> None:
    status: ReadTool[MCPArguments] = git.read("git_status")
    running: ToolCalling[Ctx] = planning.call_tool(status.call(REPO))
    del running


def a_listed_tool_is_either_effect(git: MCPTools) -> None:
    # Rule: an entry of MCPTools.tools may be a write tool, so it is not a ReadTool...
    _read: ReadTool[MCPArguments] = git.tools[0]  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    # ... and not a WriteTool either, until it is narrowed.
    _write: WriteTool[MCPArguments] = git.tools[0]  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


def the_models_call_is_routed_by_its_effect(planning: Planning[Ctx], git: MCPTools) -> None:
    routed = ToolRegistry(git.tools).route("git_commit", '{"repo_path": "/tmp/repo"}')
    # Rule: an unrouted call may be a write, so Planning refuses it.
    planning.call_tool(routed)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
    match routed:
        case ReadCall():
            planning.call_tool(routed)
        case WriteCall():
            planning.request_approval(routed)
        case InvalidCall():
            planning.reject_call(routed)
        case _:
            assert_never(routed)
