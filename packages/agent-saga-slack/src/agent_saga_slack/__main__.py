"""``python -m agent_saga_slack serve`` (or ``agent-saga-slack serve``): run the approvals app.

Configuration comes from the environment so that no secret is typed on a command line (where
``ps`` shows it) or written by this command: ``SLACK_SIGNING_SECRET`` (required), then either
``SLACK_BOT_TOKEN`` (one workspace) or ``SLACK_CLIENT_ID``, ``SLACK_CLIENT_SECRET`` and
``SLACK_REDIRECT_URI`` (install in many workspaces through ``/slack/install``). Votes go to the
log of the agent-saga home (``--home``, else ``AGENT_SAGA_HOME``, else the project's
configuration), the same log the agents write.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from agent_saga import ConfigurationError

from ._app import COMMAND, SlackApprovals
from ._install import CLIENT_ID_ENV, oauth_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-saga-slack", description="Slack approvals for agent-saga."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the Slack app over HTTP (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=3000, help="port (default 3000)")
    serve.add_argument("--home", default=None, help="the agent-saga home whose log to vote in")
    serve.add_argument(
        "--team", action="append", default=[], help="only this workspace id may vote (repeat)"
    )
    serve.add_argument("--slash-command", default=COMMAND, help=f"default {COMMAND}")
    return parser


def build(home: str | None, teams: Sequence[str], command: str) -> SlackApprovals:
    """The app as configured by the environment (OAuth when ``SLACK_CLIENT_ID`` is set)."""
    oauth = oauth_settings(home=home) if os.environ.get(CLIENT_ID_ENV) else None
    return SlackApprovals(home=home, oauth=oauth, teams=teams, command=command)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        import uvicorn

        from .asgi import starlette_app
    except ImportError as exc:
        raise SystemExit(
            f"agent-saga-slack serve needs the server extra: agent-saga-slack[server] ({exc})"
        ) from exc
    try:
        approvals = build(args.home, args.team, args.slash_command)
    except ConfigurationError as exc:
        raise SystemExit(f"Error: {exc}") from exc
    try:
        print(
            f"agent-saga-slack: serving {args.slash_command} on http://{args.host}:{args.port}"
            "/slack/events",
            file=sys.stderr,
            flush=True,
        )
        uvicorn.run(
            starlette_app(approvals), host=args.host, port=args.port, lifespan="off", ws="none"
        )
    finally:
        approvals.close()


if __name__ == "__main__":
    main()
