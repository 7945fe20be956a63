"""What every route needs: the database, the settings and the change hub of this process."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from ..settings import ServerSettings
from ..store.db import Database
from .hub import ChangeHub


@dataclass
class ServerContext:
    db: Database
    settings: ServerSettings
    hub: ChangeHub


def context(request: Request) -> ServerContext:
    found: ServerContext = request.app.state.context
    return found


__all__ = ["ServerContext", "context"]
