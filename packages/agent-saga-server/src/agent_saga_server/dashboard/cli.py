"""``agent-saga ui``: the dashboard on the local home, with zero configuration.

It serves the control plane's app (dashboard under ``/ui``) over SQLite in the home
(``<home>/control-plane.sqlite3``), ships the home's own log into it in the background (origin
``local``), and prints the dashboard's URL and a one-time login link (valid 10 minutes; only
its hash is kept). The kill switch and the approval queue act on the home's own switch and
approvals too (:mod:`.home`), which its kits read. Only host names on the allow-list may
reach it (127.0.0.1, localhost, ::1, and each ``--allowed-host``).
"""

from __future__ import annotations

import getpass
import re

import click
from agent_saga.cli import current_settings

from ..listen import PORT, listen
from ..until_stopped import run_until_stopped
from .home import LOCAL_ORIGIN


def _viewer_name() -> str:
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = ""
    name = re.sub(r"[^A-Za-z0-9._:@-]", "-", name)[:100].lstrip("._:@-")
    return f"unix:{name}" if name else "operator"


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=PORT, help="0 picks a free port.")
@click.option("--as", "subject", default=None,
              help="Who the login link logs in as (an approver's identity); default: unix:<your "
              "login>, as `agent-saga approve` votes.")  # fmt: skip
@click.option("--allowed-host", multiple=True,
              help="Another host name browsers may reach the dashboard by.")  # fmt: skip
def ui(host: str, port: int, subject: str | None, allowed_host: tuple[str, ...]) -> None:
    """The dashboard on this home: sagas, approvals, kill switch, budgets, live log."""
    from ..store.tokens import NAME

    if subject is not None and not NAME.fullmatch(subject):  # as a token's subject must
        raise click.BadParameter(f"must match {NAME.pattern}, got {subject!r}", param_hint="'--as'")
    import uvicorn
    from agent_saga import FileLogStore

    from ..api.app import create_app
    from ..client.http import ServerClient
    from ..client.shipper import Shipper
    from ..store.db import open_database
    from ..store.tokens import issue, revoke
    from .home import LocalHome
    from .sessions import mint_login

    settings = current_settings()
    home = settings.home
    db = open_database(None, home)
    local = LocalHome(home, settings.open_kit)
    try:
        sock, base = listen(host, port)
        app = create_app(db)
        app.state.dashboard.hosts |= {h.lower() for h in allowed_host}
        app.state.dashboard.home = local
        token = mint_login(db, subject or _viewer_name(), "admin")
        print(
            f"agent-saga dashboard on {base}/ui/ ({db.kind}: {db.where})\n"
            f"log in with this link (once, within 10 minutes): {base}/ui/login?token={token}",
            flush=True,
        )
        agent_token, info = issue(db, "agent", LOCAL_ORIGIN, created_by="agent-saga ui")
        shipper = Shipper(ServerClient(base, agent_token), LOCAL_ORIGIN, FileLogStore(home), home)
        config = uvicorn.Config(
            app, log_level="warning", timeout_graceful_shutdown=2, access_log=False
        )
        try:
            run_until_stopped(config, sock)
        finally:
            shipper.close(deadline=1.0)
            revoke(db, info.id)
    finally:
        local.close()
        db.close()


__all__ = ["LOCAL_ORIGIN", "ui"]
