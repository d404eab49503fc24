"""The tools of one MCP server as tools of an agent: read or write by the server's annotations.

:class:`MCPTools` connects (stdio or streamable HTTP), lists the server's tools and makes
each a :class:`~statemachine.ReadTool` or a :class:`~statemachine.WriteTool` through the
public ``read_tool`` / ``write_tool``, so a tool found at run time is routed by its
effect like any other (``ReadCall | WriteCall | InvalidCall``) and every write waits in
``AwaitApproval``. The rule (:func:`declared_effect`): ``readOnlyHint: true`` is a read,
anything else a write; ``idempotentHint: true`` makes a write idempotent (retried, and
re-sent under its idempotency key after a crash). An agent may override a tool's effect
towards more caution; towards less only with ``dangerously_allow_less_caution=True``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TextIO, cast, final

import anyio
from mcp.client import Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, RequestParamsMeta, TextContent
from mcp_types import Tool as MCPTool
from opentelemetry import trace

from .._errors import SetupError
from .._retry import RetryPolicy
from .._tools import ReadTool, Tool, WriteTool, current_idempotency_key, read_tool, write_tool
from ._arguments import MCPArguments, arguments_model, to_wire
from ._connection import Connection, MCPCallError, MCPUnavailableError

__all__ = ["IDEMPOTENCY_KEY_META", "Effect", "MCPTools", "declared_effect"]

Effect = Literal["read", "idempotent write", "write"]
# How cautious each effect is: an override may move a tool up this scale freely, and
# down it only with dangerously_allow_less_caution=True.
_CAUTION: Mapping[Effect, int] = {"read": 0, "idempotent write": 1, "write": 2}
# Where a write call's idempotency key travels, in the request's _meta, for a server
# that can use it to act once per key.
IDEMPOTENCY_KEY_META: Final = "io.statemachine/idempotency-key"
DEFAULT_MCP_TIMEOUT = 30.0


def declared_effect(tool: MCPTool) -> Effect:
    """The effect ``tool``'s annotations declare.

    ``readOnlyHint: true`` is a read, unless ``destructiveHint: true`` contradicts it
    (then the cautious reading wins: a write); every other tool, annotated or not, is a
    write; a write with ``idempotentHint: true`` is an idempotent write.
    """
    hints = tool.annotations
    if hints is None:
        return "write"
    if hints.read_only_hint is True and hints.destructive_hint is not True:
        return "read"
    return "idempotent write" if hints.idempotent_hint is True else "write"


def _stderr() -> TextIO:
    """Where a server's standard error goes by default: this process's, if it is a file.

    ``sys.stderr`` replaced by an object without a file descriptor (a test's capture, a
    notebook) cannot be handed to a process; the interpreter's own standard error can.
    """
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (OSError, ValueError, AttributeError):
            continue
    raise SetupError(
        "the MCP server's standard error has nowhere to go (sys.stderr has no file "
        "descriptor); pass errlog= an open file"
    )


def _log() -> Any:
    import structlog

    return structlog.wrap_logger(logging.getLogger("statemachine.mcp"))


def _output(result: CallToolResult) -> Any:
    """What the model is shown of a tool's result (and the ledger records)."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, TextContent):
            parts.append(item.text)
        else:
            parts.append(f"[{item.type} content, not shown]")
    text = "\n".join(parts)
    if result.is_error:
        # The tool ran and reported a failure: the model reads it and may correct itself.
        return {"error": text or "the tool reported an error without a message"}
    if result.structured_content is not None:
        return result.structured_content
    return text


@final
class MCPTools:
    """The tools of one MCP server, connected for as long as ``async with`` lasts.

    ``server`` names it in spans, log events and errors. Make one with :meth:`stdio` or
    :meth:`http`; inside ``async with``, :attr:`tools` are the agent's tools. A call
    after the server died reconnects (starts the process again); a resumed run makes a
    new ``MCPTools`` the same way, and the side-effect ledger keeps a write it already
    made from running twice.
    """

    __slots__ = (
        "_connection",
        "_effects",
        "_entered",
        "_exclude",
        "_less_caution",
        "_overrides",
        "_prefix",
        "_retry",
        "_timeout",
        "_tools",
        "_tracer",
        "server",
    )

    def __init__(
        self,
        server: str,
        transport: Callable[[], Transport],
        *,
        overrides: Mapping[str, Effect] | None = None,
        dangerously_allow_less_caution: bool = False,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float = DEFAULT_MCP_TIMEOUT,
        retry: RetryPolicy | None = None,
        tracer: trace.Tracer | None = None,
    ) -> None:
        """``transport`` makes a new transport for each connection (the SDK's ``Transport``).

        ``overrides`` sets a tool's effect by its server name; one less cautious than
        the server's annotations is refused unless ``dangerously_allow_less_caution``.
        ``exclude`` leaves tools out; ``prefix`` goes before each tool's name (two
        servers with a tool of the same name); ``timeout`` (seconds) bounds each call
        and the connect,
        ``retry`` replaces the agent's retry policy for the read and idempotent tools.
        """
        self.server = server
        self._connection = Connection(server, transport, connect_timeout=timeout)
        self._overrides: dict[str, Effect] = dict(overrides or {})
        for name, effect in self._overrides.items():
            if effect not in _CAUTION:
                raise SetupError(
                    f"override of MCP tool {name!r} on server {server!r}: {effect!r} is not an "
                    f"effect; use one of {', '.join(map(repr, _CAUTION))}"
                )
        self._less_caution = dangerously_allow_less_caution
        self._exclude = frozenset(exclude)
        self._prefix = prefix
        self._timeout = timeout
        self._retry = retry
        self._tracer = trace.get_tracer("statemachine.mcp") if tracer is None else tracer
        self._tools: dict[str, Tool] = {}
        self._effects: dict[str, tuple[Effect, Effect]] = {}
        self._entered = False

    @classmethod
    def stdio(
        cls,
        server: str,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        overrides: Mapping[str, Effect] | None = None,
        dangerously_allow_less_caution: bool = False,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float = DEFAULT_MCP_TIMEOUT,
        retry: RetryPolicy | None = None,
        tracer: trace.Tracer | None = None,
    ) -> MCPTools:
        """A server started as a process (``command args``) and spoken to over its stdin/stdout.

        The process is started on ``async with`` (again after it died) and ended when
        the block ends. Its standard error goes to ``errlog`` (default: this process's
        standard error).
        """
        parameters = StdioServerParameters(
            command=command, args=list(args), env=None if env is None else dict(env), cwd=cwd
        )

        def transport() -> Transport:
            return stdio_client(parameters, errlog=_stderr() if errlog is None else errlog)

        return cls(
            server,
            transport,
            overrides=overrides,
            dangerously_allow_less_caution=dangerously_allow_less_caution,
            exclude=exclude,
            prefix=prefix,
            timeout=timeout,
            retry=retry,
            tracer=tracer,
        )

    @classmethod
    def http(
        cls,
        server: str,
        url: str,
        *,
        overrides: Mapping[str, Effect] | None = None,
        dangerously_allow_less_caution: bool = False,
        exclude: Iterable[str] = (),
        prefix: str = "",
        timeout: float = DEFAULT_MCP_TIMEOUT,
        retry: RetryPolicy | None = None,
        tracer: trace.Tracer | None = None,
    ) -> MCPTools:
        """A server reached over streamable HTTP at ``url`` (e.g. ``http://127.0.0.1:8000/mcp``)."""

        def transport() -> Transport:
            return streamable_http_client(url)

        return cls(
            server,
            transport,
            overrides=overrides,
            dangerously_allow_less_caution=dangerously_allow_less_caution,
            exclude=exclude,
            prefix=prefix,
            timeout=timeout,
            retry=retry,
            tracer=tracer,
        )

    async def __aenter__(self) -> MCPTools:
        if self._entered:
            raise SetupError(
                f"MCPTools for server {self.server!r} was entered already; make a new one "
                "for each `async with` (a resumed run makes its own)"
            )
        self._entered = True
        await self._connection.__aenter__()
        try:
            with anyio.fail_after(self._timeout):
                listed = await self._connection.list_tools()
            self._build(listed)
        except TimeoutError:
            await self._connection.__aexit__(None, None, None)
            raise MCPUnavailableError(
                f"MCP server {self.server!r} did not list its tools within {self._timeout:g} s"
            ) from None
        except BaseException:
            await self._connection.__aexit__(None, None, None)
            raise
        _log().info(
            "mcp connected",
            server=self.server,
            tools=len(self._tools),
            reads=sum(1 for tool in self._tools.values() if isinstance(tool, ReadTool)),
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._connection.__aexit__(*exc_info)

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as the agent's (``Agent(tools=[*git.tools, ...])``)."""
        if not self._tools:
            self._require_entered()
        return tuple(self._tools.values())

    @property
    def connections(self) -> int:
        """How many times the server was connected (started) so far: 1, more after a loss."""
        return self._connection.opened

    def effect(self, name: str) -> Effect:
        """The effect tool ``name`` (its server name) has here, after any override."""
        return self._effect_pair(name)[1]

    def declared(self, name: str) -> Effect:
        """The effect the server's annotations declare for tool ``name``."""
        return self._effect_pair(name)[0]

    def read(self, name: str) -> ReadTool[MCPArguments]:
        """Read tool ``name`` (its server name); :class:`SetupError` if it is a write here."""
        tool = self._tool(name)
        if not isinstance(tool, ReadTool):
            raise SetupError(
                f"MCP tool {name!r} of server {self.server!r} is a {self.effect(name)} tool; "
                "use write() for it"
            )
        return tool

    def write(self, name: str) -> WriteTool[MCPArguments]:
        """Write tool ``name`` (its server name); :class:`SetupError` if it is a read here."""
        tool = self._tool(name)
        if not isinstance(tool, WriteTool):
            raise SetupError(
                f"MCP tool {name!r} of server {self.server!r} is a read tool; use read() for it"
            )
        return tool

    def _require_entered(self) -> None:
        if not self._entered:
            raise SetupError(
                f"the tools of MCP server {self.server!r} are known once it is connected: "
                "use them inside `async with` the MCPTools"
            )

    def _tool(self, name: str) -> Tool:
        self._require_entered()
        try:
            return self._tools[name]
        except KeyError:
            raise SetupError(
                f"MCP server {self.server!r} has no tool {name!r} here (its tools: "
                f"{', '.join(self._tools) or '(none)'})"
            ) from None

    def _effect_pair(self, name: str) -> tuple[Effect, Effect]:
        self._tool(name)
        return self._effects[name]

    def _build(self, listed: Sequence[MCPTool]) -> None:
        names = {tool.name for tool in listed}
        for wanted in (*self._overrides, *self._exclude):
            if wanted not in names:
                raise SetupError(
                    f"MCP server {self.server!r} has no tool {wanted!r} to override or exclude "
                    f"(its tools: {', '.join(sorted(names)) or '(none)'}); fix the name"
                )
        for listed_tool in listed:
            if listed_tool.name in self._exclude:
                continue
            declared = declared_effect(listed_tool)
            effect = self._overridden(listed_tool.name, declared)
            self._effects[listed_tool.name] = (declared, effect)
            self._tools[listed_tool.name] = self._make(listed_tool, effect)

    def _overridden(self, name: str, declared: Effect) -> Effect:
        effect = self._overrides.get(name, declared)
        if _CAUTION[effect] < _CAUTION[declared]:
            if not self._less_caution:
                raise SetupError(
                    f"MCP tool {name!r} of server {self.server!r} is declared {declared!r} by "
                    f"its annotations; an override to {effect!r} is less cautious and is "
                    "refused. Pass dangerously_allow_less_caution=True only if you have "
                    "checked what the tool does (a read runs without a person's approval)"
                )
            _log().warning(
                "mcp override less cautious",
                server=self.server,
                tool=name,
                declared=declared,
                effect=effect,
            )
        return effect

    def _make(self, listed: MCPTool, effect: Effect) -> Tool:
        model = arguments_model(listed.name, listed.input_schema)
        function = self._function(listed.name, effect, model)
        name = self._prefix + listed.name
        description = listed.description or listed.title or ""
        if effect == "read":
            return read_tool(
                name=name, description=description, timeout=self._timeout, retry=self._retry
            )(function)
        idempotent = effect == "idempotent write"
        return write_tool(
            name=name,
            description=description,
            timeout=self._timeout,
            retry=self._retry if idempotent else None,
            idempotent=idempotent,
        )(function)

    def _function(
        self, tool: str, effect: Effect, model: type[MCPArguments]
    ) -> Callable[[MCPArguments], Awaitable[Any]]:
        async def call(args: MCPArguments) -> Any:
            return await self._call(tool, effect, args)

        # The tool decorators read the arguments model off the annotation.
        call.__annotations__ = {"args": model, "return": Any}
        call.__name__ = call.__qualname__ = self._prefix + tool
        return call

    async def _call(self, tool: str, effect: Effect, args: MCPArguments) -> Any:
        key = current_idempotency_key()
        # mypy does not read the TypedDict's extra_items, which allow any key.
        meta = None if key is None else cast(RequestParamsMeta, {IDEMPOTENCY_KEY_META: key})
        keys = {"server": self.server, "tool": tool, "effect": effect}
        attributes = {"mcp.server": self.server, "mcp.tool": tool, "mcp.effect": effect}
        with self._tracer.start_as_current_span(f"mcp {self.server}/{tool}", attributes=attributes):
            try:
                result = await self._connection.call(tool, to_wire(args.model_dump()), meta)
            except MCPCallError as error:
                _log().warning("mcp call failed", **keys, error=str(error))
                raise
            _log().info("mcp call", **keys, is_error=result.is_error)
        return _output(result)
