"""What every route needs: the database, the settings and the change hub of this process."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from ..settings import ServerSettings
from ..store.db import Database
from .hub import ChangeHub


@dataclass
class ServerContext:
    db: Database
    settings: ServerSettings
    hub: ChangeHub
    waits: dict[str, int] = field(default_factory=dict)
    """Long-polls held open now, per token id (changed on the event loop only)."""


async def context(request: Request) -> ServerContext:
    """The process's context. A coroutine, so FastAPI calls it on the event loop: a plain
    function dependency would cost every request a round trip through the thread pool."""
    found: ServerContext = request.app.state.context
    return found


__all__ = ["ServerContext", "context"]
