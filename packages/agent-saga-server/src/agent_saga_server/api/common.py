"""Pieces the route modules share: documented error responses and paging parameters."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from .models import Problem
from .strict import StrictRoute


def problem(description: str) -> dict[str, Any]:
    return {"model": Problem, "description": description}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: problem("malformed request: bad JSON, a wrong type, a bad parameter"),
    401: problem("no token, or one that is malformed, unknown, expired or revoked"),
    403: problem("the token's scope or origin does not allow this"),
    413: problem("the body is larger than the server accepts"),
    415: problem("the body is not application/json"),
    503: problem("the database cannot be reached"),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: problem("no such item")}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: problem("conflicts with what the server holds (kept as evidence)")
}
UNPROCESSABLE: dict[int | str, dict[str, Any]] = {
    422: problem("well-formed but not acceptable (the message says why)")
}

Limit = Annotated[int, Query(ge=1, le=500, description="items per page (at most 500)")]
Cursor = Annotated[
    str | None, Query(pattern=r"^[0-9]{20}-[0-9a-f]{8}$", description="`next` of the previous page")
]


def router(tag: str) -> APIRouter:
    return APIRouter(prefix="/v1", tags=[tag], route_class=StrictRoute, responses=ERRORS)


def not_found(what: str) -> HTTPException:
    return HTTPException(404, f"no {what}")


__all__ = [
    "CONFLICT",
    "ERRORS",
    "NOT_FOUND",
    "UNPROCESSABLE",
    "Cursor",
    "Limit",
    "not_found",
    "problem",
    "router",
]
