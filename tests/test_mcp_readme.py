"""The README's MCP example runs as written, on mcp-server-git and a scratch repository."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_support import commits, scratch_repository

from statemachine import Agent, Done, Runner
from statemachine.mcp import MCPTools
from statemachine.testing import AutoDenyGate, ScriptedModel, reply, tool_call

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_mcp_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The block under "Tools from MCP servers" runs; the commit it asks for is denied, not made."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Tools from MCP servers", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    repo = scratch_repository(tmp_path / "repo")
    model = ScriptedModel(
        [
            tool_call("git_commit", {"repo_path": str(repo), "message": "m"}),
            reply("Not committed."),
        ]
    )
    names: dict[str, Any] = {
        "MCPTools": MCPTools,
        "Agent": Agent,
        "Runner": Runner,
        "sys": sys,
        "REPO": str(repo),
        "model": model,
        "gate": AutoDenyGate(),
    }
    program = (
        "async def main():\n" + textwrap.indent(block.group(1), "    ") + "    return result\n"
    )
    exec(compile(program, "README.md (MCP)", "exec"), names)
    result = anyio.run(names["main"])
    assert capsys.readouterr().out == "read write\n"
    assert isinstance(result.final, Done)
    assert commits(repo) == ["first"]
