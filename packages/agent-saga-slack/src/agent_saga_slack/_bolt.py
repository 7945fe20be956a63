"""Building the slack-bolt :class:`~slack_bolt.App`: one workspace (a bot token) or many (OAuth).

For one workspace the token is given to bolt as its token (not on a client of ours, which would
make bolt announce that ``$SLACK_BOT_TOKEN`` "will be unused" at every start) and checked here
with ``auth.test`` against the configured Web API, so that a refused token or an unreachable
Slack is one :class:`~agent_saga.ConfigurationError` line at start, never a traceback.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import urllib.error
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from agent_saga import ConfigurationError
from slack_bolt import App
from slack_bolt.error import BoltError
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from ._channel import API_URL_ENV, TOKEN_ENV
from ._tokens import refuse_fixed_rotating_token

T = TypeVar("T")
_check_log = logging.getLogger("agent_saga_slack.token_check")
_check_log.addHandler(logging.NullHandler())  # its failure is raised as one line instead
_check_log.propagate = False
_TEAM_ID = re.compile(r"^T[A-Z0-9]{1,40}$")


def workspace_ids(teams: Iterable[str]) -> frozenset[str]:
    """The workspace ids votes may come from, each checked (``T0123ABCD``).

    Raises:
        ConfigurationError: ``teams`` is one string, or an entry is not a workspace id (such as
            ``"T1,T2"``: pass ``["T1", "T2"]``).
    """
    if isinstance(teams, str):
        raise ConfigurationError("teams takes a list of workspace ids, not one string")
    found = frozenset(teams)
    for team in sorted(found):
        if not _TEAM_ID.match(team):
            raise ConfigurationError(
                f"not a Slack workspace id: {team[:60]!r} (expected T followed by capital "
                "letters and digits, one id per entry)"
            )
    return found


def build_app(
    *,
    signing_secret: str,
    token: str | None,
    oauth: OAuthSettings | None,
    client: WebClient | None,
    base_url: str | None,
    process_before_response: bool,
) -> App:
    """The bolt app, its bot token checked when it has one.

    Raises:
        ConfigurationError: a missing, rotating or refused token; Slack unreachable; both a
            token and ``oauth``.
    """
    if oauth is not None and token is not None:
        raise ConfigurationError("give a bot token (one workspace) or oauth=, not both")
    url = base_url or os.environ.get(API_URL_ENV) or WebClient.BASE_URL
    if oauth is not None or client is not None:
        refuse_fixed_rotating_token(client.token if client is not None else None, "client=")
        return _checked(
            url,
            lambda: App(
                signing_secret=signing_secret,
                client=client or WebClient(base_url=url),
                oauth_settings=oauth,
                process_before_response=process_before_response,
            ),
        )
    bot_token = token or os.environ.get(TOKEN_ENV)
    if not bot_token:
        raise ConfigurationError(
            f"no Slack bot token: pass token= or set {TOKEN_ENV}, or install with oauth="
        )
    refuse_fixed_rotating_token(bot_token, f"token= or {TOKEN_ENV}")
    app = App(
        signing_secret=signing_secret,
        token=bot_token,
        token_verification_enabled=False,  # bolt would check it against slack.com: see below
        process_before_response=process_before_response,
    )
    app.client.base_url = url  # every request's client is made from this one
    check = WebClient(token=bot_token, base_url=url, logger=_check_log)
    _checked(url, check.auth_test)
    return app


def _checked(url: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except SlackApiError as exc:
        response: Any = exc.response
        raise ConfigurationError(
            f"Slack refused the bot token ({TOKEN_ENV} or token=): {response.get('error', '?')}"
        ) from exc
    except BoltError as exc:
        raise ConfigurationError(f"Slack app: {str(exc).splitlines()[0][:300]}") from exc
    except (SlackClientError, OSError) as exc:
        raise ConfigurationError(f"cannot reach Slack at {url}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        inner = exc.reason
        if isinstance(inner, OSError):
            return inner.strerror or str(inner)
        return str(inner)
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return f"{type(exc).__name__}: {exc}"[:300]
