"""The FastAPI application: routes under ``/v1``, strict input, security headers, no CORS
unless asked for, a body limit, and one change hub per process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..dashboard import mount as mount_dashboard
from ..settings import ServerSettings
from ..store.db import Database, DatabaseUnavailable
from . import (
    routes_approvals,
    routes_audit,
    routes_budgets,
    routes_control,
    routes_ingest,
    routes_passkeys,
    routes_sagas,
)
from .context import ServerContext
from .docs_page import add_docs_page
from .hub import ChangeHub
from .ingest_body import ingest_schemas
from .strict import (
    BodyLimit,
    SecurityHeaders,
    http_error,
    unexpected_error,
    validation_error,
)

DESCRIPTION = """The agent-saga control plane for a fleet of agents.

Every call presents a bearer token (`Authorization: Bearer asg_...`) of one scope: **agent**
(ships its own origin's log, asks for approvals, reserves budget), **approver** (decides
approvals as the token's subject), **admin** (tokens, caps, the kill switch, approvers'
passkeys and their enrolment codes) or **auditor** (reads everything). Errors are
`{"detail": "..."}`.
"""


async def _database_down(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": "the control plane's database cannot be reached"}, 503)


def _document_ingest_body(app: FastAPI) -> None:
    """Add the ingest body's schemas (described, not declared: see :mod:`.ingest_body`) to the
    OpenAPI document's components."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            document.setdefault("components", {}).setdefault("schemas", {}).update(ingest_schemas())
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(db: Database, settings: ServerSettings | None = None) -> FastAPI:
    """The control plane over ``db``. The caller owns ``db`` (and closes it)."""
    settings = settings or ServerSettings()
    hub = ChangeHub(db, settings.watch_interval)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await hub.start()
        try:
            yield
        finally:
            await hub.stop()

    app = FastAPI(
        title="agent-saga control plane",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served by add_docs_page, from this server
        redoc_url=None,
    )
    app.state.context = ServerContext(db, settings, hub)
    _document_ingest_body(app)
    add_docs_page(app)
    for module in (
        routes_control, routes_ingest, routes_sagas, routes_approvals, routes_budgets,
        routes_audit, routes_passkeys,
    ):  # fmt: skip
        app.include_router(module.api)
    mount_dashboard(app, db)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(DatabaseUnavailable, _database_down)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(SecurityHeaders)
    return app


__all__ = ["create_app"]
