"""The agent's side: post each approval request to a Slack channel and update it in place.

:class:`SlackApprovalChannel` is an :class:`agent_saga.ApprovalChannel`. The engine calls it
while a step waits, so both calls only queue work and return at once: a worker thread posts the
request (``chat.postMessage``) and, once the engine has decided, rewrites the same message
(``chat.update``) with the outcome, whoever decided it (a button, the slash command, the CLI,
expiry). The channel never decides anything and writes nothing to the log: a Slack error is
kept in :attr:`SlackApprovalChannel.errors` and logged, and the request still waits for votes.

With an installation store, the bot token is looked up for every message, so a token refreshed
by token rotation (here or in another process sharing the store) is the one used; a token Slack
refuses as expired is refreshed and the message sent once more.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_saga import ApprovalRequest, ConfigurationError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError, SlackTokenRotationError
from slack_sdk.oauth.installation_store import InstallationStore
from slack_sdk.web import SlackResponse

from ._blocks import decided_blocks, request_blocks, summary
from ._tokens import RotatingInstallationStore, refuse_fixed_rotating_token, rotates

log = logging.getLogger("agent_saga_slack")
TOKEN_ENV = "SLACK_BOT_TOKEN"  # noqa: S105 - the variable's name, not a secret
API_URL_ENV = "SLACK_API_URL"
_MAX_ERRORS = 100


@dataclass(frozen=True)
class PostedMessage:
    """Where a request's message is: the channel id and the message's ``ts``."""

    channel: str
    ts: str


class SlackApprovalChannel:
    """Posts approval requests to ``channel`` with Approve and Deny buttons.

    The bot token comes from, in order: ``client`` (a :class:`slack_sdk.WebClient` that already
    has one), ``token``, the bot of ``team_id`` in ``installation_store`` (a multi-workspace
    install, see :func:`agent_saga_slack.installation_store`), or ``$SLACK_BOT_TOKEN``. It is
    never logged. A store's token is looked up again for every message (and refreshed there
    when token rotation is on); the others are fixed, so a rotating ``xoxe.`` token is refused
    as one of them.

    Args:
        channel: the Slack channel id (``C0123...``) approvers watch.
        client: a configured Web API client (tests point its ``base_url`` at a local mock).
        token: a bot token (``xoxb-...``).
        installation_store, team_id, enterprise_id: find the bot token of an OAuth install.
        base_url: the Web API's base URL (``$SLACK_API_URL``, else Slack's).
        timeout: seconds per Web API call.

    Raises:
        ConfigurationError: no channel id; a store without a team id; a fixed token that
            rotates; an install that rotates its tokens in a store that cannot refresh them.
    """

    def __init__(
        self,
        channel: str,
        *,
        client: WebClient | None = None,
        token: str | None = None,
        installation_store: InstallationStore | None = None,
        team_id: str | None = None,
        enterprise_id: str | None = None,
        base_url: str | None = None,
        timeout: int = 10,
    ) -> None:
        if not channel:
            raise ConfigurationError("SlackApprovalChannel needs a channel id")
        if installation_store is not None and team_id is None and enterprise_id is None:
            raise ConfigurationError("an installation store needs the team_id of the install")
        refuse_fixed_rotating_token(token, "token=")
        refuse_fixed_rotating_token(client.token if client is not None else None, "client=")
        if client is None and token is None and installation_store is None:
            refuse_fixed_rotating_token(os.environ.get(TOKEN_ENV), TOKEN_ENV)
        if installation_store is not None:
            _check_refreshable(installation_store, enterprise_id, team_id)
        self.channel = channel
        self._client = client
        self._transport: WebClient | None = None
        self._token = token
        self._installs = installation_store
        self._team = team_id
        self._enterprise = enterprise_id
        self._base_url = base_url or os.environ.get(API_URL_ENV) or WebClient.BASE_URL
        self._timeout = timeout
        self.posted: dict[str, PostedMessage] = {}
        self.errors: list[str] = []
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SlackApprovalChannel(channel={self.channel!r})"  # never the token

    # -- ApprovalChannel ------------------------------------------------------------------
    def request_posted(self, request: ApprovalRequest) -> None:
        """Queue the request's message; returns at once."""
        self._submit(lambda: self._guarded("post", request, lambda: self._post(request)))

    def request_decided(self, request: ApprovalRequest, decision: str) -> None:
        """Queue the in-place update of the request's message; returns at once."""
        self._submit(
            lambda: self._guarded("update", request, lambda: self._update(request, decision))
        )

    # -- lifecycle ------------------------------------------------------------------------
    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued post and update was sent (or failed); ``False`` on timeout."""
        done = threading.Event()
        self._submit(done.set)
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Send what is queued, then stop the worker thread."""
        with self._lock:
            worker, self._worker = self._worker, None
            if worker is not None:
                self._queue.put(None)
        if worker is not None:
            worker.join(timeout)

    def __enter__(self) -> SlackApprovalChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the worker -----------------------------------------------------------------------
    def _submit(self, work: Callable[[], None]) -> None:
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="agent-saga-slack-channel", daemon=True
                )
                self._worker.start()
            self._queue.put(work)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            work()

    def _guarded(self, what: str, request: ApprovalRequest, call: Callable[[], None]) -> None:
        try:
            call()
        except (SlackApiError, SlackClientError, OSError, ConfigurationError) as exc:
            line = f"{what} {request.id}: {_describe(exc)}"
            if len(self.errors) < _MAX_ERRORS:
                self.errors.append(line)
            log.warning("Slack approval message not sent: %s", line)

    def _web(self) -> WebClient:
        """The given client, else one without a token of its own (each call brings one)."""
        if self._transport is None:
            self._transport = self._client or WebClient(
                base_url=self._base_url, timeout=self._timeout
            )
        return self._transport

    def _call(self, method: str, **arguments: Any) -> SlackResponse:
        """Call ``method`` with the current token; once more after refreshing a token Slack
        refused as expired (a store's token only)."""
        token = self._current_token(None)
        try:
            return _send(self._web(), method, token, arguments)
        except SlackApiError as exc:
            if token is None or self._installs is None or _error(exc) != "token_expired":
                raise
            return _send(self._web(), method, self._current_token(token), arguments)

    def _current_token(self, refused: str | None) -> str | None:
        """The token for this call; ``None``: the given client's own."""
        if self._client is not None and self._client.token:
            return None
        if self._token:
            return self._token
        if self._installs is not None:
            return _store_token(self._installs, self._enterprise, self._team, refused)
        token = os.environ.get(TOKEN_ENV)
        if not token:
            raise ConfigurationError(f"no Slack bot token: pass token= or set {TOKEN_ENV}")
        refuse_fixed_rotating_token(token, TOKEN_ENV)
        return token

    def _post(self, request: ApprovalRequest) -> None:
        response = self._call(
            "chat_postMessage",
            channel=self.channel,
            text=f"Approval needed: {summary(request)}",
            blocks=request_blocks(request),
        )
        self.posted[request.id] = PostedMessage(str(response["channel"]), str(response["ts"]))

    def _update(self, request: ApprovalRequest, decision: str) -> None:
        message = self.posted.get(request.id)
        if message is None:
            raise ConfigurationError(f"no posted message to update for {request.id}")
        self._call(
            "chat_update",
            channel=message.channel,
            ts=message.ts,
            text=f"{summary(request)}: {decision}",
            blocks=decided_blocks(request, decision),
        )


def _send(
    client: WebClient, method: str, token: str | None, arguments: dict[str, Any]
) -> SlackResponse:
    if token is not None:  # the call's own token (else the client's)
        arguments = {**arguments, "token": token}
    response: SlackResponse = getattr(client, method)(**arguments)
    return response


def _store_token(
    store: InstallationStore, enterprise: str | None, team: str | None, refused: str | None
) -> str:
    if isinstance(store, RotatingInstallationStore):
        return store.bot_token(enterprise_id=enterprise, team_id=team, refused=refused)
    installation = store.find_installation(enterprise_id=enterprise, team_id=team)
    if installation is not None and rotates(installation):
        raise ConfigurationError(_plain_store_rotates(team))
    bot = store.find_bot(enterprise_id=enterprise, team_id=team)
    if bot is None or not bot.bot_token:
        raise ConfigurationError(f"no Slack install found for team {team}")
    return bot.bot_token


def _check_refreshable(store: InstallationStore, enterprise: str | None, team: str | None) -> None:
    if isinstance(store, RotatingInstallationStore):
        store.check_refreshable(enterprise_id=enterprise, team_id=team)
        return
    installation = store.find_installation(enterprise_id=enterprise, team_id=team)
    if installation is not None and rotates(installation):
        raise ConfigurationError(_plain_store_rotates(team))


def _plain_store_rotates(team: str | None) -> str:
    return (
        f"the Slack install of team {team} rotates its bot token (it expires within 12 hours) "
        "and this installation store cannot refresh it: use agent_saga_slack."
        "installation_store() (with SLACK_CLIENT_SECRET) or wrap the store in "
        "RotatingInstallationStore"
    )


def _error(exc: SlackApiError) -> str:
    response: Any = exc.response
    return str(response.get("error", "?"))


def _describe(exc: Exception) -> str:
    if isinstance(exc, SlackApiError):
        return f"Slack API error {_error(exc)}"
    if isinstance(exc, SlackTokenRotationError):
        return f"token refresh refused: Slack API error {_error(exc.api_error)}"
    return f"{type(exc).__name__}: {exc}"[:300]
