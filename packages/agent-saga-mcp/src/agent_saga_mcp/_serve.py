"""Serving the gateway to MCP clients: over stdio (one client session: the process) or over
streamable HTTP (a session per ``Mcp-Session-Id``).

How a session ends decides its implicit saga (see :mod:`agent_saga_mcp._session`):

* stdio: end of input (the client closed the pipe) is a clean end: the saga commits (once
  the calls in progress are answered).
  SIGTERM or SIGINT stop the gateway: the open saga is rolled back. SIGKILL leaves it to
  ``agent-saga recover``.
* HTTP: a ``DELETE`` of the session (the SDK's client sends it on close) is a clean end: the
  saga commits before the DELETE is answered. A session with no request in flight for
  ``idle_timeout`` seconds, and every session still open when the gateway stops, is rolled
  back.

The HTTP server binds loopback addresses only: the gateway has no client authentication of its
own, and the SDK's DNS-rebinding protection is on for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import uvicorn  # a dependency of mcp (its streamable HTTP server runs on it)
from mcp.server.stdio import stdio_server
from starlette.types import ASGIApp, Receive, Scope, Send

from ._build import open_gateway
from ._config import GatewayConfig
from ._gateway import Gateway
from ._pipes import ClientLines, PipeLines, PipeWriter, client_pipes
from ._relay import Handoff, Relay
from ._upstream import LiveUpstreams
from ._wire import DEFAULT_LINE_LIMIT

LOOPBACK = ("127.0.0.1", "::1", "localhost")
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.asynccontextmanager
async def _running(config: GatewayConfig, home: Path | None) -> AsyncIterator[Gateway]:
    """A gateway for the duration of the block: its sessions ended (rolled back if the block
    raised or was cancelled), its upstreams stopped and its kit closed afterwards."""
    async with anyio.create_task_group() as group:
        gateway = await open_gateway(config, home, group)
        try:
            yield gateway
        finally:  # sessions still open here did not end cleanly
            with anyio.CancelScope(shield=True):
                await gateway.end_all(clean=False)
                if isinstance(gateway.upstreams, LiveUpstreams):
                    await gateway.upstreams.aclose()
    gateway.kit.close()


async def serve_stdio(
    config: GatewayConfig, home: Path | None, *, max_message_bytes: int = DEFAULT_LINE_LIMIT
) -> None:
    """Serve one client over this process's stdin and stdout until the client closes stdin
    (commit) or a signal stops the gateway (roll back).

    The client is served by the relay (:mod:`agent_saga_mcp._relay`); by the SDK's server when
    stdin or stdout is not a pipe, or when the client speaks the 2026 protocol era.
    """
    async with _running(config, home) as gateway:
        with anyio.CancelScope() as scope:
            stop = _on_signals(scope.cancel)
            try:
                async with client_pipes(max_message_bytes) as pipes:
                    await _serve_client(gateway, pipes)
            finally:
                stop()
        if scope.cancelled_caught:
            return  # _running rolls the session back
        await gateway.end_all(clean=True)


async def _serve_client(
    gateway: Gateway, pipes: tuple[ClientLines, asyncio.StreamWriter] | None
) -> None:
    lead: list[bytes] = []
    if pipes is not None:
        try:
            await Relay(gateway, *pipes).run()
            return
        except Handoff as handoff:
            lead = handoff.lines
    stdin = PipeLines(pipes[0], lead) if pipes is not None else None
    stdout = PipeWriter(pipes[1]) if pipes is not None else None
    server = gateway.server()
    async with stdio_server(cast(Any, stdin), cast(Any, stdout)) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _on_signals(action: Callable[[], None]) -> Callable[[], None]:
    """Run ``action`` on SIGTERM/SIGINT (on the event loop); returns the undo."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in _SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, action)
            installed.append(sig)

    def undo() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return undo


class SessionEnds:
    """ASGI middleware: ends a session's sagas on ``DELETE`` (cleanly, before answering it) and
    when it has been idle too long; counts requests in flight per session."""

    def __init__(self, app: ASGIApp, gateway: Gateway, path: str, idle_timeout: float | None):
        self.app, self.gateway, self.path = app, gateway, path
        self.idle_timeout = idle_timeout
        self.in_flight: dict[str, int] = {}
        self.last_seen: dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        session = _header(scope, b"mcp-session-id")
        if session is None:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "DELETE":
            await self.gateway.end_session(session, clean=True)
        with self._tracking(session):
            await self.app(scope, receive, send)

    @contextlib.contextmanager
    def _tracking(self, session: str) -> Iterator[None]:
        self.in_flight[session] = self.in_flight.get(session, 0) + 1
        try:
            yield
        finally:
            self.in_flight[session] -= 1
            self.last_seen[session] = time.monotonic()

    async def sweep(self) -> None:
        """Roll back the sagas of sessions idle for ``idle_timeout`` (runs until cancelled)."""
        if self.idle_timeout is None:
            return
        while True:
            await anyio.sleep(min(self.idle_timeout / 4, 30.0))
            now = time.monotonic()
            for session, seen in list(self.last_seen.items()):
                if self.in_flight.get(session, 0) == 0 and now - seen >= self.idle_timeout:
                    del self.last_seen[session]
                    self.in_flight.pop(session, None)
                    why = f"the session was idle for {self.idle_timeout:g} s"
                    await self.gateway.end_session(session, clean=False, why=why)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on a loopback ``host`` (``port`` 0: any free port).

    Raises:
        ValueError: ``host`` is not a loopback address.
        OSError: the address cannot be bound (its text names the address).
    """
    if host not in LOOPBACK:
        raise ValueError(
            f"the gateway serves loopback addresses only ({', '.join(LOOPBACK)}), not {host!r}: "
            "it has no client authentication of its own"
        )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


async def serve_http(
    config: GatewayConfig,
    home: Path | None,
    sock: socket.socket,
    *,
    path: str = "/mcp",
    idle_timeout: float | None = 1800.0,
    ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve MCP over streamable HTTP on ``sock`` until SIGTERM/SIGINT."""
    async with _running(config, home) as gateway:
        app = gateway.server().streamable_http_app(
            streamable_http_path=path,
            session_idle_timeout=idle_timeout,
            host=sock.getsockname()[0],
        )
        sessions = SessionEnds(app, gateway, path, idle_timeout)
        server = _QuietServer(
            uvicorn.Config(
                sessions,
                log_level="warning",
                lifespan="on",
                ws="none",
                # Clients hold a GET stream open for the server's messages: do not wait for
                # them to hang up before rolling their sessions back.
                timeout_graceful_shutdown=2,
            )
        )

        def exit_server() -> None:
            server.should_exit = True

        stop = _on_signals(exit_server)
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(sessions.sweep)
                ready(f"http://{shown}:{port}{path}")
                await server.serve(sockets=[sock])
                group.cancel_scope.cancel()
        finally:
            stop()


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the gateway's handlers stop it, then roll the
    open sessions back (uvicorn would re-raise the signal, ending the process before that)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


__all__ = ["LOOPBACK", "SessionEnds", "bind", "serve_http", "serve_stdio"]
