"""MCP tool servers (``TURNSTILE_MCP_SERVERS_JSON``): their tools join the session tool registry.

Each configured server is connected at start-up by the official ``mcp`` SDK (a stdio server
is started as a child process; a streamable-HTTP server is reached by URL) in a task of its
own that holds the connection until ``close``. Its tools are registered as
``<server>__<tool>`` with the server's input schema (checked by jsonschema before a call),
the configured modes and time limit, and ``idempotent`` from the configuration or else from
the tool's ``idempotentHint``/``readOnlyHint`` annotations (re-run after a crash only then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from consumers.task_stop import cancel_and_wait
from consumers.tool_arguments import schema_check
from core.engine.tools.custom import TOOL_NAME
from core.engine.tools.registry import ALL_MODES, ToolDefinition, ToolOutcome
from core.errors import InvalidInput, Unavailable

if TYPE_CHECKING:  # the SDK takes ~1.7 s to import: only a service with MCP servers pays for it
    from mcp import Client
    from mcp.types import CallToolResult, Tool

SEPARATOR = "__"
MAX_TOOL_PAGES = 100

log = logging.getLogger(__name__)


class McpServerConfig(BaseModel):
    """One MCP tool server: ``command`` (stdio, started by turnstile) or ``url`` (streamable HTTP)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$", max_length=32)
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    modes: list[str] = Field(default_factory=lambda: sorted(ALL_MODES), min_length=1)
    timeout_s: float | None = Field(None, gt=0)
    idempotent: bool | None = None
    connect_timeout_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        unknown = sorted(set(self.modes) - ALL_MODES)
        if unknown:
            raise ValueError(f"unknown modes {unknown}; modes are {sorted(ALL_MODES)}")
        return self


def parse_mcp_servers(raw: str) -> list[McpServerConfig]:
    """The configured servers; InvalidInput saying what is wrong."""
    if not raw.strip():
        return []
    try:
        items = orjson.loads(raw)
        if not isinstance(items, list):
            raise InvalidInput("TURNSTILE_MCP_SERVERS_JSON must be a JSON list")
        servers = [McpServerConfig.model_validate(item) for item in items]
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise InvalidInput(f"TURNSTILE_MCP_SERVERS_JSON: {exc}") from exc
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise InvalidInput(f"TURNSTILE_MCP_SERVERS_JSON: server names must be unique, got {names}")
    return servers


class McpToolServer:
    """A connection to one MCP server, held by its own task from ``start`` to ``close``."""

    def __init__(self, config: McpServerConfig, default_timeout_s: float) -> None:
        self.config = config
        self._default_timeout_s = default_timeout_s
        self._client: Client | None = None
        self._listed: list[Tool] = []
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> list[ToolDefinition]:
        """Connect and list the tools; Unavailable when the server cannot be reached in time."""
        name = self.config.name
        self._task = asyncio.create_task(self._hold(), name=f"mcp-server-{name}")
        ready = asyncio.create_task(self._ready.wait())
        done, _ = await asyncio.wait({self._task, ready}, timeout=self.config.connect_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if self._ready.is_set():
            return self._definitions()
        error = self._task.exception() if self._task in done else None
        await self.close()
        why = f"{type(error).__name__}: {error}" if error else f"no answer within {self.config.connect_timeout_s} s"
        raise Unavailable(f"MCP server {name!r} could not be started: {why}")

    async def close(self) -> None:
        """Close the connection (a stdio server is stopped with it)."""
        self._stop.set()
        if self._task is None:
            return
        try:
            async with asyncio.timeout(10):
                await asyncio.shield(self._task)
        except TimeoutError:
            await cancel_and_wait(self._task)  # close()'s own cancellation still ends close()
        except Exception as exc:
            log.warning("MCP server %s ended with %r", self.config.name, exc)

    async def _hold(self) -> None:
        async with self._connection() as client:
            self._client = client
            self._listed = await self._list_tools(client)
            self._ready.set()
            await self._stop.wait()
        self._client = None

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Client]:
        import httpx2
        from mcp import Client, StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        c = self.config
        if c.command is not None:
            params = StdioServerParameters(command=c.command, args=c.args, env=c.env, cwd=c.cwd)
            async with Client(params) as client:
                yield client
            return
        assert c.url is not None
        # Our own per-tool time limit bounds a call; the HTTP client must not cut it shorter.
        timeout = httpx2.Timeout(c.connect_timeout_s, read=None)
        async with (
            httpx2.AsyncClient(headers=c.headers, timeout=timeout) as http,
            Client(streamable_http_client(c.url, http_client=http)) as client,
        ):
            yield client

    @staticmethod
    async def _list_tools(client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _definitions(self) -> list[ToolDefinition]:
        definitions = []
        for tool in self._listed:
            name = f"{self.config.name}{SEPARATOR}{tool.name}"
            if not TOOL_NAME.match(name):
                log.warning("MCP server %s: tool %r skipped (name %r is not 1-64 of [A-Za-z0-9_-])", self.config.name, tool.name, name)
                continue
            schema = dict(tool.input_schema)
            try:
                check = schema_check(schema, name)
            except InvalidInput as exc:
                log.warning("MCP server %s: tool %r skipped: %s", self.config.name, tool.name, exc)
                continue
            definitions.append(
                ToolDefinition(
                    name=name,
                    description=tool.description or tool.title or tool.name,
                    parameters=schema,
                    handler=self._handler(tool.name),
                    modes=frozenset(self.config.modes),
                    idempotent=self._idempotent(tool),
                    timeout_s=self.config.timeout_s or self._default_timeout_s,
                    check_arguments=check,
                )
            )
        return definitions

    def _idempotent(self, tool: Tool) -> bool:
        if self.config.idempotent is not None:
            return self.config.idempotent
        hints = tool.annotations
        return bool(hints is not None and (hints.idempotent_hint or hints.read_only_hint))

    def _handler(self, tool_name: str) -> Any:
        async def call(ctx: Any, args: dict[str, Any]) -> ToolOutcome:
            client = self._client
            if client is None or self._task is None or self._task.done():
                raise Unavailable(f"MCP server {self.config.name!r} is not connected")
            return outcome_of(await client.call_tool(tool_name, args))

        return call


def outcome_of(result: CallToolResult) -> ToolOutcome:
    """The model-visible result: the text blocks, else the structured content, else the block types."""
    from mcp.types import TextContent

    texts = [block.text for block in result.content if isinstance(block, TextContent)]
    if texts:
        content = "\n".join(texts)
    elif result.structured_content is not None:
        content = orjson.dumps(result.structured_content).decode()
    else:
        content = " ".join(f"[{getattr(block, 'type', 'content')}]" for block in result.content)
    return ToolOutcome(ok=not result.is_error, content=content)


class McpToolServers:
    """Every configured MCP server: started together, closed together."""

    def __init__(self, configs: list[McpServerConfig], default_timeout_s: float) -> None:
        self._servers = [McpToolServer(c, default_timeout_s) for c in configs]

    async def start(self) -> list[ToolDefinition]:
        """Connect every server and return their tools; on a failure the others are closed again."""
        tools: list[ToolDefinition] = []
        started: list[McpToolServer] = []
        try:
            for server in self._servers:
                found = await server.start()
                started.append(server)
                log.info("MCP server %s: %d tool(s): %s", server.config.name, len(found), ", ".join(t.name for t in found))
                tools.extend(found)
        except BaseException:
            for server in started:
                await server.close()
            raise
        return tools

    async def close(self) -> None:
        for server in self._servers:
            await server.close()
