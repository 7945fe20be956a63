"""What every dashboard route shares: the Host allow-list, the session, CSRF, and rendering.

* **Host allow-list**: a request whose ``Host`` names another host than the allowed ones is a
  421 before anything else runs, so a page on an attacker's domain that resolves to 127.0.0.1
  (DNS rebinding) cannot read the dashboard.
* **Session**: pages need a valid session cookie; without one a page redirects to the login
  page and a form or stream answers 401.
* **CSRF**: every state-changing form carries the session's CSRF token (checked in constant
  time); a foreign ``Origin`` header is refused as well.
* **Rendering**: Jinja2 templates with autoescaping on, so log data is always text, never
  markup; every page carries a Content-Security-Policy that allows no inline script and
  nothing from another origin.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined

from ..store.db import Database
from . import sessions
from .home import LocalHome
from .sessions import Viewer

HERE = Path(__file__).resolve().parent
PREFIX = "/ui"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
_TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass
class DashboardConfig:
    """How the dashboard is served by one process (kept in ``app.state.dashboard``).

    Args:
        db: the control plane's database (the dashboard's tables live there too).
        hosts: host names the ``Host`` header may name (without port).
        home: see the attribute.
    """

    db: Database
    hosts: set[str] = field(default_factory=lambda: set(LOCAL_HOSTS))
    home: LocalHome | None = None
    """The plain home ``agent-saga ui`` serves (its kill switch and approvals are acted on
    too); ``None`` under ``cloud-server``."""


class NeedsLogin(Exception):
    """A page was asked for without a valid session (answered with a redirect to login)."""


def config(request: Request) -> DashboardConfig:
    found: DashboardConfig = request.app.state.dashboard
    return found


def host_name(header: str) -> str:
    """The host part of a ``Host`` header (``[::1]:8000`` -> ``::1``), lower case."""
    parsed = urlsplit(f"//{header}")
    try:
        return (parsed.hostname or "").lower()
    except ValueError:
        return ""


def allowed_host(request: Request) -> None:
    """Refuse (421) a request whose ``Host`` is not allow-listed."""
    hosts = config(request).hosts
    if host_name(request.headers.get("host", "")) not in hosts:
        raise HTTPException(421, "this host name is not allowed for the dashboard")


def current_viewer(request: Request) -> Viewer | None:
    return sessions.viewer(config(request).db, request.cookies.get(sessions.COOKIE))


def page_viewer(request: Request) -> Viewer:
    """The session's viewer for a page; no session: a redirect to the login page."""
    found = current_viewer(request)
    if found is None:
        raise NeedsLogin()
    return found


def api_viewer(request: Request) -> Viewer:
    """The session's viewer for a stream or fetch; no session: a 401."""
    found = current_viewer(request)
    if found is None:
        raise HTTPException(401, "log in to the dashboard first")
    return found


def same_origin(request: Request) -> None:
    """Refuse (403) a state-changing request whose ``Origin`` is another site's."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if origin == "null" or urlsplit(origin).netloc != request.headers.get("host", ""):
        raise HTTPException(403, "a request from another site is refused")


def checked_viewer(
    request: Request,
    viewer: Annotated[Viewer, Depends(api_viewer)],
    csrf: Annotated[str, Form(max_length=200)] = "",
) -> Viewer:
    """The viewer of a state-changing form, whose CSRF token must match its session's."""
    same_origin(request)
    if not hmac.compare_digest(csrf.encode(), viewer.csrf.encode()):
        raise HTTPException(403, "the form's CSRF token is missing or wrong; reload the page")
    return viewer


PageViewer = Annotated[Viewer, Depends(page_viewer)]
FormViewer = Annotated[Viewer, Depends(checked_viewer)]
Config = Annotated[DashboardConfig, Depends(config)]


def render(name: str, viewer: Viewer | None, status: int = 200, **values: Any) -> HTMLResponse:
    """A page from a template, with the dashboard's headers; ``values`` are escaped."""
    html = _TEMPLATES.get_template(name).render(viewer=viewer, prefix=PREFIX, **values)
    return HTMLResponse(html, status, headers=page_headers())


def page_headers() -> dict[str, str]:
    """The headers of a dashboard answer (the app adds the rest). The referrer policy is
    ``same-origin``, not the API's ``no-referrer``: under that one browsers send ``Origin:
    null`` with a form, and :func:`same_origin` could not tell the dashboard's own forms."""
    return {
        "content-security-policy": CSP,
        "cache-control": "no-store",
        "referrer-policy": "same-origin",
    }


def redirect(path: str) -> Response:
    return RedirectResponse(PREFIX + path, 303, headers=page_headers())


__all__ = [
    "CSP",
    "Config",
    "DashboardConfig",
    "FormViewer",
    "NeedsLogin",
    "PREFIX",
    "PageViewer",
    "allowed_host",
    "api_viewer",
    "config",
    "host_name",
    "redirect",
    "render",
]
