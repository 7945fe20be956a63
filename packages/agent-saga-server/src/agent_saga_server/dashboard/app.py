"""Mounting the dashboard on the control plane's app: its routes under ``/ui``, its static files
(vendored, served from this package: no build step, nothing from another origin) and its
tables."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..store.db import Database
from . import (
    approvals,
    audit,
    control,
    designer,
    live,
    login,
    passkey_routes,
    passkeys,
    playground,
    sagas,
    sagas_live,
    sessions,
    status,
)
from .web import HERE, PREFIX, DashboardConfig, NeedsLogin, allowed_host, host_name, redirect


class HostChecked:
    """An ASGI app (the static files) behind the dashboard's Host allow-list (421 otherwise)."""

    def __init__(self, app: ASGIApp, config: DashboardConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = host_name(Headers(scope=scope).get("host", ""))
        if scope["type"] == "http" and host not in self.config.hosts:
            refused = PlainTextResponse("this host name is not allowed for the dashboard", 421)
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


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
    for module in (
        login,
        sagas_live,
        sagas,
        approvals,
        control,
        live,
        audit,
        passkey_routes,
        playground,
        designer,
        status,
    ):
        router.include_router(module.pages)
    app.include_router(router)
    static = StaticFiles(directory=HERE / "static")
    app.mount(PREFIX + "/static", HostChecked(static, config), name="dashboard-static")
    app.add_exception_handler(NeedsLogin, _to_login)
    return config


__all__ = ["mount"]
