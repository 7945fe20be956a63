"""The client's stdin and stdout as asyncio pipe streams, for serving MCP over stdio.

Pipes (and terminals and sockets) can be read and written by the event loop directly, with no
worker thread per message and no blocking read that a stop would have to wait out. Stdin is
split into lines as data arrives (:class:`ClientLines`): the relay (:mod:`agent_saga_mcp._relay`)
is handed each line in the loop's callback, with no reading task in between; :class:`PipeLines` and
:class:`PipeWriter` hand them to the SDK's ``stdio_server`` when a client is served by the SDK
instead. While they are in use, file descriptor 1 points at stderr, so nothing printed by
accident can corrupt the protocol stream.

When stdin or stdout is not such a file (a regular file), or stdin is a character device the
event loop cannot watch (``/dev/null``), :func:`client_pipes` yields ``None`` and the caller
serves through the SDK's default stdio transport.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ._wire import DEFAULT_LINE_LIMIT, LineSplitter, Oversized

Line = bytes | Oversized | None
"""A line of the client's, one over the limit, or ``None``: the end of its input."""

_QUEUE_LINES = 64
"""Lines queued for :meth:`ClientLines.next` before reading the pipe pauses."""


class ClientLines(asyncio.Protocol):
    """The client's stdin as lines of at most :attr:`limit` bytes, split as data arrives
    (:class:`~agent_saga_mcp._wire.LineSplitter`).

    While a sink is attached (:meth:`attach`), each line (and then ``None``, the end of
    input) is handed to it in the event loop's callback, in order; a sink that is unset
    mid-way leaves the rest queued. Otherwise lines queue for :meth:`next` (reading pauses
    while many are queued).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.splitter = LineSplitter(limit)
        self.sink: Callable[[Line], None] | None = None
        self.queue: deque[Line] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.ReadTransport | None = None
        self.ended = False
        self.paused: set[str] = set()
        """Why reading is paused: ``"queue"`` (:meth:`next` is behind), or the sink's reasons."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._deliver(self.splitter.feed(data))

    def eof_received(self) -> bool | None:
        self._end()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        tail = self.splitter.end()
        ending: list[Line] = [tail, None] if tail is not None else [None]
        self._deliver(ending)

    def _deliver(self, lines: list[bytes | Oversized] | list[Line]) -> None:
        """Hand ``lines`` to the sink, or queue them: while no sink is attached, and while
        reading is paused (the sink may pause it on any line: the rest wait for
        :meth:`resume`, so a client that reads none of its answers gets no more of them than
        the line that filled its pipe)."""
        for line in lines:
            if self.sink is not None and not self.paused and not self.queue:
                self.sink(line)
                continue
            self.queue.append(line)
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)
        if self.sink is None and len(self.queue) > _QUEUE_LINES:
            self.pause("queue")

    def _flush(self) -> None:
        """Hand the queued lines to the sink (until it pauses reading again)."""
        if self.sink is not None and self.queue and not self.paused:
            queued = list(self.queue)
            self.queue.clear()
            self._deliver(queued)

    def attach(self, sink: Callable[[Line], None] | None) -> None:
        """Hand lines to ``sink`` from now on, first the ones queued (``None``: queue them)."""
        self.sink = sink
        if sink is not None and self.queue:
            self.resume("queue")

    def pause(self, why: str) -> None:
        """Stop reading the pipe (and handing lines to the sink) until :meth:`resume` with the
        same ``why``."""
        if not self.paused and self.transport is not None and not self.ended:
            self.transport.pause_reading()
        self.paused.add(why)

    def resume(self, why: str) -> None:
        self.paused.discard(why)
        self._flush()
        if not self.paused and self.transport is not None and not self.ended:
            self.transport.resume_reading()

    async def next(self) -> bytes | Oversized | None:
        """The next queued line, waiting for one; ``None`` at the end (and ever after)."""
        while not self.queue:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        line = self.queue[0]
        if line is not None:
            self.queue.popleft()
        if len(self.queue) <= _QUEUE_LINES // 2 and "queue" in self.paused:
            self.resume("queue")
        return line


class PipeLines:
    """Lines of the client's pipe, as the SDK's ``async for line in stdin`` reads them: first
    the ``lead`` lines already read, then the rest. A line over the limit is left out (and
    said on stderr)."""

    def __init__(self, lines: ClientLines, lead: list[bytes] | None = None) -> None:
        self.lines = lines
        self.lead = list(lead or [])

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = self.lead.pop(0) if self.lead else await self.lines.next()
            if line is None:
                raise StopAsyncIteration
            if isinstance(line, Oversized):
                print(f"agent-saga mcp: dropped a {line.size}-byte message", file=sys.stderr)
                continue
            return line.decode("utf-8", errors="replace")


class PipeWriter:
    """The client's pipe, as the SDK's stdout writer uses it (``write`` then ``flush``)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


def _not_pollable(fd: int) -> bool:
    """Whether ``fd`` is a character device other than a terminal (``/dev/null``): the event
    loop accepts one as a pipe but cannot watch it (``epoll`` refuses), so it is read otherwise."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return True
    return stat.S_ISCHR(mode) and not os.isatty(fd)


@asynccontextmanager
async def client_pipes(
    limit: int = DEFAULT_LINE_LIMIT,
) -> AsyncIterator[tuple[ClientLines, asyncio.StreamWriter] | None]:
    """The client's stdin (lines of at most ``limit`` bytes) and stdout as event-loop streams,
    or ``None`` if they cannot be."""
    loop = asyncio.get_running_loop()
    if _not_pollable(0):
        yield None
        return
    stdin = os.fdopen(os.dup(0), "rb", buffering=0)
    stdout = os.fdopen(os.dup(1), "wb", buffering=0)
    try:
        read_transport, lines = await loop.connect_read_pipe(lambda: ClientLines(limit), stdin)
    except (OSError, ValueError):
        stdin.close()
        stdout.close()
        yield None
        return
    try:
        write_transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stdout
        )
    except (OSError, ValueError):
        read_transport.close()
        stdout.close()
        yield None
        return
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        yield lines, writer
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        read_transport.close()
        write_transport.close()


__all__ = ["ClientLines", "Line", "PipeLines", "PipeWriter", "client_pipes"]
