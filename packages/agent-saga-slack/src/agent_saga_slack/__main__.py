"""``python -m agent_saga_slack serve`` (or ``agent-saga-slack serve``): run the approvals app.

Configuration comes from the environment so that no secret is typed on a command line (where
``ps`` shows it) or written by this command: ``SLACK_SIGNING_SECRET`` (required), then either
``SLACK_BOT_TOKEN`` (one workspace) or ``SLACK_CLIENT_ID``, ``SLACK_CLIENT_SECRET`` and
``SLACK_REDIRECT_URI`` (install in many workspaces through ``/slack/install``). Votes go to the
log of the agent-saga home (``--home``, else ``AGENT_SAGA_HOME``, else the project's
configuration), the same log the agents write.

Everything that can stop a start (a bad option, a missing or refused token, Slack unreachable,
an unusable home, a port that cannot be listened on) is checked before serving and reported as
one ``Error: ...`` line on stderr with exit status 1 (2 for a malformed command line).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from agent_saga import ConfigurationError

from ._app import COMMAND, SlackApprovals
from ._bolt import workspace_ids
from ._channel import TOKEN_ENV
from ._install import CLIENT_ID_ENV, oauth_settings

USAGE_ERROR = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        _fail(f"{message} (see --help)", USAGE_ERROR)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agent-saga-slack", description="Slack approvals for agent-saga.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    serve = commands.add_parser("serve", help="serve the Slack app over HTTP (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    serve.add_argument("--port", default="3000", help="port, 1 to 65535 (default 3000)")
    serve.add_argument("--home", default=None, help="the agent-saga home whose log to vote in")
    serve.add_argument(
        "--team",
        action="append",
        default=[],
        help="only these workspace ids may vote (repeat, or separate with commas)",
    )
    serve.add_argument("--slash-command", default=COMMAND, help=f"default {COMMAND}")
    return parser


@dataclass(frozen=True)
class ServeOptions:
    """``serve``'s command line, checked."""

    host: str
    port: int
    home: str | None
    teams: frozenset[str]
    command: str


def parse(argv: Sequence[str] | None = None) -> ServeOptions:
    """The checked options (exits with one ``Error:`` line on a malformed command line).

    Raises:
        ConfigurationError: a port out of range or a workspace id that is not one.
    """
    args = _parser().parse_args(argv)
    port = str(args.port).strip()
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigurationError(f"--port takes a number from 1 to 65535, got {port[:20]!r}")
    teams = [team.strip() for option in args.team for team in option.split(",") if team.strip()]
    return ServeOptions(args.host, int(port), args.home, workspace_ids(teams), args.slash_command)


def build(home: str | None, teams: Sequence[str], command: str) -> SlackApprovals:
    """The app as configured by the environment (OAuth when ``SLACK_CLIENT_ID`` is set)."""
    oauth = None
    if os.environ.get(CLIENT_ID_ENV):
        if os.environ.get(TOKEN_ENV):
            raise ConfigurationError(
                f"both {TOKEN_ENV} (one workspace) and {CLIENT_ID_ENV} (install in many) are "
                "set: unset one"
            )
        oauth = oauth_settings(home=home)
    return SlackApprovals(home=home, oauth=oauth, teams=teams, command=command)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host:port``, for uvicorn to serve on.

    Raises:
        ConfigurationError: the address cannot be resolved or bound (in use, not allowed).
    """
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(f"cannot listen on {host}:{port}: {reason}") from exc


def main(argv: Sequence[str] | None = None) -> None:
    try:
        options = parse(argv)
        import uvicorn

        from .asgi import starlette_app
    except ConfigurationError as exc:
        _fail(str(exc))
    except ImportError as exc:
        _fail(f"agent-saga-slack serve needs the server extra: agent-saga-slack[server] ({exc})")
    try:
        sock = listen(options.host, options.port)
    except ConfigurationError as exc:
        _fail(str(exc))
    try:
        approvals = build(options.home, sorted(options.teams), options.command)
    except ConfigurationError as exc:
        sock.close()
        _fail(str(exc))
    try:
        print(
            f"agent-saga-slack: serving {options.command} on http://{options.host}:"
            f"{options.port}/slack/events",
            file=sys.stderr,
            flush=True,
        )
        config = uvicorn.Config(
            starlette_app(approvals),
            host=options.host,
            port=options.port,
            lifespan="off",
            ws="none",
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        approvals.close()


def _fail(message: str, status: int = 1) -> NoReturn:
    line = " ".join(message.split())  # one line, whatever the message
    print(f"Error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(status)


if __name__ == "__main__":
    main()
