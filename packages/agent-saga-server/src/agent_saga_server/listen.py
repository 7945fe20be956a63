"""Binding the listening socket of a server process (``cloud-server``, ``ui``)."""

from __future__ import annotations

import socket

import click

PORT = click.IntRange(0, 65535)
"""The type of a ``--port`` option (0: a free port): a number out of range is a usage error."""


def listen(host: str, port: int) -> tuple[socket.socket, str]:
    """A TCP socket bound to ``host:port`` (0: a free port) and listening, and its ``http://``
    base URL. It listens before the URL is printed: a client that connects at once waits in the
    backlog until the server accepts, rather than being refused.

    Raises:
        click.ClickException: the address cannot be bound (one line, with the address).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say so,
    # and a keep-alive answer written in two parts would wait for a delayed ACK (40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        sock.close()
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    return sock, f"http://{shown}:{sock.getsockname()[1]}"


__all__ = ["PORT", "listen"]
