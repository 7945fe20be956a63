"""Strict input and safe output for every route.

* JSON bodies are parsed strictly (:func:`strict_json`): duplicate keys, ``NaN``/``Infinity``,
  lone surrogates, nesting deeper than 64 and non-UTF-8 bytes are a 400, before any model sees
  them. Models are pydantic strict models that forbid extra fields; a value of the wrong type is
  a 400 too, and the answer never echoes the input (FastAPI's default 422 does, and crashes on
  values it cannot encode).
* A body with another content type than ``application/json`` is a 415.
* A body larger than the limit is a 413 (:class:`BodyLimit`): at once when its
  ``Content-Length`` says so, else as soon as the bytes received pass the limit, so no larger
  body is ever buffered.
* Every response carries security headers; errors are ``{"detail": "one line"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio.to_thread
from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_DEPTH = 64
PARSE_ON_LOOP_BYTES = 64 * 1024
"""Bodies up to this size are parsed on the event loop; larger ones (an ingest batch takes
tens of milliseconds) in the thread pool, so the process keeps answering other requests (a
waiting agent's approval, kill-switch streams) meanwhile."""


class StrictModel(BaseModel):
    """A request body: strict types, no extra fields."""

    model_config = ConfigDict(strict=True, extra="forbid")


class BadJSON(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise BadJSON("duplicate key in a JSON object")
    return obj


def _constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if value in (_INFINITY, -_INFINITY):
        raise BadJSON("a number too large for a double")
    return value


_INFINITY = float("inf")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""Where a lone surrogate could come from: JSON text that is valid UTF-8 holds surrogates only
as ``\\uD800``-``\\uDFFF`` escapes (a pair of them is one character once decoded)."""


def _no_lone_surrogates(value: Any) -> None:
    for node in _nodes(value):
        texts = [node] if isinstance(node, str) else node.keys() if isinstance(node, dict) else ()
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise BadJSON("a lone surrogate is not text") from None


def _nodes(value: Any) -> Iterator[Any]:
    """Every value inside ``value`` (itself included), checking that no container is nested
    deeper than :data:`MAX_DEPTH`."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        yield node
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                raise BadJSON(f"nesting deeper than {MAX_DEPTH}")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)


def _containers_within_depth(value: Any) -> None:
    """Check that no container is nested deeper than :data:`MAX_DEPTH`, one level at a time
    (a list per level: no tuple per node, no ``isinstance`` per value)."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        if depth >= MAX_DEPTH:
            raise BadJSON(f"nesting deeper than {MAX_DEPTH}")
        below: list[Any] = []
        for node in level:
            for child in node.values() if type(node) is dict else node:
                if type(child) in _CONTAINERS:
                    below.append(child)
        level = below
        depth += 1


_CONTAINERS = (dict, list)  # what the parser makes: exact types, no subclasses


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_finite)


def strict_json(body: bytes) -> Any:
    """Parse ``body`` as one strict JSON value.

    The cost above the standard library's parser is a hook per object (duplicate keys), one
    check per float literal (overflow), a walk over the containers (depth), and a walk over
    every string only when the text holds a surrogate escape.

    Raises:
        BadJSON: invalid UTF-8 or JSON, duplicate keys, NaN/Infinity, lone surrogates, a number
            that overflows, or containers nested deeper than :data:`MAX_DEPTH`.
    """
    try:
        text = body.decode("utf-8")
        value = _DECODER.decode(text)
    except BadJSON:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadJSON(f"not valid JSON: {str(exc)[:120]}") from None
    if _SURROGATE_ESCAPE.search(text):
        _no_lone_surrogates(value)
    else:
        _containers_within_depth(value)
    return value


class StrictRequest(Request):
    """A request whose JSON body is parsed by :func:`strict_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_strict_json"):
            content_type = self.headers.get("content-type", "").split(";")[0].strip().lower()
            if content_type != "application/json":
                raise HTTPException(415, "the body must be application/json")
            body = await self.body()
            try:
                if len(body) > PARSE_ON_LOOP_BYTES:  # a batch of records: not on the event loop
                    self._strict_json = await anyio.to_thread.run_sync(strict_json, body)
                else:
                    self._strict_json = strict_json(body)
            except BadJSON as exc:
                raise HTTPException(400, f"bad JSON body: {exc}") from None
        return self._strict_json


class StrictRoute(APIRoute):
    """Routes whose handlers see a :class:`StrictRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            strict = StrictRequest(request.scope, request.receive)
            if strict.method in ("POST", "PUT", "PATCH") and await strict.body():
                await strict.json()  # 415 or 400 before any model or handler sees it
            return await handler(strict)

        return strict_handler


def _first_problem(exc: RequestValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg", "invalid"))
    return f"{where}: {message}" if where else message


async def validation_error(request: Request, exc: Exception) -> Response:
    """A 400 naming the first wrong field; the input itself is never echoed."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": f"invalid request: {_first_problem(exc)}"[:300]}, 400)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else "request refused"
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method of the path, not only the first route's
        named = {m.strip() for m in headers.get("Allow", "").split(",") if m.strip()}
        headers["Allow"] = ", ".join(sorted(_methods(request) | named))
    return JSONResponse({"detail": detail}, exc.status_code, headers=headers)


def _methods(request: Request) -> set[str]:
    """Every method some route serves at the request's path (routers included in the app are
    walked: FastAPI keeps their routes behind an ``original_router``)."""
    path = request.scope.get("path", "")
    found: set[str] = set()
    pending: list[Any] = list(request.app.routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)
        if inner is not None:
            pending.extend(inner.routes)
            continue
        regex = getattr(route, "path_regex", None)
        methods = getattr(route, "methods", None)
        if regex is not None and methods and regex.match(path):
            found.update(methods)
    return found


async def unexpected_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": "internal error"}, 500)


API_HEADERS = {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "cross-origin-resource-policy": "same-origin",
}


class BodyLimit:
    """Refuses a request body larger than ``limit`` bytes with a 413 (see the module docstring).

    Placed inside :class:`SecurityHeaders`, so its answers carry the headers too.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the body is larger than {self.limit} bytes"
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await JSONResponse({"detail": too_large}, 413)(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise StarletteHTTPException(413, too_large)
            return message

        await self.app(scope, counted, send)


class SecurityHeaders:
    """Adds :data:`API_HEADERS` to every response, each unless the response has set it (the
    docs page sets its own Content-Security-Policy)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in API_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


__all__ = [
    "BadJSON",
    "BodyLimit",
    "SecurityHeaders",
    "StrictModel",
    "StrictRequest",
    "StrictRoute",
    "http_error",
    "strict_json",
    "unexpected_error",
    "validation_error",
]
