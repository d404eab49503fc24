"""A small MCP server for tests/test_mcp*.py: notes kept in a file, one tool per effect.

Run as ``python tests/mcp_notes_server.py NOTES_FILE [--http PORT]`` (stdio by default).
Every effect is a line appended to NOTES_FILE, so a test counts the effects a run had
from outside the server's process, across restarts.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)


def build(notes: Path) -> MCPServer:
    """The server, keeping its notes in ``notes``."""
    server = MCPServer("notes")

    def append(line: str) -> None:
        with notes.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

    @server.tool(annotations=READ, structured_output=False)
    def list_notes() -> str:
        """The notes, one a line."""
        return notes.read_text(encoding="utf-8") if notes.exists() else ""

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
        structured_output=False,
    )
    def add_note(text: str, priority: int = 1) -> str:
        """Add a note (not idempotent: each call adds one)."""
        append(f"add {text} {priority}")
        return f"added {text!r}"

    keys = notes.with_suffix(".keys")

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True),
        structured_output=False,
    )
    def set_title(title: str, ctx: Context) -> str:
        """Set the title of the notes (idempotent: once per idempotency key).

        The title ``crash`` makes the process die after the effect, the first time only.
        """
        meta = ctx.request_context.meta or {}
        key = str(meta.get("io.statemachine/idempotency-key", ""))
        seen = keys.read_text(encoding="utf-8").split() if keys.exists() else []
        if key and key in seen:
            return f"title is {title!r} (already set under this key)"
        append(f"title {title}")
        with keys.open("a", encoding="utf-8") as out:
            out.write(key + "\n")
        crashed = notes.with_suffix(".crashed")
        if title == "crash" and not crashed.exists():
            crashed.write_text("once")
            os._exit(3)
        return f"title is {title!r}"

    @server.tool(structured_output=False)
    def clear_notes() -> str:
        """Remove every note (published without annotations)."""
        append("clear")
        return "cleared"

    @server.tool(annotations=READ, structured_output=False)
    def slow_read(seconds: float) -> str:
        """Answer after ``seconds``."""
        time.sleep(seconds)
        return "slept"

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True),
        structured_output=False,
    )
    def add_and_crash(text: str) -> str:
        """Add a note, then the server process dies before it answers."""
        append(f"add {text} crash")
        os._exit(3)

    @server.tool(annotations=READ, structured_output=False)
    def read_and_crash() -> str:
        """The server process dies in the middle of a read."""
        os._exit(3)

    return server


def main(argv: list[str]) -> None:
    notes = Path(argv[1])
    server = build(notes)
    if len(argv) > 3 and argv[2] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[3]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv)
