"""MCP tools over streamable HTTP: the notes server (tests/mcp_notes_server.py) on loopback.

The server is started by each test on a free 127.0.0.1 port and killed in teardown. Its
tools declare every kind of annotation (read-only, write, idempotent write, destructive,
none), and every effect it makes is a line in a file the test reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_support import NotesHTTPServer, crash_run, effects, notes_http

from statemachine import (
    Agent,
    Approve,
    AwaitApproval,
    Done,
    Failed,
    Pending,
    ReadCall,
    RetryPolicy,
    Runner,
    SQLiteCheckpointer,
    ToolRegistry,
    UnapprovedWriteError,
    WriteCall,
)
from statemachine.testing import (
    AutoApproveGate,
    AutoDenyGate,
    ScriptedModel,
    capture,
    reply,
    tool_call,
)

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.01)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NotesHTTPServer]:
    """A notes server of the test's own on a free loopback port (the test may kill it)."""
    with notes_http(tmp_path) as started:
        yield started


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotesHTTPServer]:
    """One notes server for the tests that leave it running, killed after the module."""
    with notes_http(tmp_path_factory.mktemp("notes")) as started:
        yield started


@pytest.fixture
def shared(running: NotesHTTPServer) -> NotesHTTPServer:
    """The module's notes server, its notes emptied for this test."""
    running.notes.unlink(missing_ok=True)
    return running


async def test_tools_are_read_or_write_by_their_annotations(shared: NotesHTTPServer) -> None:
    """readOnlyHint true: read; no annotations, readOnlyHint false or destructive: write."""
    async with shared.tools() as notes:
        effects_here = {tool.name: notes.effect(tool.name) for tool in notes.tools}
    assert effects_here == {
        "list_notes": "read",
        "add_note": "write",
        "set_title": "idempotent write",
        "clear_notes": "write",  # published without annotations
        "slow_read": "read",
        "add_and_crash": "write",
        "read_and_crash": "read",
    }


async def test_a_write_routes_to_a_write_call_that_needs_an_approval(
    shared: NotesHTTPServer,
) -> None:
    """add_note is routed to a WriteCall, which Planning refuses; asked, the run waits."""
    async with shared.tools() as notes:
        registry = ToolRegistry(notes.tools)
        write = registry.route("add_note", {"text": "hi"})
        assert isinstance(write, WriteCall)
        assert isinstance(registry.route("list_notes", {}), ReadCall)
        agent = Agent[None](name="notes", tools=notes.tools)
        planning = agent.start(None, "note").receive("note")
        with pytest.raises(UnapprovedWriteError):
            planning.call_tool(write)  # type: ignore[arg-type]
        model = ScriptedModel([tool_call("add_note", {"text": "hi"})])
        result = await Runner(agent, model=model, gate=LaterGate()).run(None, "Add a note")
    assert result.status == "paused"
    assert isinstance(result.final, AwaitApproval)
    assert effects(shared.notes) == []


async def test_a_denied_write_runs_nothing(shared: NotesHTTPServer) -> None:
    """Denied: the server is never called, and the model is told."""
    model = ScriptedModel([tool_call("clear_notes"), reply("Not cleared.")])
    async with shared.tools() as notes:
        agent = Agent[None](name="notes", tools=notes.tools)
        result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Clear them")
    assert isinstance(result.final, Done)
    assert effects(shared.notes) == []
    told = [m.content for m in result.final.transcript if m.role == "tool"]
    assert told[0].startswith("Not approved")


async def test_an_approved_write_runs_once_and_spans_and_events_name_server_and_tool(
    shared: NotesHTTPServer,
) -> None:
    """Approved, add_note runs once; its span and log event name the server and the tool."""
    model = ScriptedModel([tool_call("add_note", {"text": "milk", "priority": 2}), reply("Ok.")])
    with capture() as seen:
        async with shared.tools(tracer=seen.tracer) as notes:
            agent = Agent[None](name="notes", tools=notes.tools)
            runner = Runner(agent, model=model, gate=AutoApproveGate(), tracer=seen.tracer)
            result = await runner.run(None, "Note milk")
    assert isinstance(result.final, Done)
    assert effects(shared.notes) == ["add milk 2"]
    spans = [span for span in seen.spans if span.name == "mcp notes/add_note"]
    assert len(spans) == 1
    assert spans[0].parent == "ToolCalling -> Observing"
    assert spans[0].attributes == {
        "mcp.server": "notes",
        "mcp.tool": "add_note",
        "mcp.effect": "write",
    }
    calls = [event for event in seen.events if event["event"] == "mcp call"]
    assert [(e["server"], e["tool"], e["effect"]) for e in calls] == [
        ("notes", "add_note", "write")
    ]


async def test_the_server_dying_mid_write_fails_the_run_and_says_to_check(
    server: NotesHTTPServer,
) -> None:
    """The server acts, then dies before answering: a write that is not idempotent is not
    retried; the run is Failed, the reason naming server and tool and saying to check."""
    model = ScriptedModel([tool_call("add_and_crash", {"text": "eggs"})])
    with capture() as seen:
        async with server.tools(retry=QUICK, tracer=seen.tracer) as notes:
            agent = Agent[None](name="notes", tools=notes.tools)
            result = await Runner(agent, model=model, gate=AutoApproveGate()).run(None, "Eggs")
    assert server.exit_code() == 3  # the server died in the call
    assert isinstance(result.final, Failed)
    assert "Retrying" not in result.history
    assert result.final.reason.startswith(
        "add_and_crash failed: MCPCallError: MCP server 'notes' failed during the call of "
        "'add_and_crash'"
    )
    assert "check the server's state" in result.final.reason
    assert effects(server.notes) == ["add eggs crash"]
    failed = [e for e in seen.events if e["event"] == "mcp call failed"]
    assert [(e["server"], e["tool"]) for e in failed] == [("notes", "add_and_crash")]


async def test_the_server_dying_mid_read_is_retried_then_fails_when_it_stays_down(
    server: NotesHTTPServer,
) -> None:
    """A read whose server died goes to Retrying; the server is not ours to restart over HTTP,
    so the next attempt cannot reach it and the run fails after the policy's attempts."""
    model = ScriptedModel([tool_call("read_and_crash")])
    async with server.tools(retry=QUICK) as notes:
        agent = Agent[None](name="notes", tools=notes.tools)
        result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Read")
    assert result.history[2:5] == ("ToolCalling", "Retrying", "ToolCalling")
    assert isinstance(result.final, Failed)
    assert "could not be started or reached" in result.final.reason


async def test_a_call_past_its_timeout_is_cancelled_and_retried_as_a_read(
    shared: NotesHTTPServer,
) -> None:
    """slow_read outlasts the tool's timeout: TimeoutError, Retrying, then Failed."""
    model = ScriptedModel([tool_call("slow_read", {"seconds": 5})])
    async with shared.tools(retry=QUICK, timeout=0.3) as notes:
        agent = Agent[None](name="notes", tools=notes.tools)
        result = await Runner(agent, model=model, gate=AutoDenyGate()).run(None, "Slow")
    assert result.history[2:5] == ("ToolCalling", "Retrying", "ToolCalling")
    assert isinstance(result.final, Failed)
    assert result.final.reason.endswith("last error: timed out")


async def test_a_paused_durable_run_resumes_against_a_restarted_server_and_writes_once(
    server: NotesHTTPServer, tmp_path: Path
) -> None:
    """Paused for approval, the server restarted (a new process), the run resumed with the
    approval: it reconnects, adds the note once, and a second resume adds nothing."""
    store_path = tmp_path / "runs.sqlite3"
    turns = [tool_call("add_note", {"text": "bread"}), reply("Added.")]
    async with SQLiteCheckpointer(store_path) as store, server.tools() as notes:
        agent = Agent[None](name="notes", tools=notes.tools)
        runner = Runner(agent, model=ScriptedModel(turns[:1]), gate=LaterGate(), checkpointer=store)
        first = await runner.run(None, "Note bread", run_id="notes-1")
    assert isinstance(first.final, AwaitApproval)
    old = server.process
    server.stop()
    server.start()
    assert server.process is not old
    yes = Approve.of(first.final.request("notes-1"), by="ana@example.com")
    async with SQLiteCheckpointer(store_path) as store, server.tools() as notes:
        agent = Agent[None](name="notes", tools=notes.tools)
        runner = Runner(agent, model=ScriptedModel(turns[1:]), gate=LaterGate(), checkpointer=store)
        resumed = await runner.resume("notes-1", decision=yes)
        assert notes.connections == 1
    assert isinstance(resumed.final, Done)
    assert effects(server.notes) == ["add bread 1"]


def test_a_run_killed_after_the_write_resumes_in_a_new_process_without_writing_again(
    server: NotesHTTPServer, tmp_path: Path
) -> None:
    """The agent's process is killed right after add_note's result reached the ledger, before
    the next checkpoint; a new process connects again, resumes, and replays the note."""
    started = crash_run("start", str(tmp_path), "http", server.url)
    assert started["code"] == -9, started["err"]
    assert effects(server.notes) == ["add bread 1"]
    resumed = crash_run("resume", str(tmp_path), "http", server.url)
    assert resumed["code"] == 0, resumed["err"]
    out = resumed["out"]
    assert out["saved"] == "ToolCalling"
    assert out["effect_before_resume"] == "committed"
    assert out["final"] == "Done"
    assert out["history"][:2] == ["ToolCalling", "Observing"]
    assert effects(server.notes) == ["add bread 1"]  # written once, by the first process


class LaterGate:
    """A person who answers later: every request is Pending."""

    async def decide(self, request: Any) -> Pending:
        return Pending(reason="sent to the owner")
