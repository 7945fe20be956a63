"""Sessions with the upstream MCP servers: started by command (stdio) or reached by URL.

Two ways to hold them:

* :class:`LiveUpstreams`, in the gateway: one connection per upstream for the gateway's lifetime,
  opened concurrently at start, shared by every client session. A command upstream is held at
  the message level (:class:`~agent_saga_mcp._link.StdioLink`: no SDK session in the path of a
  call); a URL upstream through the SDK's streamable HTTP client session, which lives in a task
  of its own, so its transport's cancel scopes open and close in one task.
* :class:`OnDemandUpstreams`, in a recovering process: an SDK client session per call, opened
  and closed around it. Recovery runs each compensation on a fresh event loop, so nothing is
  kept.

A tool call's result is validated as a ``CallToolResult`` and otherwise passed on as the
upstream sent it: the gateway does not check it against the tool's output schema (the end
client does, against the schema it was shown).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from ._config import GatewayConfig, UpstreamDecl
from ._link import StdioLink, UpstreamError
from ._version import __version__

_CLIENT_INFO = types.Implementation(name="agent-saga-mcp", version=__version__)
_MAX_PAGES = 1000


class UpstreamCaller(Protocol):
    """Something that can call a tool on a named upstream."""

    def call(
        self, upstream: str, tool: str, arguments: Mapping[str, Any]
    ) -> Awaitable[types.CallToolResult]:
        """The call, to be awaited (an ``async def`` is one)."""
        ...


def _cwd(decl: UpstreamDecl, base: Path | None) -> Path | None:
    cwd = Path(decl.cwd) if decl.cwd is not None else None
    if cwd is not None and base is not None and not cwd.is_absolute():
        cwd = base / cwd
    return cwd


def _environment(decl: UpstreamDecl) -> dict[str, str]:
    env = dict(decl.env)
    for name in decl.pass_env:
        value = os.environ.get(name)
        if value is None:
            raise UpstreamError(f"upstream '{decl.name}': environment variable {name} is not set")
        env[name] = value
    return env


@asynccontextmanager
async def connect(decl: UpstreamDecl, base: Path | None = None) -> AsyncIterator[ClientSession]:
    """An initialized client session with the upstream ``decl`` describes.

    ``base`` is the directory a relative ``cwd`` is resolved against (the configuration's).
    """
    if decl.command is not None:
        params = StdioServerParameters(
            command=decl.command,
            args=list(decl.args),
            env=_environment(decl) or None,
            cwd=_cwd(decl, base),
        )
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, client_info=_CLIENT_INFO) as session,
        ):
            await session.initialize()
            yield session
        return
    assert decl.url is not None
    headers = {}
    for header, variable in decl.headers_env.items():
        value = os.environ.get(variable)
        if value is None:
            raise UpstreamError(
                f"upstream '{decl.name}': environment variable {variable} is not set"
            )
        headers[header] = value
    http = None
    if headers:
        import httpx2  # the HTTP client the mcp SDK's transport uses

        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
    async with (
        _maybe(http),
        streamable_http_client(decl.url, http_client=http) as (read, write),
        ClientSession(read, write, client_info=_CLIENT_INFO) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def _maybe(client: Any) -> AsyncIterator[None]:
    if client is None:
        yield
        return
    async with client:
        yield


async def list_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool the upstream offers, across pages."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise UpstreamError(f"tools/list returned more than {_MAX_PAGES} pages")


async def call_tool(
    session: ClientSession, tool: str, arguments: Mapping[str, Any]
) -> types.CallToolResult:
    """One ``tools/call``, its result as the upstream sent it (not validated here)."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=tool, arguments=dict(arguments))
    )
    return await session.send_request(request, types.CallToolResult)


class LiveUpstreams:
    """The gateway's connections to its upstreams, opened at start, closed at stop."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.links: dict[str, StdioLink] = {}
        """Command upstreams, held at the message level."""
        self.sessions: dict[str, ClientSession] = {}
        """URL upstreams, through the SDK's client session."""
        self.catalogs: dict[str, list[types.Tool]] = {}
        self._stop = anyio.Event()

    async def start(self, group: TaskGroup) -> None:
        """Connect to every upstream concurrently and list its tools; each SDK session then
        lives in a task of ``group`` until :meth:`stop`.

        Raises:
            UpstreamError: an upstream could not be reached; the message names it. The
                upstreams already started are stopped.
        """
        failures: list[str] = []

        async def open_one(decl: UpstreamDecl) -> None:
            try:
                if decl.command is not None:
                    await self._link(decl)
                else:
                    await group.start(partial(self._hold, decl))
            except Exception as exc:
                failures.append(f"upstream '{decl.name}' ({decl.target}): {_describe(exc)}")

        async with anyio.create_task_group() as starting:
            for decl in self.config.upstreams.values():
                starting.start_soon(open_one, decl)
        if failures:
            await self.aclose()
            raise UpstreamError("cannot start: " + "; ".join(sorted(failures)))

    async def _link(self, decl: UpstreamDecl) -> None:
        assert decl.command is not None
        link = await StdioLink.start(
            decl.name,
            decl.command,
            list(decl.args),
            _environment(decl),
            _cwd(decl, self.config.path.parent),
        )
        self.links[decl.name] = link
        try:
            self.catalogs[decl.name] = await link.list_tools()
        except BaseException:
            await link.close()
            raise

    async def _hold(self, decl: UpstreamDecl, *, task_status: TaskStatus[None]) -> None:
        async with connect(decl, self.config.path.parent) as session:
            self.catalogs[decl.name] = await list_tools(session)
            self.sessions[decl.name] = session
            task_status.started()
            await self._stop.wait()

    def stop(self) -> None:
        """Ask every upstream to stop (SDK sessions end, command upstreams' stdin closes)."""
        self._stop.set()
        for link in self.links.values():
            link.stop()

    async def aclose(self) -> None:
        """:meth:`stop`, then wait for the command upstreams to exit (killing the ones that
        do not within their grace period)."""
        self.stop()
        await asyncio.gather(*(link.close() for link in self.links.values()))

    def call(
        self, upstream: str, tool: str, arguments: Mapping[str, Any]
    ) -> Awaitable[types.CallToolResult]:
        """The call, to be awaited: the link's or the SDK session's own coroutine (no
        coroutine of this method's in between: one frame less on each resume)."""
        link = self.links.get(upstream)
        if link is not None:
            return link.call_tool(tool, arguments)
        return call_tool(self.sessions[upstream], tool, arguments)


class OnDemandUpstreams:
    """Upstream calls for a process that holds no sessions (recovery): connect, call, close."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config

    async def call(
        self, upstream: str, tool: str, arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        decl = self.config.upstreams[upstream]
        async with connect(decl, self.config.path.parent) as session:
            return await call_tool(session, tool, arguments)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = [
    "LiveUpstreams",
    "OnDemandUpstreams",
    "UpstreamCaller",
    "UpstreamError",
    "call_tool",
    "connect",
    "list_tools",
]
