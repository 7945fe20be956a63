"""Logging in and out of the dashboard.

* ``GET /ui/login?token=asl_...``: the link ``agent-saga ui`` prints. The one-time token is
  spent, a session cookie is set (HttpOnly, SameSite=Strict) and the browser is sent on to the
  sagas page, so the token leaves the address bar at once.
* ``POST /ui/login``: the same with a token pasted in the form: a login token, or a control
  plane token of scope admin, approver or auditor (how a fleet's risk team logs in to
  ``agent-saga cloud-server``). The session acts as that token's subject and scope, and ends
  when the token is revoked or expires.
* ``POST /ui/logout``: ends the session (CSRF-checked).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response

from ..store.tokens import authenticate
from . import sessions
from .web import PREFIX, Config, FormViewer, current_viewer, redirect, render, same_origin

pages = APIRouter()


def _signed_in(
    config: Config, request: Request, subject: str, role: str, token_id: str | None = None
) -> Response:
    cookie = sessions.open_session(config.db, subject, role, token_id)
    answer = redirect("/sagas")
    answer.set_cookie(
        sessions.COOKIE,
        cookie,
        max_age=int(sessions.SESSION_TTL),
        path=PREFIX,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return answer


def _refused(request: Request) -> Response:
    message = "That login token is not valid: it is unknown, expired or already used."
    return render("login.html", current_viewer(request), 401, error=message)


@pages.get("/login")
def login_page(
    request: Request,
    config: Config,
    token: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """The login form, or the exchange of a login link's token for a session."""
    if token is None:
        return render("login.html", current_viewer(request), error=None)
    spent = sessions.spend_login(config.db, token)
    if spent is None:
        return _refused(request)
    return _signed_in(config, request, *spent)


@pages.post("/login")
def login_form(
    request: Request, config: Config, token: Annotated[str, Form(max_length=200)]
) -> Response:
    """A pasted login token or control-plane token exchanged for a session."""
    same_origin(request)
    token = token.strip()
    if token.startswith("asg_"):
        caller = authenticate(config.db, token)
        if caller is None or caller.scope not in sessions.ROLES:
            return _refused(request)
        return _signed_in(config, request, caller.subject, caller.scope, caller.token_id)
    spent = sessions.spend_login(config.db, token)
    if spent is None:
        return _refused(request)
    return _signed_in(config, request, *spent)


@pages.post("/logout")
def logout(viewer: FormViewer, config: Config) -> Response:
    sessions.end_session(config.db, viewer.session_id)
    answer = redirect("/login")
    answer.delete_cookie(sessions.COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return answer


__all__ = ["pages"]
