"""The Slack side: button clicks and ``/saga-approve`` become votes in the agents' own log.

slack-bolt verifies every request's signature (HMAC over the raw body, 5-minute window) before
any listener runs; a bad signature or an old timestamp is answered 401 by the framework. A
verified request only proves Slack sent it: who may decide is checked separately, by the
request's own approver list (``slack:<user id>``) and, optionally, a list of workspaces.
Refusals are logged within a bound (:class:`~agent_saga_slack.RefusalLimit`), so that votes on
made-up request ids cannot fill the log.

Votes go through :func:`agent_saga.submit_vote` into the log the agents use (the store given, or
the agent-saga home resolved exactly as the agents and the CLI resolve it), never into a store
of the app's own. A click or command that cannot count (unknown, decided or expired request,
approver not allowed, second vote) is refused and the reply says what is true; a replayed
request changes nothing because a request takes one vote per approver and is decided once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent_saga import (
    AgentKit,
    AgentSagaError,
    ApprovalRequest,
    ConfigurationError,
    Entry,
    Kind,
    LogStore,
    submit_vote,
)
from agent_saga._approvals.request import ApprovalBook
from slack_bolt import Ack, Respond
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_sdk import WebClient

from ._blocks import APPROVE_ACTION, DENY_ACTION, decided_blocks, escape, summary
from ._bolt import build_app, workspace_ids
from ._command import parse_command
from ._ids import approver_id
from ._refusals import RefusalGate, RefusalLimit

log = logging.getLogger("agent_saga_slack")
SIGNING_SECRET_ENV = "SLACK_SIGNING_SECRET"  # noqa: S105 - the variable's name, not a secret
CHANNEL = "slack"
COMMAND = "/saga-approve"
_ID_LIMIT = 100


@dataclass(frozen=True)
class SlackVote:
    """What a click or a command did: ``accepted`` or not, the reply, the request's final state.

    ``final`` is ``approved``/``denied``/``expired``/``arguments_changed`` once the request can
    no longer be decided, else ``None``.
    """

    accepted: bool
    text: str
    request: ApprovalRequest | None
    final: str | None


class SlackApprovals:
    """A slack-bolt :class:`~slack_bolt.App` whose buttons and slash command vote on approvals.

    Args:
        store: the agents' log. ``None``: the log of the agent-saga home (``home``, else
            ``$AGENT_SAGA_HOME``, else the project configuration), opened as the agents open it.
        home: the agent-saga home when ``store`` is not given.
        signing_secret: the app's signing secret (``$SLACK_SIGNING_SECRET``); required.
        token: a bot token for a single workspace (``$SLACK_BOT_TOKEN``); not used with ``oauth``.
        oauth: multi-workspace install settings (see :func:`agent_saga_slack.oauth_settings`).
        client: the Web API client (tests point its ``base_url`` at a local mock).
        base_url: the Web API's base URL when ``client`` is not given (``$SLACK_API_URL``).
        teams: if given, only users of these workspace ids may vote.
        command: the slash command's name.
        process_before_response: run listeners before answering Slack (for serverless hosts
            and deterministic tests); the default answers first and works afterwards.
        clock: seconds since the epoch, for votes and expiry.
        refusals: how many refused votes are logged (default :class:`RefusalLimit`: 3 per user
            and 30 in all per minute); votes that count are never limited.

    Raises:
        ConfigurationError: a missing secret or token, a rotating fixed token, a token Slack
            refuses, Slack unreachable, a workspace id that is not one, an unusable home.
    """

    def __init__(
        self,
        *,
        store: LogStore | None = None,
        home: str | os.PathLike[str] | None = None,
        signing_secret: str | None = None,
        token: str | None = None,
        oauth: OAuthSettings | None = None,
        client: WebClient | None = None,
        base_url: str | None = None,
        teams: Iterable[str] = (),
        command: str = COMMAND,
        process_before_response: bool = False,
        clock: Callable[[], float] = time.time,
        refusals: RefusalLimit | None = None,
    ) -> None:
        secret = signing_secret or os.environ.get(SIGNING_SECRET_ENV)
        if not secret:
            raise ConfigurationError(
                f"the Slack signing secret is missing: set {SIGNING_SECRET_ENV}"
            )
        self.teams = workspace_ids(teams)
        self.clock = clock
        self.refusals = refusals or RefusalLimit()
        self._kit: AgentKit | None = None
        if store is None:  # the agents' own log, found the way they find it
            self._kit = _open_home(home)
            store = self._kit.store
        self.store: LogStore = store
        try:
            self.app = build_app(
                signing_secret=secret,
                token=token,
                oauth=oauth,
                client=client,
                base_url=base_url,
                process_before_response=process_before_response,
            )
        except BaseException:
            self.close()
            raise
        self._vote_lock = threading.Lock()
        self.app.action(APPROVE_ACTION)(self._on_button)
        self.app.action(DENY_ACTION)(self._on_button)
        self.app.command(command)(self._on_command)

    def __repr__(self) -> str:
        return f"SlackApprovals(teams={sorted(self.teams)!r})"  # never a secret

    def close(self) -> None:
        """Close the log if this object opened it."""
        if self._kit is not None:
            self._kit.close()

    def __enter__(self) -> SlackApprovals:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- votes ----------------------------------------------------------------------------
    def vote(
        self, request_id: str, user_id: str, team_id: str | None, decision: str, note: str = ""
    ) -> SlackVote:
        """Record one Slack user's vote, or refuse it; the reply tells what is true."""
        request_id = request_id.strip()[:_ID_LIMIT]
        try:
            approver = approver_id(user_id)
        except ValueError:
            return SlackVote(False, "Nothing was recorded: not a Slack user.", None, None)
        if self.teams and team_id not in self.teams:
            self._refuse_team(request_id, approver, team_id, decision)
            text = f"Nothing was recorded: workspace {team_id} may not decide approvals here."
            return SlackVote(False, escape(text), None, None)
        with self._vote_lock:  # one vote at a time from this app: a double click counts once
            now = self.clock()
            result = submit_vote(
                RefusalGate(self.store, self.refusals, approver, now),
                request_id,
                approver,
                decision,
                channel=CHANNEL,
                note=note,
                now=now,
            )
        log.info(
            "slack vote %s by %s on %s: %s",
            decision,
            approver,
            request_id,
            "recorded" if result.accepted else result.message,
        )
        if result.accepted and result.request is not None:
            return SlackVote(True, _recorded(result.request, decision), result.request, None)
        final = self._final_state(result.request)
        name = summary(result.request) if result.request is not None else repr(request_id)
        text = f"Nothing was recorded for {name}: {result.message}."
        if final is not None:
            text += f" Its outcome: {final}."
        return SlackVote(False, escape(text), result.request, final)

    def _final_state(self, request: ApprovalRequest | None) -> str | None:
        if request is None:
            return None
        book = ApprovalBook().take_all(self.store.records())
        if request.id in book.decided:
            return book.decided[request.id]
        if self.clock() >= request.expires_at:
            return "expired"
        return None

    def _refuse_team(
        self, request_id: str, approver: str, team_id: str | None, decision: str
    ) -> None:
        at = self.clock()
        unlogged = self.refusals.admit(approver, at)
        if unlogged is None:
            return
        request = ApprovalBook().take_all(self.store.records()).find(request_id)
        data: dict[str, Any] = {
            "request": request.id if request is not None else request_id,
            "saga": request.saga if request is not None else None,
            "by": approver,
            "decision": decision,
            "channel": CHANNEL,
            "at": at,
            "reason": f"Slack workspace {str(team_id)[:40]} is not allowed",
        }
        if unlogged:
            data["unlogged"] = unlogged
        self.store.append([Entry(Kind.APPROVAL_REFUSED, None, data, int(at * 1000))], sync=True)

    # -- listeners ------------------------------------------------------------------------
    def _on_button(
        self, ack: Ack, body: dict[str, Any], action: dict[str, Any], respond: Respond
    ) -> None:
        ack()
        decision = "approve" if action.get("action_id") == APPROVE_ACTION else "deny"
        user = body.get("user") or {}
        team = (body.get("team") or {}).get("id") or user.get("team_id")
        outcome = self.vote(str(action.get("value", "")), str(user.get("id", "")), team, decision)
        if outcome.final is not None and outcome.request is not None:
            # The message still shows buttons for a request that can no longer be decided
            # (its agent may be gone): show the truth in place.
            respond(
                replace_original=True,
                text=f"{summary(outcome.request)}: {outcome.final}",
                blocks=decided_blocks(outcome.request, outcome.final),
            )
        respond(response_type="ephemeral", replace_original=False, text=outcome.text)

    def _on_command(self, ack: Ack, command: dict[str, Any], respond: Respond) -> None:
        ack()
        parsed = parse_command(str(command.get("text", "")), str(command.get("command", COMMAND)))
        if isinstance(parsed, str):
            respond(response_type="ephemeral", text=parsed)
            return
        outcome = self.vote(
            parsed.request_id,
            str(command.get("user_id", "")),
            command.get("team_id"),
            parsed.decision,
            parsed.note,
        )
        respond(response_type="ephemeral", text=outcome.text)


def _open_home(home: str | os.PathLike[str] | None) -> AgentKit:
    """The agents' kit on ``home``; any reason it cannot be opened is a ConfigurationError."""
    try:
        return AgentKit(home=home, checkpoints=False)
    except ConfigurationError:
        raise
    except OSError as exc:
        where = exc.filename or home or "the agent-saga home"
        raise ConfigurationError(
            f"cannot use the agent-saga home: {where}: {exc.strerror or exc}"
        ) from exc
    except AgentSagaError as exc:
        raise ConfigurationError(f"cannot use the agent-saga home {home or ''}: {exc}") from exc


def _recorded(request: ApprovalRequest, decision: str) -> str:
    if decision == "deny":
        return escape(
            f"Your denial is recorded for {summary(request)}. The step will be refused and its "
            "saga rolled back; the message shows the outcome once the agent has seen it."
        )
    more = (
        ""
        if request.quorum <= 1
        else f" It needs {request.quorum} approvers in all; the others still have to decide."
    )
    return escape(
        f"Your approval is recorded for {summary(request)}.{more} The message shows the "
        "outcome once the agent has counted the votes."
    )
