"""MCP tools: the effect rule, the arguments checked against a tool's JSON schema, and an
idempotent write re-sent under its idempotency key to a server that restarted mid-call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from mcp_support import (
    effects,
    free_port,
    git_tools,
    kill,
    notes_stdio,
    pid_of,
    scratch_repository,
)
from mcp_types import Tool as ListedTool
from mcp_types import ToolAnnotations
from pydantic import ValidationError

from statemachine import (
    Agent,
    Done,
    InvalidCall,
    Runner,
    SetupError,
    ToolRegistry,
    idempotency_key,
)
from statemachine.mcp import (
    IDEMPOTENCY_KEY_META,
    MCPCallError,
    MCPTools,
    MCPUnavailableError,
    declared_effect,
)
from statemachine.mcp._arguments import arguments_model, to_wire
from statemachine.testing import AutoApproveGate, ScriptedModel, reply, tool_call

pytestmark = pytest.mark.anyio


def listed(annotations: ToolAnnotations | None) -> ListedTool:
    return ListedTool(name="t", input_schema={"type": "object"}, annotations=annotations)


def test_the_effect_rule() -> None:
    """Only readOnlyHint true reads; a destructiveHint true on a read-only tool wins caution."""
    assert declared_effect(listed(None)) == "write"
    assert declared_effect(listed(ToolAnnotations())) == "write"
    assert declared_effect(listed(ToolAnnotations(read_only_hint=True))) == "read"
    assert declared_effect(listed(ToolAnnotations(read_only_hint=False))) == "write"
    assert declared_effect(listed(ToolAnnotations(destructive_hint=True))) == "write"
    both = ToolAnnotations(read_only_hint=True, destructive_hint=True)
    assert declared_effect(listed(both)) == "write"
    idempotent = ToolAnnotations(read_only_hint=False, idempotent_hint=True)
    assert declared_effect(listed(idempotent)) == "idempotent write"
    assert declared_effect(listed(ToolAnnotations(idempotent_hint=True))) == "idempotent write"


SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "minimum": 1},
        "price": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["count"],
    "additionalProperties": False,
}


def test_arguments_are_checked_against_the_published_schema() -> None:
    """Valid arguments are kept as given (whole numbers as int); invalid ones name each problem."""
    model = arguments_model("order", SCHEMA)
    args = model.model_validate({"count": Decimal("2.0"), "price": Decimal("9.95")})
    assert args.model_dump() == {"count": 2, "price": Decimal("9.95")}
    assert to_wire(args.model_dump()) == {"count": 2, "price": 9.95}
    assert model.model_json_schema() == SCHEMA
    with pytest.raises(ValidationError) as refused:
        model.model_validate({"count": 0, "tags": [1], "extra": True})
    message = str(refused.value)
    assert "count: 0 is less than the minimum of 1" in message
    assert "tags.0: 1 is not of type 'string'" in message
    assert "Additional properties are not allowed ('extra' was unexpected)" in message


def test_a_tool_with_a_broken_schema_is_refused_at_connect() -> None:
    """A schema that is not JSON Schema, or not of an object, cannot be called safely."""
    with pytest.raises(SetupError, match="not valid JSON Schema"):
        arguments_model("bad", {"type": "object", "properties": {"x": {"type": 5}}})
    with pytest.raises(SetupError, match="must be a JSON object"):
        arguments_model("bad", {"type": "array"})


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "server.pid"
    yield path
    if path.exists():
        kill(pid_of(path))


async def test_an_invalid_call_is_an_invalid_call(tmp_path: Path, pidfile: Path) -> None:
    """The registry routes arguments the schema refuses to an InvalidCall with feedback."""
    async with notes_stdio(tmp_path / "notes.txt", pidfile) as notes:
        routed = ToolRegistry(notes.tools).route("add_note", {"text": 5})
    assert isinstance(routed, InvalidCall)
    assert routed.problems == (
        "(arguments): refused by the tool's JSON schema: text: 5 is not of type 'string'",
    )
    assert "Call add_note again" in routed.feedback


async def test_an_idempotent_write_whose_server_died_is_resent_with_its_key_and_acts_once(
    tmp_path: Path, pidfile: Path
) -> None:
    """set_title acts, then its server dies before answering; Retrying re-sends the call on a
    new server process with the same idempotency key, which the server has seen: one effect."""
    notes_file = tmp_path / "notes.txt"
    model = ScriptedModel([tool_call("set_title", {"title": "crash"}), reply("Titled.")])
    async with notes_stdio(notes_file, pidfile) as notes:
        first = pid_of(pidfile)
        agent = Agent[None](name="notes", tools=notes.tools)
        result = await Runner(agent, model=model, gate=AutoApproveGate(), seed=1).run(None, "Title")
        assert notes.connections == 2
        args_hash = agent.tools.call("set_title", {"title": "crash"}).args_hash
    assert pid_of(pidfile) != first
    assert isinstance(result.final, Done)
    assert result.history[2:7] == (
        "AwaitApproval",
        "ToolCalling",
        "Retrying",
        "ToolCalling",
        "Observing",
    )
    assert effects(notes_file) == ["title crash"]
    keys = notes_file.with_suffix(".keys").read_text().split()
    # The ledger's key for this call, sent in the request's _meta, once.
    assert keys == [idempotency_key(result.run_id, "set_title", args_hash)]
    told = [m.content for m in result.final.transcript if m.role == "tool"]
    assert "already set under this key" in told[0]
    assert IDEMPOTENCY_KEY_META == "io.statemachine/idempotency-key"


async def test_a_json_rpc_error_from_the_server_is_a_call_failure_not_retried(
    tmp_path: Path, pidfile: Path
) -> None:
    """mcp-server-git answers a call of a tool it does not have with JSON-RPC -32602: an
    MCPCallError that is not retried, and the connection stays up."""
    repo = scratch_repository(tmp_path / "repo")
    async with git_tools(repo, pidfile) as git:
        connection = git._connection
        with pytest.raises(MCPCallError) as refused:
            await connection.call("git_push", {"repo_path": str(repo)}, None)
        assert connection.opened == 1
        status = await connection.call("git_status", {"repo_path": str(repo)}, None)
    assert str(refused.value) == (
        "MCP server 'git' refused the call of 'git_push' (JSON-RPC error -32602: "
        "Unknown tool: git_push)"
    )
    assert (refused.value.server, refused.value.tool) == ("git", "git_push")
    assert refused.value.retryable is False
    assert not status.is_error


async def test_tools_are_known_only_inside_async_with(tmp_path: Path, pidfile: Path) -> None:
    """Before the server is connected there are no tools, and one MCPTools is entered once."""
    notes = notes_stdio(tmp_path / "notes.txt", pidfile)
    with pytest.raises(SetupError, match="use them inside `async with`"):
        _ = notes.tools
    async with notes:
        pass
    with pytest.raises(SetupError, match="was entered already"):
        async with notes:
            pass


def test_importing_the_library_loads_no_mcp_sdk() -> None:
    """The SDK is an extra: ``import statemachine`` leaves it, and statemachine.mcp, unloaded."""
    script = "import json, sys, statemachine; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert {"mcp", "mcp_types", "jsonschema", "statemachine.mcp"} & loaded == set()


async def test_a_server_that_cannot_be_started_or_reached_is_a_clear_error(
    tmp_path: Path,
) -> None:
    """A command that does not exist, and a port nothing listens on, say which server and why."""
    missing = MCPTools.stdio("ghost", str(tmp_path / "no-such-server"))
    with pytest.raises(MCPUnavailableError, match=r"^MCP server 'ghost' could not be started"):
        async with missing:
            pass
    closed = MCPTools.http("nobody", f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(MCPUnavailableError, match=r"^MCP server 'nobody' could not be started"):
        async with closed:
            pass


async def test_a_process_that_never_answers_is_refused_after_the_timeout(tmp_path: Path) -> None:
    """A command that is not an MCP server (it never answers) is given up after ``timeout``."""
    silent = MCPTools.stdio("silent", "sh", ["-c", "sleep 30"], timeout=0.5)
    with pytest.raises(MCPUnavailableError, match=r"^MCP server 'silent' did not answer within"):
        async with silent:
            pass


async def test_a_prefix_names_the_tools_for_the_model_and_not_for_the_server(
    tmp_path: Path, pidfile: Path
) -> None:
    """With ``prefix="notes_"`` the model calls notes_add_note; the server is asked for add_note."""
    notes_file = tmp_path / "notes.txt"
    model = ScriptedModel([tool_call("notes_add_note", {"text": "tea"}), reply("Added.")])
    async with notes_stdio(notes_file, pidfile, prefix="notes_") as notes:
        assert "notes_add_note" in {tool.name for tool in notes.tools}
        assert notes.write("add_note").name == "notes_add_note"
        agent = Agent[None](name="notes", tools=notes.tools)
        result = await Runner(agent, model=model, gate=AutoApproveGate()).run(None, "Tea")
    assert isinstance(result.final, Done)
    assert effects(notes_file) == ["add tea 1"]
