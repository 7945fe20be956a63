"""Who is calling: a bearer token in the ``Authorization`` header, and the scopes a route allows.

Tokens are accepted only from the header (never from the query string or a cookie, so CSRF and
leaks through logs and referrers do not apply). A missing, malformed, unknown, expired or
revoked token is a 401; a valid token of a scope the route does not allow is a 403; an agent
token may only act for its own origin (403 otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

import anyio.to_thread
from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..store.db import Database
from ..store.tokens import Caller, Scope, authenticate
from .context import ServerContext, context

_bearer = HTTPBearer(auto_error=False, description="a control-plane token: asg_<id>_<secret>")
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def allow(*scopes: Scope) -> Callable[..., Awaitable[Caller]]:
    """A dependency that returns the caller when its token is valid and of one of ``scopes``."""

    async def caller(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ctx: Annotated[ServerContext, Depends(context)],
    ) -> Caller:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise HTTPException(401, "a bearer token is required", headers=_CHALLENGE)
        found = await _authenticated(ctx.db, credentials.credentials)
        if found is None:
            raise HTTPException(
                401, "the token is not valid (unknown, expired or revoked)", headers=_CHALLENGE
            )
        if found.scope not in scopes:
            raise HTTPException(403, f"a {found.scope} token may not do this")
        return found

    return caller


async def _authenticated(db: Database, presented: str) -> Caller | None:
    """:func:`..store.tokens.authenticate`: on SQLite on the event loop (one read by primary key,
    which in WAL mode never waits for a writer, costs less than a round trip through the thread
    pool), on PostgreSQL in the thread pool (a network round trip must not hold the loop)."""
    if db.kind == "sqlite":
        return authenticate(db, presented)
    return await anyio.to_thread.run_sync(authenticate, db, presented)


ORIGIN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
OriginPath = Annotated[str, Path(pattern=ORIGIN_PATTERN)]


def for_origin(*scopes: Scope) -> Callable[..., Awaitable[Caller]]:
    """:func:`allow`, and an agent token only for the ``{origin}`` of the path: a 403 before
    the body is looked at."""
    check = allow(*scopes)

    async def caller(origin: OriginPath, found: Caller) -> Caller:  # no thread-pool hop
        own_origin(found, origin)
        return found

    # a closure's variable cannot be named in a string annotation FastAPI resolves later
    caller.__annotations__["found"] = Annotated[Caller, Depends(check)]
    return caller


def own_origin(caller: Caller, origin: str) -> None:
    """Refuse (403) an agent token acting for another origin; other scopes pass."""
    if caller.scope == "agent" and caller.origin != origin:
        raise HTTPException(403, f"this agent token writes only origin {caller.origin}")


__all__ = ["ORIGIN_PATTERN", "OriginPath", "allow", "for_origin", "own_origin"]
