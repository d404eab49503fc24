"""Iterating an agent's tools gives read or write tools, narrowed before their calls run."""

from __future__ import annotations

from typing import Any, assert_type

from statemachine import Planning, ReadCall, ReadTool, WriteTool

from ._fixtures import LOOKUP_ARGS, Ctx


def run_now(call: ReadCall) -> None:
    """Something that takes only a read call."""


def a_tool_from_the_registry_may_write(planning: Planning[Ctx]) -> None:
    for tool in planning.agent.tools:
        assert_type(tool, ReadTool[Any] | WriteTool[Any])
        # Rule: a tool from the registry may be a write tool, so its call may be a
        # WriteCall: Planning does not run it until the tool is narrowed.
        planning.call_tool(tool.call(LOOKUP_ARGS))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        # Rule: the same for anything that takes only a read call.
        run_now(tool.call(LOOKUP_ARGS))  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_narrowed_read_tool_runs(planning: Planning[Ctx]) -> None:
    for tool in planning.agent.tools:
        if isinstance(tool, ReadTool):
            planning.call_tool(tool.call(LOOKUP_ARGS))
            return
