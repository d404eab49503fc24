"""One connection to an MCP server, kept open by a task of its own and opened again when lost.

The SDK's client is an async context manager whose tasks belong to the task that entered
it, so it cannot be entered by one tool call and left by another (a reconnect in the
middle of a run would be exactly that). :class:`Connection` keeps the client in a task
of its own task group (``_hold``): a tool call only borrows the open client, and a lost
connection is given up (``lost``) and opened again by the next call, in a new task of
the same group. Nothing the server does reaches the task that entered the connection:
the holding task catches what the client raises when the server dies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
from mcp.client import Client, Transport
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, RequestParamsMeta, Tool
from mcp_types.jsonrpc import CONNECTION_CLOSED, REQUEST_TIMEOUT

from .._errors import StatemachineError, ToolError

__all__ = ["Connection", "MCPCallError", "MCPUnavailableError"]

# JSON-RPC errors that the client itself raises for a connection that is gone.
_LOST = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT})


class MCPCallError(ToolError):
    """A call of an MCP tool failed: the server died, could not be reached, or broke the protocol.

    ``server`` and ``tool`` name where. A :class:`statemachine.ToolError`, so ``Retrying``
    retries it for a read tool and an idempotent write, and a write that is not
    idempotent goes to ``Failed`` (its message says to check the server's state).
    """

    def __init__(self, message: str, *, server: str, tool: str, retryable: bool = True) -> None:
        self.server = server
        self.tool = tool
        super().__init__(message, retryable=retryable)


class MCPUnavailableError(StatemachineError, ConnectionError):
    """An MCP server could not be started (stdio) or reached (HTTP) when it was connected."""


def _log() -> Any:
    import structlog

    return structlog.wrap_logger(logging.getLogger("statemachine.mcp"))


def _described(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_described(inner) for inner in error.exceptions)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Connection:
    """The open client of one MCP server, reopened after it was lost."""

    def __init__(
        self, server: str, transport: Callable[[], Transport], *, connect_timeout: float
    ) -> None:
        self.server = server
        self._transport = transport
        self._connect_timeout = connect_timeout
        self._group: anyio.abc.TaskGroup | None = None
        self._client: Client | None = None
        self._release = anyio.Event()
        self._lock = anyio.Lock()
        self.opened = 0  # how many times the server was connected (a restart counts)

    async def __aenter__(self) -> Connection:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            with anyio.fail_after(self._connect_timeout):
                await self._open()
        except TimeoutError:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            self._group = None
            raise MCPUnavailableError(
                f"MCP server {self.server!r} did not answer within {self._connect_timeout:g} s "
                "of being started or reached; check that the command or URL is an MCP server"
            ) from None
        except BaseException:
            # The failed start is raised here; the group has nothing else to report.
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            self._group = None
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        group, self._group = self._group, None
        self._client = None
        self._release.set()
        if group is not None:
            await group.__aexit__(None, None, None)

    async def _open(self) -> Client:
        if self._group is None:
            raise RuntimeError(
                f"the connection to MCP server {self.server!r} is closed; use its tools inside "
                "`async with` the MCPTools that made them"
            )
        client: Client = await self._group.start(self._hold)
        self._client = client
        self.opened += 1
        return client

    async def _hold(self, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        """Enter the client, hand it over, and keep it open until released or lost."""
        release = anyio.Event()
        started = False
        try:
            async with Client(self._transport(), cache=None) as client:
                self._release = release
                task_status.started(client)
                started = True
                await release.wait()
        except Exception as error:
            if not started:
                raise MCPUnavailableError(
                    f"MCP server {self.server!r} could not be started or reached "
                    f"({_described(error)}); check its command or URL, and that it runs"
                ) from error
            # The server died or the transport broke while the client was held: the
            # next call opens a new connection. Never raised: it would cancel the run.
            _log().warning("mcp connection lost", server=self.server, error=_described(error))
        finally:
            if started and self._release is release:
                self._client = None

    async def client(self) -> Client:
        """The open client, connecting (again) when there is none."""
        async with self._lock:
            if self._client is not None:
                return self._client
            _log().info("mcp connect", server=self.server, attempt=self.opened + 1)
            return await self._open()

    def lost(self, client: Client) -> None:
        """Give up ``client`` (its server died or broke the protocol); the next call reconnects."""
        if self._client is client:
            self._client = None
            self._release.set()

    async def list_tools(self) -> list[Tool]:
        """Every tool the server lists, page by page."""
        client = await self.client()
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(1000):  # a server whose pages never end cannot hang the connect
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise RuntimeError(f"MCP server {self.server!r} lists more than 1000 pages of tools")

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: RequestParamsMeta | None
    ) -> CallToolResult:
        """Call ``tool``; a failure of the server or the protocol is :class:`MCPCallError`."""
        try:
            client = await self.client()
        except MCPUnavailableError as error:
            raise MCPCallError(
                f"{error}; the call of {tool!r} was not sent", server=self.server, tool=tool
            ) from error
        try:
            return await client.call_tool(tool, arguments, meta=meta)
        except MCPError as error:
            if error.code not in _LOST:
                # The server answered with a JSON-RPC error: it refused the call, and the
                # connection is sound. The same call would be refused again.
                raise MCPCallError(
                    f"MCP server {self.server!r} refused the call of {tool!r} "
                    f"(JSON-RPC error {error.code}: {error.error.message})",
                    server=self.server,
                    tool=tool,
                    retryable=False,
                ) from error
            self.lost(client)
            raise self._broken(tool, error) from error
        except Exception as error:
            # Whatever broke (the process died, the HTTP stream ended, the reply did not
            # fit the protocol), this client is not trusted again.
            self.lost(client)
            raise self._broken(tool, error) from error

    def _broken(self, tool: str, error: Exception) -> MCPCallError:
        return MCPCallError(
            f"MCP server {self.server!r} failed during the call of {tool!r} "
            f"({_described(error)}); the call was not answered, so it may or may not have "
            "taken effect: check the server's state before calling it again",
            server=self.server,
            tool=tool,
        )
