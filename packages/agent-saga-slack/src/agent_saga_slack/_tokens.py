"""Bot tokens that expire: read from the installation store at each call, refreshed in time.

With token rotation on (the app's *OAuth & Permissions* page), an install's bot token
(``xoxe.xoxb-...``) lives 12 hours and comes with a refresh token that works once.
:class:`RotatingInstallationStore` wraps slack-sdk's installation store: whoever reads an
install (the agents' channel before each message, the server's slack-bolt app before each
request) gets it with a bot token that does not expire within ``refresh_minutes``, refreshed if
needed by slack-sdk's :class:`~slack_sdk.oauth.token_rotation.TokenRotator` (``oauth.v2.access``
with ``grant_type=refresh_token``) and saved back before it is returned.

Reads and refreshes are serialised by a lock (a ``flock`` on a file next to the store, so
across the processes that share the agent-saga home too): when several readers find the same
token due, the first refreshes it and the others read its result, so a refresh token is never
spent twice. A refreshed install replaces the stored one (older rows are deleted first), so it
is the one every reader finds.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from logging import Logger
from pathlib import Path

from agent_saga import ConfigurationError
from slack_sdk import WebClient
from slack_sdk.oauth.installation_store import Bot, Installation, InstallationStore
from slack_sdk.oauth.token_rotation import TokenRotator

CLIENT_SECRET_ENV = "SLACK_CLIENT_SECRET"  # noqa: S105 - the variable's name, not a secret
REFRESH_MINUTES = 120
"""Refresh a bot token once it expires within this many minutes (slack-bolt's default)."""
ROTATING_PREFIX = "xoxe."
_ANY_AGE = 10 * 365 * 24 * 60  # minutes: "refresh whatever its expiry" for a refused token


def is_rotating(token: str | None) -> bool:
    """Whether ``token`` is an expiring token of an app with token rotation on."""
    return bool(token) and str(token).startswith(ROTATING_PREFIX)


def refuse_fixed_rotating_token(token: str | None, where: str) -> None:
    """Refuse a rotating token given as a fixed value: it expires and nothing can refresh it.

    Raises:
        ConfigurationError: ``token`` is a rotating token (the message never shows it).
    """
    if is_rotating(token):
        raise ConfigurationError(
            f"the Slack token in {where} rotates (xoxe.): it expires within 12 hours and a "
            "fixed token cannot be refreshed. Install the app through OAuth (SLACK_CLIENT_ID, "
            "SLACK_CLIENT_SECRET) and use agent_saga_slack.installation_store()"
        )


class RotatingInstallationStore(InstallationStore):
    """An :class:`InstallationStore` whose installs come back with a bot token still valid.

    Args:
        store: where the installs are kept (slack-sdk's SQLite store in the agent-saga home).
        client_id: the app's client id.
        client_secret: the app's client secret; ``None``: installs that rotate their tokens
            cannot be refreshed here, and reading one whose token is due raises
            :class:`~agent_saga.ConfigurationError`.
        client: the Web API client for ``oauth.v2.access`` (its ``base_url`` is used).
        refresh_minutes: refresh a token that expires within this many minutes.
        lock_file: the file whose ``flock`` serialises refreshes across processes; ``None``:
            only within this object.

    Installs without a refresh token (rotation off) are returned as stored. A refreshed
    install is durable in ``store`` before it is returned. After an exception nothing was
    saved, and the stored install (and its refresh token) is still the one to use.
    """

    def __init__(
        self,
        store: InstallationStore,
        *,
        client_id: str,
        client_secret: str | None,
        client: WebClient | None = None,
        refresh_minutes: int = REFRESH_MINUTES,
        lock_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if refresh_minutes < 0:
            raise ConfigurationError(f"refresh_minutes must be >= 0, got {refresh_minutes}")
        self.store = store
        self.client_id = client_id
        self.refresh_minutes = refresh_minutes
        self._rotator = (
            TokenRotator(client_id=client_id, client_secret=client_secret, client=client)
            if client_secret
            else None
        )
        self._lock_file = Path(lock_file) if lock_file is not None else None
        self._thread_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RotatingInstallationStore(client_id={self.client_id!r})"  # never the secret

    @property
    def can_refresh(self) -> bool:
        """Whether this store has the client secret a refresh needs."""
        return self._rotator is not None

    # -- the agents' side -----------------------------------------------------------------
    def bot_token(
        self, *, enterprise_id: str | None, team_id: str | None, refused: str | None = None
    ) -> str:
        """The bot token to call Slack with now, refreshed first if it is due.

        Args:
            enterprise_id, team_id: the install.
            refused: a token Slack has just refused as expired; if the store still holds it,
                it is refreshed whatever its stated expiry.

        Raises:
            ConfigurationError: no install, or a due token and no client secret.
            slack_sdk.errors.SlackTokenRotationError: Slack refused the refresh.
        """
        installation = self._fresh(enterprise_id, team_id, False, refused)
        if installation is None or not installation.bot_token:
            raise ConfigurationError(f"no Slack install found for team {team_id}")
        return installation.bot_token

    def check_refreshable(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """Raise now if the install rotates its tokens and this store cannot refresh them."""
        installation = self.store.find_installation(enterprise_id=enterprise_id, team_id=team_id)
        if installation is not None and rotates(installation) and self._rotator is None:
            raise ConfigurationError(_cannot_refresh(team_id))

    # -- InstallationStore ----------------------------------------------------------------
    @property
    def logger(self) -> Logger:
        return self.store.logger

    def save(self, installation: Installation) -> None:
        with self._locked():
            self._replace(installation)

    def save_bot(self, bot: Bot) -> None:
        bot.installed_at = time.time()
        self.store.save_bot(bot)

    def find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        if user_id is not None:  # a user's own install: this app asks for bot scopes only
            return self.store.find_installation(
                enterprise_id=enterprise_id,
                team_id=team_id,
                user_id=user_id,
                is_enterprise_install=is_enterprise_install,
            )
        return self._fresh(enterprise_id, team_id, is_enterprise_install, None)

    def find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        self._fresh(enterprise_id, team_id, is_enterprise_install, None)
        return self.store.find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )

    def delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        self.store.delete_bot(enterprise_id=enterprise_id, team_id=team_id)

    def delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        self.store.delete_installation(
            enterprise_id=enterprise_id, team_id=team_id, user_id=user_id
        )

    def delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        self.store.delete_all(enterprise_id=enterprise_id, team_id=team_id)

    # -- refreshing -----------------------------------------------------------------------
    def _fresh(
        self,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None,
        refused: str | None,
    ) -> Installation | None:
        with self._locked():  # a refresh in another process is finished, or not begun
            installation = self.store.find_installation(
                enterprise_id=enterprise_id,
                team_id=team_id,
                is_enterprise_install=is_enterprise_install,
            )
            if installation is None or not self._due(installation, refused):
                return installation
            if self._rotator is None:
                raise ConfigurationError(_cannot_refresh(team_id))
            forced = refused is not None and installation.bot_token == refused
            rotated = self._rotator.perform_token_rotation(
                installation=installation,
                minutes_before_expiration=_ANY_AGE if forced else self.refresh_minutes,
            )
            if rotated is None:
                return installation
            self._replace(rotated)
            return rotated

    def _replace(self, installation: Installation) -> None:
        """Make ``installation`` the workspace's only stored install (lock held).

        The SQLite store returns the row saved last by ``installed_at``, which it stamps to the
        second: a refresh saved in the same second as the row before would not be the one found,
        and the spent refresh token would be tried again. So older rows go first.
        """
        team = None if installation.is_enterprise_install else installation.team_id
        self.store.delete_all(enterprise_id=installation.enterprise_id, team_id=team)
        installation.installed_at = time.time()
        self.store.save(installation)

    def _due(self, installation: Installation, refused: str | None) -> bool:
        if not rotates(installation):
            return False
        if refused is not None and installation.bot_token == refused:
            return True
        expires_at = installation.bot_token_expires_at
        return expires_at is not None and expires_at <= time.time() + self.refresh_minutes * 60

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._thread_lock:
            if self._lock_file is None:
                yield
                return
            fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing the descriptor releases the flock


def rotates(installation: Installation) -> bool:
    """Whether the install's bot token expires and is refreshed with a refresh token."""
    return installation.bot_refresh_token is not None


def _cannot_refresh(team_id: str | None) -> str:
    return (
        f"the Slack install of team {team_id} rotates its bot token (it expires within 12 "
        f"hours) and this process cannot refresh it: set {CLIENT_SECRET_ENV} (or pass "
        "client_secret= to installation_store())"
    )
