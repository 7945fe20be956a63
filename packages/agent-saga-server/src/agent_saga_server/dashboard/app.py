"""Mounting the dashboard on the control plane's app: its routes under ``/ui``, its static files
(vendored, served from this package: no build step, nothing from another origin) and its
tables."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from ..store.db import Database
from . import approvals, control, live, login, passkey_routes, passkeys, sagas, sessions
from .web import HERE, PREFIX, DashboardConfig, NeedsLogin, allowed_host, redirect


async def _to_login(request: Request, exc: Exception) -> Response:
    return redirect("/login")


def mount(app: FastAPI, db: Database, hosts: set[str] | None = None) -> DashboardConfig:
    """Serve the dashboard from ``app`` over ``db``; returns its configuration (whose
    ``hosts`` a caller may extend before serving)."""
    sessions.create_tables(db)
    passkeys.create_tables(db)
    config = DashboardConfig(db)
    if hosts:
        config.hosts |= hosts
    app.state.dashboard = config
    router = APIRouter(prefix=PREFIX, dependencies=[Depends(allowed_host)], include_in_schema=False)
    for module in (login, sagas, approvals, control, live, passkey_routes):
        router.include_router(module.pages)
    app.include_router(router)
    static = StaticFiles(directory=HERE / "static")
    app.mount(PREFIX + "/static", static, name="dashboard-static")
    app.add_exception_handler(NeedsLogin, _to_login)
    return config


__all__ = ["mount"]
