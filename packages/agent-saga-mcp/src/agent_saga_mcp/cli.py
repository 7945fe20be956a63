"""``agent-saga mcp``: the gateway's commands, added to ``agent-saga`` by entry point.

* ``agent-saga mcp serve --config gateway.toml`` serves MCP over stdio (what a client starts as
  a command), or with ``--http`` over streamable HTTP on a loopback port;
* ``agent-saga mcp check --config gateway.toml`` starts the upstreams, checks every declaration
  against their tools, prints what the gateway would expose, and writes nothing.

The log and everything else of agent-saga live in the home of ``agent-saga --home`` (else
``$AGENT_SAGA_HOME``, else the project configuration, else ``./.agent-saga``).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from agent_saga.cli import current_settings

if TYPE_CHECKING:  # the commands import the gateway (and the mcp SDK) when they run
    from ._config import GatewayConfig

_CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The gateway's configuration file (TOML).",
)


def _fail(exc: BaseException) -> click.ClickException:
    """The one-line error for a failure at start-up (unwrapping task-group exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        text = "; ".join(str(inner) for inner in exc.exceptions)
    else:
        text = str(exc)
    return click.ClickException(" ".join(text.split()))


def _load(path: Path) -> GatewayConfig:
    from ._config import ConfigError
    from ._config_read import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise _fail(exc) from None


@click.group()
def mcp() -> None:
    """The MCP gateway: transactions in front of any MCP server, for any MCP client."""


@mcp.command()
@_CONFIG
@click.option("--http", "http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address (--http).")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535),
              help="Port (--http); 0 picks a free one.")  # fmt: skip
@click.option("--path", "url_path", default="/mcp", show_default=True, help="Endpoint (--http).")
@click.option(
    "--idle-timeout",
    type=click.FloatRange(min=1.0),
    default=1800.0,
    show_default=True,
    help="Seconds after which an idle HTTP session's open saga is rolled back.",
)
@click.option(
    "--max-message-bytes",
    type=click.IntRange(min=1024),
    default=64 * 1024 * 1024,
    show_default=True,
    help="The longest message line accepted over stdio; a longer one is dropped with an error.",
)
def serve(
    config_path: Path,
    http: bool,
    host: str,
    port: int,
    url_path: str,
    idle_timeout: float,
    max_message_bytes: int,
) -> None:
    """Serve the gateway (stdio unless --http) until the client leaves or a signal stops it.

    A client session is one saga: it commits when the session ends cleanly (stdin closed, HTTP
    DELETE) and is rolled back when the gateway is stopped or the session idles out.
    """
    import anyio

    from ._config import ConfigError
    from ._serve import bind, serve_http, serve_stdio
    from ._upstream import UpstreamError

    config = _load(config_path)
    home = current_settings().home
    # What is loaded by now (the SDK's types, the engine, the configuration) lives as long as
    # the process: kept out of the collector's view, a full collection no longer walks it
    # (one took ~0.1 s every few thousand calls, about 0.05 ms a call on average).
    gc.freeze()
    try:
        if not http:
            anyio.run(lambda: serve_stdio(config, home, max_message_bytes=max_message_bytes))
            return
        sock = bind(host, port)

        def ready(url: str) -> None:
            print(f"agent-saga mcp: serving {url}", file=sys.stderr, flush=True)

        anyio.run(
            lambda: serve_http(
                config, home, sock, path=url_path, idle_timeout=idle_timeout, ready=ready
            )
        )
    except (ConfigError, UpstreamError, ValueError, OSError, BaseExceptionGroup) as exc:
        raise _fail(exc) from None


@mcp.command()
@_CONFIG
def check(config_path: Path) -> None:
    """Start the upstreams, check the configuration against their tools, list what is exposed."""
    import anyio
    from agent_saga import CompensatorRegistry

    from ._build import gate_rules
    from ._catalog import build_routes
    from ._config import ConfigError
    from ._gateway import guards_for
    from ._saga_tools import NAMES
    from ._upstream import LiveUpstreams, UpstreamError

    config = _load(config_path)

    async def run() -> list[tuple[str, str, str, str]]:
        upstreams = LiveUpstreams(config)
        async with anyio.create_task_group() as group:
            await upstreams.start(group)
            try:
                reserved = NAMES if config.saga_tools else frozenset()
                routes = build_routes(config, upstreams.catalogs, reserved)
                gate_rules(config, routes, None)
                guards = guards_for(config, routes, upstreams, CompensatorRegistry())
            finally:
                await upstreams.aclose()
        rows = []
        for name, route in routes.items():
            guard = guards[name]
            decl = route.decl
            undo = decl.compensate.tool if decl is not None and decl.compensate else "-"
            rows.append((name, f"{route.upstream}/{route.tool}", guard.semantics.value, undo))
        return rows

    try:
        rows = anyio.run(run)
    except (ConfigError, UpstreamError, BaseExceptionGroup) as exc:
        raise _fail(exc) from None
    width = [
        max(len(row[i]) for row in [("tool", "upstream", "semantics", "undo"), *rows])
        for i in range(4)
    ]
    for row in [("tool", "upstream", "semantics", "undo"), *rows]:
        click.echo("  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)).rstrip())
    hidden = sum(len(up.hide) for up in config.upstreams.values())
    click.echo(f"{len(rows)} tool(s) exposed, {hidden} hidden; the configuration is valid.")


__all__ = ["mcp"]
