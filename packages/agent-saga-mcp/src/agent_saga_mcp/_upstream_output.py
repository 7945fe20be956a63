"""The output of an upstream MCP server the gateway started, read from a pipe of the link's
own and split into lines as it arrives (see :mod:`agent_saga_mcp._link`).

Invariant: lines are handed over in order, each once, then the end of output once; lines that
arrive before the receiver is attached are kept and handed over by :meth:`OutputLines.attach`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from . import _wire

__all__ = ["OutputLines"]


class OutputLines(asyncio.Protocol):
    """The upstream's output (a pipe of the link's own, not one of the subprocess transport's),
    split into lines as it arrives and handed to the link's callbacks (:meth:`attach`) in the
    read callback itself: the subprocess transport would hand
    each chunk on through one more loop iteration (``call_soon``). Lines that arrive before the
    link is attached wait for it."""

    def __init__(self, limit: int) -> None:
        self.splitter = _wire.LineSplitter(limit)
        self.transport: asyncio.ReadTransport | None = None
        self.on_lines: Callable[[list[bytes | _wire.Oversized]], None] | None = None
        self.on_end: Callable[[BaseException | None], None] | None = None
        self.early: list[bytes | _wire.Oversized] = []
        self.closed = False
        """Whether the output has closed."""
        self.closed_by: BaseException | None = None
        """The error that closed the output, if any."""

    def attach(
        self,
        on_lines: Callable[[list[bytes | _wire.Oversized]], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        """Hand lines to ``on_lines`` and the end of output to ``on_end`` from now on (what
        arrived before is handed over at once)."""
        self.on_lines, self.on_end = on_lines, on_end
        early, self.early = self.early, []
        if early:
            on_lines(early)
        if self.closed:
            on_end(self.closed_by)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        lines = self.splitter.feed(data)
        if not lines:
            return
        if self.on_lines is None:
            self.early.extend(lines)
        else:
            self.on_lines(lines)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        tail = self.splitter.end()
        self.closed, self.closed_by = True, exc
        if self.on_lines is None or self.on_end is None:
            if tail is not None:
                self.early.append(tail)
            return
        if tail is not None:
            self.on_lines([tail])
        self.on_end(exc)
