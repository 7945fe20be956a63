"""Over real HTTP: the Starlette routes under uvicorn, OAuth install across workspaces, and
``python -m agent_saga_slack serve`` voting in the agents' own log from another process."""

from __future__ import annotations

import http.client
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import uvicorn
from agent_saga import Approvals
from agent_saga_slack import (
    SlackApprovalChannel,
    SlackApprovals,
    build_oauth_install_url,
    installation_store,
    oauth_settings,
)
from agent_saga_slack.asgi import starlette_app
from agent_saga_slack.testing import BOT_TOKEN, MockSlackAPI, command_body, signed_headers
from slack_sdk import WebClient

if TYPE_CHECKING:
    from conftest import Agent


@contextmanager
def served(approvals: SlackApprovals) -> Iterator[str]:
    """The app under uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    config = uvicorn.Config(
        starlette_app(approvals),
        host="127.0.0.1",
        port=0,
        lifespan="off",
        ws="none",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def fetch(
    url: str, body: str | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, dict(error.headers), error.read().decode()


def declared_too_long(url: str, headers: dict[str, str]) -> int:
    """POST that declares a body over the limit; answered before the body is sent."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.putrequest("POST", parts.path)
        for name, value in {**headers, "content-length": str(2_000_000)}.items():
            connection.putheader(name, value)
        connection.endheaders()
        return connection.getresponse().status
    finally:
        connection.close()


def votes(agent: Agent) -> int:
    return sum(1 for r in agent.kit.store.records() if r.kind == "approval.vote")


def test_signed_commands_over_http_and_what_is_refused(
    agent: Agent, slack: SlackApprovals, mock: MockSlackAPI, secret: str
) -> None:
    agent.start(77)
    request = agent.request()
    with served(slack) as base:
        events = base + "/slack/events"
        body = command_body(f"approve {request.id}", user="U1", response_url=mock.response_url())
        forged = signed_headers("wrong-secret", body)
        assert fetch(events, body, forged)[0] == 401
        stale = signed_headers(secret, body, timestamp=int(time.time()) - 301)
        assert fetch(events, body, stale)[0] == 401
        fractional = {**signed_headers(secret, body), "x-slack-request-timestamp": "1.0"}
        assert fetch(events, body, fractional)[0] == 401
        assert declared_too_long(events, signed_headers(secret, body)) == 413
        assert votes(agent) == 0
        assert agent.waiting
        assert fetch(events, body, signed_headers(secret, body))[0] == 200
        assert agent.finish()["result"] == "wire-77"
    assert votes(agent) == 1


def test_install_in_a_workspace_then_approve_there(
    tmp_path: Path, mock: MockSlackAPI, agent: Agent, approvals: Approvals, secret: str
) -> None:
    home = tmp_path / "home"
    settings = oauth_settings(
        home=home,
        client_id="111.222",
        client_secret="client-secret-value",
        redirect_uri="https://saga.example/slack/oauth_redirect",
    )
    url = build_oauth_install_url(settings, state="st-1")
    assert url.startswith("https://slack.com/oauth/v2/authorize?")
    for part in ("state=st-1", "client_id=111.222", "scope=chat:write,commands", "redirect_uri="):
        assert part in url
    slack = SlackApprovals(
        store=agent.kit.store,
        signing_secret=secret,
        oauth=settings,
        client=WebClient(base_url=mock.api_url),
        process_before_response=True,
    )
    with served(slack) as base:
        status, headers, page = fetch(base + "/slack/install")
        assert status == 200
        state = re.search(r"state=([^&\"]+)", page)
        assert state is not None
        cookie = headers["set-cookie"].split(";")[0]
        assert cookie.startswith("slack-app-oauth-state=")
        no_cookie = fetch(f"{base}/slack/oauth_redirect?code=abc&state={state.group(1)}")
        assert no_cookie[0] != 200  # the state must come back in the installer's browser
        done = fetch(
            f"{base}/slack/oauth_redirect?code=abc&state={state.group(1)}",
            headers={"Cookie": cookie},
        )
        assert done[0] == 200, done
        replayed = fetch(
            f"{base}/slack/oauth_redirect?code=abc&state={state.group(1)}",
            headers={"Cookie": cookie},
        )
        assert replayed[0] != 200  # a state is consumed once
        exchange = mock.calls_to("oauth.v2.access")
        assert len(exchange) == 1
        assert exchange[0].body["code"] == "abc"

        # The install persists: a new store object (another process) finds the bot token.
        store = installation_store(home, client_id="111.222")
        bot = store.find_bot(enterprise_id=None, team_id="T1")
        assert bot is not None
        assert bot.bot_token == BOT_TOKEN
        database = home / "slack" / "installations.sqlite3"
        assert stat.S_IMODE(database.stat().st_mode) == 0o600
        assert stat.S_IMODE((home / "slack").stat().st_mode) == 0o700
        assert b"client-secret-value" not in database.read_bytes()

        # The agents' channel posts with that workspace's token, and a click there decides.
        with SlackApprovalChannel(
            "C9", installation_store=store, team_id="T1", base_url=mock.api_url
        ) as channel:
            approvals.channels = (channel,)  # the kit's own Approvals
            agent.start(5)
            request = agent.request()
            posted = mock.wait_for("chat.postMessage")[0]
            assert posted.headers["authorization"] == f"Bearer {BOT_TOKEN}"
            body = command_body(
                f"approve {request.id}", user="U1", response_url=mock.response_url()
            )
            assert fetch(base + "/slack/events", body, signed_headers(secret, body))[0] == 200
            assert agent.finish()["result"] == "wire-5"
            assert channel.flush()
        auth = mock.calls_to("auth.test")[-1]
        assert auth.headers["authorization"] == f"Bearer {BOT_TOKEN}"  # found by team id


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_serve_in_another_process_votes_in_the_agents_log(
    agent: Agent, mock: MockSlackAPI, secret: str, tmp_path: Path
) -> None:
    """The server is given no store: it finds the log the agents use from AGENT_SAGA_HOME.
    It accepts votes from the workspaces listed (``--team T9,T1``: two of them) and starts
    without any warning from the framework."""
    port = free_port()
    env = {
        **os.environ,
        "AGENT_SAGA_HOME": str(agent.kit.home),
        "SLACK_SIGNING_SECRET": secret,
        "SLACK_BOT_TOKEN": "xoxb-server-token",
        "SLACK_API_URL": mock.api_url,
    }
    log = (tmp_path / "serve.log").open("w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "agent_saga_slack", "serve", "--port", str(port), "--team", "T9,T1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.05)
        agent.start(31)
        request = agent.request()
        body = command_body(f"approve {request.id}", user="U1", response_url=mock.response_url())
        events = f"http://127.0.0.1:{port}/slack/events"
        assert fetch(events, body, signed_headers(secret, body))[0] == 200
        assert agent.finish()["result"] == "wire-31"
        assert "Your approval is recorded" in mock.wait_for("resp/1")[0].body["text"]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    output = (tmp_path / "serve.log").read_text()
    for secret_value in (secret, "xoxb-server-token"):
        assert secret_value not in output
    assert "agent-saga-slack: serving /saga-approve" in output
    assert "will be unused" not in output  # slack-bolt's warning about a second token
    assert "warning" not in output.lower(), output
    assert "Traceback" not in output


def test_serve_refuses_to_start_without_a_signing_secret(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLACK_")}
    done = subprocess.run(
        [sys.executable, "-m", "agent_saga_slack", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "signing secret is missing" in done.stderr


@pytest.mark.parametrize("missing", ["SLACK_CLIENT_SECRET"])
def test_oauth_needs_its_secret(missing: str, tmp_path: Path) -> None:
    from agent_saga import ConfigurationError

    with pytest.raises(ConfigurationError, match=missing):
        oauth_settings(home=tmp_path / "home", client_id="111.222")
    settings = oauth_settings(home=tmp_path / "home", client_id="111.222", client_secret="c")
    with pytest.raises(ConfigurationError, match="not both"):
        SlackApprovals(signing_secret="s", token="xoxb-x", oauth=settings)
