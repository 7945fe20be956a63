"""Installing the app in many workspaces: slack-bolt's OAuth flow with stores that persist.

The OAuth exchange (``oauth.v2.access``), the state parameter and its browser cookie, and the
redirect handler are slack-bolt's and slack-sdk's; this module only chooses where their stores
live. By default both are SQLite files under ``<agent-saga home>/slack/`` (the directory is
created ``0700`` and the files ``0600``): the installation store keeps each workspace's bot
token, so the agents' :class:`~agent_saga_slack.SlackApprovalChannel` and the Slack app find the
same install. With token rotation on, that store refreshes each install's bot token before it
expires (see :class:`~agent_saga_slack.RotatingInstallationStore`). Secrets (client secret,
signing secret) are read from arguments or the environment and are never written by this
package.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from agent_saga import ConfigurationError
from agent_saga._config import resolve_home
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient
from slack_sdk.oauth.installation_store.sqlite3 import SQLite3InstallationStore
from slack_sdk.oauth.state_store.sqlite3 import SQLite3OAuthStateStore

from ._channel import API_URL_ENV
from ._tokens import CLIENT_SECRET_ENV, REFRESH_MINUTES, RotatingInstallationStore

CLIENT_ID_ENV = "SLACK_CLIENT_ID"
REDIRECT_URI_ENV = "SLACK_REDIRECT_URI"
SCOPES = ("chat:write", "commands")
"""Bot scopes the app needs: post and update messages, receive the slash command."""
STATE_SECONDS = 600
ROTATION_OFF_MINUTES = 10 * 365 * 24 * 60


def slack_dir(home: str | os.PathLike[str] | None = None) -> Path:
    """``<agent-saga home>/slack``, created private to the owner.

    Raises:
        ConfigurationError: the directory cannot be created (one line, with the path).
    """
    path = resolve_home(home) / "slack"
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"cannot create {path}: {exc.strerror or exc}") from exc
    return path


def _private_file(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigurationError(f"cannot open {path}: {exc.strerror or exc}") from exc
    os.close(fd)
    return str(path)


def _api_client(base_url: str | None) -> WebClient:
    return WebClient(base_url=base_url or os.environ.get(API_URL_ENV) or WebClient.BASE_URL)


def _required(value: str | None, env: str, what: str) -> str:
    found = value or os.environ.get(env)
    if not found:
        raise ConfigurationError(f"the Slack {what} is missing: pass it or set {env}")
    return found


def installation_store(
    home: str | os.PathLike[str] | None = None,
    *,
    client_id: str | None = None,
    client_secret: str | None = None,
    base_url: str | None = None,
    refresh_minutes: int = REFRESH_MINUTES,
) -> RotatingInstallationStore:
    """The workspaces' installs (bot tokens) for app ``client_id`` ($SLACK_CLIENT_ID).

    Each read returns the install with a bot token valid for ``refresh_minutes`` more: with
    token rotation on, a token due is refreshed (``oauth.v2.access`` at ``base_url``, else
    ``$SLACK_API_URL``, else Slack's) with ``client_secret`` ($SLACK_CLIENT_SECRET), which only
    a process that reads rotating installs needs.
    """
    client = _required(client_id, CLIENT_ID_ENV, "client id")
    directory = slack_dir(home)
    database = _private_file(directory / "installations.sqlite3")
    return RotatingInstallationStore(
        SQLite3InstallationStore(database=database, client_id=client),
        client_id=client,
        client_secret=client_secret or os.environ.get(CLIENT_SECRET_ENV),
        client=_api_client(base_url),
        refresh_minutes=refresh_minutes,
        lock_file=_private_file(directory / "installations.lock"),
    )


def oauth_settings(
    *,
    home: str | os.PathLike[str] | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    redirect_uri: str | None = None,
    scopes: Sequence[str] = SCOPES,
    authorization_url: str | None = None,
    base_url: str | None = None,
    refresh_minutes: int = REFRESH_MINUTES,
) -> OAuthSettings:
    """slack-bolt OAuth settings for a multi-workspace install of the approvals app.

    ``GET /slack/install`` starts an install (a fresh state, kept in the state store and in a
    browser cookie); ``GET /slack/oauth_redirect`` checks both, exchanges the code with
    ``oauth.v2.access`` and saves the install. Missing values come from ``$SLACK_CLIENT_ID``,
    ``$SLACK_CLIENT_SECRET`` and ``$SLACK_REDIRECT_URI``. With token rotation on, each request
    finds its workspace's bot token refreshed when it expires within ``refresh_minutes``
    (:func:`installation_store`; ``base_url`` as there).
    """
    client = _required(client_id, CLIENT_ID_ENV, "client id")
    secret = _required(client_secret, CLIENT_SECRET_ENV, "client secret")
    return OAuthSettings(
        client_id=client,
        client_secret=secret,
        scopes=list(scopes),
        redirect_uri=redirect_uri or os.environ.get(REDIRECT_URI_ENV),
        authorization_url=authorization_url,
        # The installation store refreshes tokens, under its lock, before slack-bolt sees them;
        # bolt's own check (a refresh without that lock) is turned off by a window that has
        # always passed, so a single-use refresh token is never spent by two processes.
        token_rotation_expiration_minutes=-ROTATION_OFF_MINUTES,
        installation_store=installation_store(
            home,
            client_id=client,
            client_secret=secret,
            base_url=base_url,
            refresh_minutes=refresh_minutes,
        ),
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
