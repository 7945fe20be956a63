"""Installing the app in many workspaces: slack-bolt's OAuth flow with stores that persist.

The OAuth exchange (``oauth.v2.access``), the state parameter and its browser cookie, and the
redirect handler are slack-bolt's and slack-sdk's; this module only chooses where their stores
live. By default both are SQLite files under ``<agent-saga home>/slack/`` (the directory is
created ``0700`` and the files ``0600``): the installation store keeps each workspace's bot
token, so the agents' :class:`~agent_saga_slack.SlackApprovalChannel` and the Slack app find the
same install. Secrets (client secret, signing secret) are read from arguments or the
environment and are never written by this package.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agent_saga import ConfigurationError
from agent_saga._config import resolve_home
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk.oauth.installation_store.sqlite3 import SQLite3InstallationStore
from slack_sdk.oauth.state_store.sqlite3 import SQLite3OAuthStateStore

CLIENT_ID_ENV = "SLACK_CLIENT_ID"
CLIENT_SECRET_ENV = "SLACK_CLIENT_SECRET"  # noqa: S105 - the variable's name, not a secret
REDIRECT_URI_ENV = "SLACK_REDIRECT_URI"
SCOPES = ("chat:write", "commands")
"""Bot scopes the app needs: post and update messages, receive the slash command."""
STATE_SECONDS = 600


def slack_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """``<agent-saga home>/slack``, created private to the owner."""
    path = resolve_home(home) / "slack"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _private_file(path: Path) -> str:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    return str(path)


def _required(value: str | None, env: str, what: str) -> str:
    found = value or os.environ.get(env)
    if not found:
        raise ConfigurationError(f"the Slack {what} is missing: pass it or set {env}")
    return found


def installation_store(
    home: str | os.PathLike[str] | None = None, *, client_id: str | None = None
) -> SQLite3InstallationStore:
    """The workspaces' installs (bot tokens) for app ``client_id`` ($SLACK_CLIENT_ID)."""
    client = _required(client_id, CLIENT_ID_ENV, "client id")
    database = _private_file(slack_dir(home) / "installations.sqlite3")
    return SQLite3InstallationStore(database=database, client_id=client)


def oauth_settings(
    *,
    home: str | os.PathLike[str] | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    redirect_uri: str | None = None,
    scopes: Sequence[str] = SCOPES,
    authorization_url: str | None = None,
) -> OAuthSettings:
    """slack-bolt OAuth settings for a multi-workspace install of the approvals app.

    ``GET /slack/install`` starts an install (a fresh state, kept in the state store and in a
    browser cookie); ``GET /slack/oauth_redirect`` checks both, exchanges the code with
    ``oauth.v2.access`` and saves the install. Missing values come from ``$SLACK_CLIENT_ID``,
    ``$SLACK_CLIENT_SECRET`` and ``$SLACK_REDIRECT_URI``.
    """
    client = _required(client_id, CLIENT_ID_ENV, "client id")
    return OAuthSettings(
        client_id=client,
        client_secret=_required(client_secret, CLIENT_SECRET_ENV, "client secret"),
        scopes=list(scopes),
        redirect_uri=redirect_uri or os.environ.get(REDIRECT_URI_ENV),
        authorization_url=authorization_url,
        installation_store=installation_store(home, client_id=client),
        state_store=SQLite3OAuthStateStore(
            database=_private_file(slack_dir(home) / "oauth-state.sqlite3"),
            expiration_seconds=STATE_SECONDS,
        ),
        state_expiration_seconds=STATE_SECONDS,
    )


def build_oauth_install_url(settings: OAuthSettings, state: str | None = None) -> str:
    """The Slack authorize URL an installer opens (``state`` issued from the store if omitted).

    This is the URL ``/slack/install`` links to. The redirect handler also checks the state
    cookie set by ``/slack/install``, so a URL built here and opened in another browser is
    refused at the redirect: hand people the ``/slack/install`` page, not this URL.
    """
    issued = state if state is not None else settings.state_store.issue()
    return settings.authorize_url_generator.generate(issued)
