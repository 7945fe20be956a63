"""Serving until Ctrl-C or SIGTERM, then returning: the command's own clean-up runs, and it
exits 0.

uvicorn stops gracefully on either signal, then raises it again once it is done (so that the
handler in place before it ran decides what happens). With Python's defaults that is a
``KeyboardInterrupt`` (click prints ``Aborted!`` and exits 1) or a death by SIGTERM that skips
every ``finally`` of the command: ``agent-saga ui`` then neither shipped what was left nor
revoked its shipping token. Here the handler in place is one that does nothing, so
:func:`run_until_stopped` returns normally.
"""

from __future__ import annotations

import signal
import socket
import threading
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn


def _noted(signum: int, frame: FrameType | None) -> None:
    """Where uvicorn raises the signal again once it has stopped: nothing more to do."""


def run_until_stopped(config: uvicorn.Config, sock: socket.socket) -> None:
    """Serve ``config``'s app on ``sock`` until SIGINT or SIGTERM; return once it has stopped.

    In the main thread, the two signals' handlers are this module's while it runs, and the
    previous ones again when it returns (a second Ctrl-C during the caller's clean-up acts as
    before). Elsewhere (no signals there), uvicorn's own behaviour is kept.
    """
    import uvicorn

    watched = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _noted) for sig in watched} if main else {}
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["run_until_stopped"]
