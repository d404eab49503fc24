"""Tools from Model Context Protocol servers: read or write by the servers' own annotations.

Needs the ``mcp`` extra (``pip install 'statemachine-agents[mcp]'``)::

    async with MCPTools.stdio("git", "mcp-server-git", ["--repository", path]) as git:
        agent = Agent(name="git", tools=git.tools)
        ...

A tool annotated ``readOnlyHint: true`` is a read tool; every other one is a write tool
that waits for a person's approval (``idempotentHint: true`` makes it idempotent). See
:class:`MCPTools` for overrides, reconnection and durable runs.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("mcp") is None:  # pragma: no cover - the extra is part of dev
    from .._errors import SetupError

    raise SetupError(
        "statemachine.mcp needs the MCP Python SDK, which is not installed; install the "
        "extra: pip install 'statemachine-agents[mcp]'"
    )

from ._arguments import MCPArguments
from ._connection import MCPCallError, MCPUnavailableError
from ._toolset import IDEMPOTENCY_KEY_META, Effect, MCPTools, declared_effect

__all__ = (
    "IDEMPOTENCY_KEY_META",
    "Effect",
    "MCPArguments",
    "MCPCallError",
    "MCPTools",
    "MCPUnavailableError",
    "declared_effect",
)
