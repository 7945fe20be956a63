"""Serving the approvals app over HTTP: Starlette routes to mount in any Starlette/FastAPI app.

Needs the ``server`` extra (``pip install 'agent-saga-slack[server]'``). Requests are turned
into slack-bolt requests by slack-bolt's own Starlette adapter functions and handled by the
bolt app in a worker thread, so the event loop never waits on the log's fsync or on Slack:

- ``POST /slack/events``: slash commands and button clicks (set this URL as the slash command's
  Request URL and as Interactivity's Request URL);
- ``GET /slack/install`` and ``GET /slack/oauth_redirect``: the multi-workspace install (only
  when the app was built with ``oauth=``).

A body over 1 MB is refused (413) before it is read whole; a timestamp header that is not an
integer is refused (401) like any other request that fails verification.
"""

from __future__ import annotations

from collections.abc import Callable

from slack_bolt import BoltRequest, BoltResponse
from slack_bolt.adapter.starlette.handler import to_bolt_request, to_starlette_response
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._app import SlackApprovals

BODY_LIMIT = 1_000_000
EVENTS_PATH = "/slack/events"


async def _bounded_body(request: Request) -> bytes | None:
    declared = request.headers.get("content-length", "0")
    if not declared.isdigit() or int(declared) > BODY_LIMIT:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > BODY_LIMIT:
            return None
    return bytes(body)


def _endpoint(handle: Callable[[BoltRequest], BoltResponse]) -> Callable[[Request], object]:
    async def endpoint(request: Request) -> Response:
        body = await _bounded_body(request)
        if body is None:
            return Response("request body too large", status_code=413)
        timestamp = request.headers.get("x-slack-request-timestamp")
        if request.method == "POST" and (timestamp is None or not timestamp.isdigit()):
            return Response("invalid request", status_code=401)
        bolt_response = await run_in_threadpool(handle, to_bolt_request(request, body))
        return to_starlette_response(bolt_response)

    return endpoint


def slack_routes(approvals: SlackApprovals, *, events_path: str = EVENTS_PATH) -> list[Route]:
    """The app's routes, to add to an existing app (``api.router.routes.extend(...)``)."""
    routes = [Route(events_path, _endpoint(approvals.app.dispatch), methods=["POST"])]
    flow = approvals.app.oauth_flow
    if flow is not None:
        routes += [
            Route(flow.install_path, _endpoint(flow.handle_installation), methods=["GET"]),
            Route(flow.redirect_uri_path, _endpoint(flow.handle_callback), methods=["GET"]),
        ]
    return routes


def starlette_app(approvals: SlackApprovals, *, events_path: str = EVENTS_PATH) -> Starlette:
    """A Starlette app serving :func:`slack_routes`."""
    return Starlette(routes=slack_routes(approvals, events_path=events_path))
