"""Token rotation: expiring bot tokens are looked up at each call and refreshed before they lapse.

With rotation on, Slack hands an install a bot token that lives 12 hours and a single-use refresh
token. The agents' channel and the server both read the install from the installation store at
every call and refresh it there (``oauth.v2.access``, ``grant_type=refresh_token``) under a lock,
so that one refresh token is never spent twice and the newest token is the one found.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, Approvals, CompensatorRegistry, ConfigurationError
from agent_saga_slack import (
    RotatingInstallationStore,
    SlackApprovalChannel,
    SlackApprovals,
    installation_store,
    oauth_settings,
)
from agent_saga_slack.testing import MockSlackAPI, command_body, signed_headers
from slack_bolt import BoltRequest
from slack_sdk import WebClient
from slack_sdk.oauth.installation_store.sqlite3 import SQLite3InstallationStore

if TYPE_CHECKING:
    from conftest import Agent

CLIENT_ID = "111.222"
CLIENT_SECRET = "client-secret-value"


def bearer(call_headers: dict[str, str]) -> str:
    return call_headers["authorization"].removeprefix("Bearer ")


def refreshes(mock: MockSlackAPI) -> list[str]:
    """The refresh tokens spent, in order."""
    return [
        c.body["refresh_token"]
        for c in mock.calls_to("oauth.v2.access")
        if c.body.get("grant_type") == "refresh_token"
    ]


def server(
    home: Path, mock: MockSlackAPI, secret: str, refresh_minutes: int | None = 120
) -> SlackApprovals:
    """The approvals app installed in workspace T1 through bolt's own OAuth flow.

    ``refresh_minutes=None``: configured by the environment only, as ``serve`` is.
    """
    redirect = "https://saga.example/slack/oauth_redirect"
    if refresh_minutes is None:
        oauth = oauth_settings(
            home=home, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, redirect_uri=redirect
        )
    else:
        oauth = oauth_settings(
            home=home,
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            redirect_uri=redirect,
            base_url=mock.api_url,
            refresh_minutes=refresh_minutes,
        )
    app = SlackApprovals(
        signing_secret=secret,
        oauth=oauth,
        client=WebClient(base_url=mock.api_url),
        process_before_response=True,
    )
    flow = app.app.oauth_flow
    assert flow is not None
    installed = flow.run_installation("code-1")
    assert installed is not None
    oauth.installation_store.save(installed)
    return app


def approve_by_command(app: SlackApprovals, agent: Agent, mock: MockSlackAPI, secret: str) -> str:
    request = agent.request()
    name = request.id[-6:]
    body = command_body(f"approve {request.id}", user="U1", response_url=mock.response_url(name))
    response = app.app.dispatch(BoltRequest(body=body, headers=dict(signed_headers(secret, body))))
    assert response.status == 200
    return str(mock.wait_for(f"resp/{name}")[0].body["text"])


def test_with_rotation_on_requests_reach_slack_after_the_first_token_expires(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    agent_on: Callable[[AgentKit], Agent],
    secret: str,
) -> None:
    """Configured as an admin does (environment only), after the first token expired the next
    request is posted with a live token, the vote is counted and the message is updated."""
    home = tmp_path / "home"
    with MockSlackAPI(token_lifetime=2, client_secret=CLIENT_SECRET) as mock:
        monkeypatch.setenv("SLACK_CLIENT_ID", CLIENT_ID)
        monkeypatch.setenv("SLACK_CLIENT_SECRET", CLIENT_SECRET)
        monkeypatch.setenv("SLACK_API_URL", mock.api_url)
        app = server(home, mock, secret, refresh_minutes=None)
        [first] = mock.expiry
        with (
            SlackApprovalChannel(
                "C9", installation_store=installation_store(home), team_id="T1"
            ) as channel,
            AgentKit(
                home=home,
                approvals=Approvals(approvers=["slack:U1"], channels=[channel], poll=0.01),
                registry=CompensatorRegistry(),
                checkpoints=False,
            ) as kit,
        ):
            early = agent_on(kit).start(1)
            assert "Your approval is recorded" in approve_by_command(app, early, mock, secret)
            assert early.finish()["result"] == "wire-1"
            assert channel.flush()

            mock.wait_expired(first)  # twelve hours later, in two seconds
            late = agent_on(kit).start(2)
            posted = mock.wait_for("chat.postMessage", 2)[-1]
            assert not mock.expired(bearer(posted.headers))
            assert "Your approval is recorded" in approve_by_command(app, late, mock, secret)
            assert late.finish()["result"] == "wire-2"
            assert channel.flush()
            update = mock.wait_for("chat.update", 2)[-1]
            assert bearer(update.headers) != first
            assert "approved" in update.body["text"]
            assert channel.errors == []
        app.close()
    spent = refreshes(mock)
    assert spent, "the expired token was never refreshed"
    assert len(spent) == len(set(spent)), "a single-use refresh token was spent twice"


def test_a_token_is_refreshed_only_when_it_nears_expiry(
    tmp_path: Path, secret: str, mock_rotating: MockSlackAPI
) -> None:
    home = tmp_path / "home"
    app = server(home, mock_rotating, secret, refresh_minutes=120)
    [first] = mock_rotating.expiry  # lives 12 hours: not due within 120 minutes
    calm = installation_store(
        home, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, base_url=mock_rotating.api_url
    )
    for _ in range(3):
        assert calm.bot_token(enterprise_id=None, team_id="T1") == first
    assert refreshes(mock_rotating) == []

    eager = installation_store(
        home,
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        base_url=mock_rotating.api_url,
        refresh_minutes=13 * 60,  # expiring within 13 hours: refresh now
    )
    second = eager.bot_token(enterprise_id=None, team_id="T1")
    assert second != first
    assert refreshes(mock_rotating) == ["xoxe-1-refresh1"]
    # The newest token is the one every other reader now finds (same install, same store).
    assert calm.bot_token(enterprise_id=None, team_id="T1") == second
    found = calm.find_installation(enterprise_id=None, team_id="T1")
    assert found is not None
    assert found.bot_token == second
    assert found.bot_refresh_token == "xoxe-1-refresh2"
    app.close()


@pytest.fixture
def mock_rotating() -> Iterator[MockSlackAPI]:
    with MockSlackAPI(token_lifetime=43_200, client_secret=CLIENT_SECRET) as api:
        yield api


def test_a_token_refused_as_expired_is_refreshed_and_the_call_retried(
    tmp_path: Path, secret: str, mock_rotating: MockSlackAPI, agent: Agent, approvals: Approvals
) -> None:
    """Slack ended the token before its stated time (revoked, clock skew): the channel refreshes
    it once and sends the message again, instead of leaving the approver without it."""
    home = tmp_path / "home"
    app = server(home, mock_rotating, secret)
    [first] = mock_rotating.expiry
    mock_rotating.expire_tokens()
    store = installation_store(
        home, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, base_url=mock_rotating.api_url
    )
    with SlackApprovalChannel(
        "C9", installation_store=store, team_id="T1", base_url=mock_rotating.api_url
    ) as channel:
        approvals.channels = (channel,)
        agent.start(3)
        agent.request()
        mock_rotating.wait_for("chat.postMessage", 2)  # refused, then sent again
        assert channel.flush()
        tried = [bearer(c.headers) for c in mock_rotating.calls_to("chat.postMessage")]
        assert tried[0] == first
        assert len(tried) == 2
        assert not mock_rotating.expired(tried[1])
        assert channel.errors == []
        assert approve_by_command(app, agent, mock_rotating, secret).startswith("Your approval")
        assert agent.finish()["result"] == "wire-3"
    assert refreshes(mock_rotating) == ["xoxe-1-refresh1"]
    app.close()


def test_a_refresh_slack_refuses_is_reported_and_decides_nothing(
    tmp_path: Path, secret: str, mock_rotating: MockSlackAPI, agent: Agent, approvals: Approvals
) -> None:
    home = tmp_path / "home"
    mock_rotating.token_lifetime = 60  # due within 120 minutes
    app = server(home, mock_rotating, secret)
    wrong = installation_store(
        home, client_id=CLIENT_ID, client_secret="not-the-secret", base_url=mock_rotating.api_url
    )
    with SlackApprovalChannel(
        "C9", installation_store=wrong, team_id="T1", base_url=mock_rotating.api_url
    ) as channel:
        approvals.channels = (channel,)
        agent.start(4)
        request = agent.request()
        mock_rotating.wait_for("oauth.v2.access", 2)  # the install, then the refused refresh
        assert channel.flush()
        assert channel.errors == [
            f"post {request.id}: token refresh refused: Slack API error bad_client_secret"
        ]
        assert agent.waiting  # not approved, not denied: a human can still decide elsewhere
        assert approve_by_command(app, agent, mock_rotating, secret).startswith("Your approval")
        assert agent.finish()["result"] == "wire-4"
    assert "not-the-secret" not in repr(wrong)
    app.close()


def test_processes_sharing_the_store_refresh_once(
    tmp_path: Path, secret: str, mock_rotating: MockSlackAPI
) -> None:
    """Refresh tokens are single use: eight readers (separate store objects, as separate
    processes have) that find the token due at the same moment refresh it once, and all of
    them get the new token."""
    home = tmp_path / "home"
    mock_rotating.token_lifetime = 60  # the installed token is due (within 120 minutes)
    app = server(home, mock_rotating, secret)
    mock_rotating.token_lifetime = 43_200  # the refreshed one is not
    readers = [
        installation_store(
            home, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, base_url=mock_rotating.api_url
        )
        for _ in range(8)
    ]
    start = threading.Barrier(len(readers))
    tokens: list[str] = []

    def read(store: RotatingInstallationStore) -> None:
        start.wait()
        tokens.append(store.bot_token(enterprise_id=None, team_id="T1"))

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert refreshes(mock_rotating) == ["xoxe-1-refresh1"]
    assert tokens == ["xoxe.xoxb-1-mock2"] * 8
    app.close()


def test_a_rotating_install_the_agents_cannot_refresh_is_refused_at_start(
    tmp_path: Path, secret: str, mock_rotating: MockSlackAPI
) -> None:
    home = tmp_path / "home"
    app = server(home, mock_rotating, secret)
    no_secret = installation_store(home, client_id=CLIENT_ID, base_url=mock_rotating.api_url)
    with pytest.raises(ConfigurationError, match="SLACK_CLIENT_SECRET"):
        SlackApprovalChannel("C9", installation_store=no_secret, team_id="T1")
    plain = SQLite3InstallationStore(
        database=str(home / "slack" / "installations.sqlite3"), client_id=CLIENT_ID
    )
    with pytest.raises(ConfigurationError, match="rotat"):
        SlackApprovalChannel("C9", installation_store=plain, team_id="T1")
    app.close()


@pytest.mark.parametrize("where", ["token", "client", "environment"])
def test_a_rotating_token_given_as_a_fixed_token_is_refused(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``xoxe.`` token stops working within 12 hours and nothing can refresh it."""
    rotating = "xoxe.xoxb-1-abc"
    with pytest.raises(ConfigurationError, match="rotat") as raised:
        if where == "token":
            SlackApprovalChannel("C1", token=rotating)
        elif where == "client":
            SlackApprovalChannel("C1", client=WebClient(token=rotating))
        else:
            monkeypatch.setenv("SLACK_BOT_TOKEN", rotating)
            SlackApprovalChannel("C1")
    assert rotating not in str(raised.value)
    with pytest.raises(ConfigurationError, match="rotat"):
        SlackApprovals(signing_secret="s", token=rotating)
