"""``serve`` as an admin runs it: whatever stops a start is one ``Error:`` line, never a
traceback; several workspaces can be listed; a normal start prints no framework warning."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agent_saga import ConfigurationError
from agent_saga_slack import SlackApprovals
from agent_saga_slack.__main__ import main, parse
from agent_saga_slack.testing import MockSlackAPI, command_body, signed_headers
from slack_bolt import BoltRequest

if TYPE_CHECKING:
    from conftest import Agent


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def refusing() -> Iterator[MockSlackAPI]:
    with MockSlackAPI(refused_tokens={"xoxb-revoked"}) as api:
        yield api


@pytest.fixture
def environment(
    monkeypatch: pytest.MonkeyPatch, refusing: MockSlackAPI, secret: str
) -> pytest.MonkeyPatch:
    """A complete single-workspace configuration against the local Web API."""
    monkeypatch.setenv("SLACK_SIGNING_SECRET", secret)
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-valid")
    monkeypatch.setenv("SLACK_API_URL", refusing.api_url)
    return monkeypatch


def failed_start(
    argv: list[str], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> tuple[int, str]:
    """Exit status and stderr of ``serve`` run in this process (as click's runner would).

    Log records of level WARNING and up count as printed: with no logging configured, as when
    the command runs, Python writes them to stderr.
    """
    with caplog.at_level(logging.WARNING), pytest.raises(SystemExit) as stopped:
        main(["serve", *argv])
    captured = capsys.readouterr()
    assert captured.out == ""
    assert isinstance(stopped.value.code, int)
    logged = "".join(f"{r.name}: {r.getMessage()}\n" for r in caplog.records if _printed(r))
    return stopped.value.code, logged + captured.err


def _printed(record: logging.LogRecord) -> bool:
    """Whether the command would print ``record`` (pytest also sees non-propagating loggers;
    the token check's logger is one, with a NullHandler: its failure is the Error line)."""
    return record.levelno >= logging.WARNING and record.name != "agent_saga_slack.token_check"


@pytest.mark.parametrize(
    ("case", "argv", "expected"),
    [
        ("invalid token", [], "Error: Slack refused the bot token"),
        ("unreachable", [], "Error: cannot reach Slack at http://127.0.0.1:"),
        ("port too high", ["--port", "99999"], "Error: --port takes a number from 1 to 65535"),
        ("port not a number", ["--port", "http"], "Error: --port takes a number"),
        ("port in use", [], "Error: cannot listen on 127.0.0.1:"),
        ("home is a file", ["--home", "FILE"], "Error: cannot use the agent-saga home"),
        ("home under a file", ["--home", "FILE/home"], "Error: cannot use the agent-saga home"),
        ("oauth home under a file", ["--home", "FILE/home"], "Error: cannot create "),
        ("not a workspace id", ["--team", "t1;T2"], "Error: not a Slack workspace id"),
        ("rotating token", [], "Error: the Slack token in token= or SLACK_BOT_TOKEN rotates"),
        ("token and oauth", [], "Error: both SLACK_BOT_TOKEN"),
        ("no secret", [], "Error: the Slack signing secret is missing"),
        ("unknown option", ["--bogus"], "Error: unrecognized arguments: --bogus"),
    ],
)
def test_start_up_errors_are_one_line(
    case: str,
    argv: list[str],
    expected: str,
    environment: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("not a directory\n")
    argv = [arg.replace("FILE", str(afile)) for arg in argv]
    if case == "invalid token":
        environment.setenv("SLACK_BOT_TOKEN", "xoxb-revoked")
    elif case == "unreachable":
        environment.setenv("SLACK_API_URL", f"http://127.0.0.1:{closed_port()}/api/")
    elif case == "rotating token":
        environment.setenv("SLACK_BOT_TOKEN", "xoxe.xoxb-1-rotating")
    elif case in ("token and oauth", "oauth home under a file"):
        environment.setenv("SLACK_CLIENT_ID", "111.222")
        environment.setenv("SLACK_CLIENT_SECRET", "client-secret-value")
        if case == "oauth home under a file":
            environment.delenv("SLACK_BOT_TOKEN")
    elif case == "no secret":
        environment.delenv("SLACK_SIGNING_SECRET")
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        if case == "port in use":
            argv = ["--port", str(taken.getsockname()[1])]
        else:
            argv = ["--port", str(closed_port()), *argv] if "--port" not in argv else argv
        status, err = failed_start(argv, capsys, caplog)
    finally:
        taken.close()
    assert status != 0
    assert err.count("\n") == 1, err
    assert err.startswith(expected), err
    assert "Traceback" not in err
    for secret_value in ("xoxb-revoked", "xoxe.xoxb-1-rotating", "client-secret-value"):
        assert secret_value not in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "Error: Slack refused the bot token (SLACK_BOT_TOKEN or token=): invalid_auth"),
        (["--unreachable"], "Error: cannot reach Slack at http://127.0.0.1:"),
    ],
)
def test_the_real_command_prints_one_line(
    argv: list[str], expected: str, refusing: MockSlackAPI, secret: str, tmp_path: Path
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SLACK_")},
        "AGENT_SAGA_HOME": str(tmp_path / "home"),
        "SLACK_SIGNING_SECRET": secret,
        "SLACK_BOT_TOKEN": "xoxb-revoked",
        "SLACK_API_URL": refusing.api_url,
    }
    if argv == ["--unreachable"]:
        argv, env["SLACK_BOT_TOKEN"] = [], "xoxb-valid"
        env["SLACK_API_URL"] = f"http://127.0.0.1:{closed_port()}/api/"
    done = subprocess.run(
        [sys.executable, "-m", "agent_saga_slack", "serve", "--port", str(closed_port()), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(expected)
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stdout == ""


def test_several_workspaces_are_listed_by_commas_or_by_repeating() -> None:
    options = parse(["serve", "--team", "T1,T2", "--team", " T3 ,", "--port", "4000"])
    assert options.teams == frozenset({"T1", "T2", "T3"})
    assert options.port == 4000
    with pytest.raises(ConfigurationError, match="not a Slack workspace id"):
        parse(["serve", "--team", "T1 T2"])
    with pytest.raises(ConfigurationError, match="not a Slack workspace id: 'T1,T2'"):
        SlackApprovals(signing_secret="s", token="xoxb-x", teams=["T1,T2"])


def test_each_listed_workspace_may_vote_and_no_other(
    agent: Agent, mock: MockSlackAPI, secret: str, slack: SlackApprovals
) -> None:
    agent.start(8)
    request = agent.request()
    guarded = SlackApprovals(
        store=agent.kit.store,
        signing_secret=secret,
        client=slack.app.client,
        teams=parse(["serve", "--team", "T7,T1"]).teams,
        process_before_response=True,
    )
    for team, name in (("T9", "t9"), ("T1", "t1")):
        body = command_body(
            f"approve {request.id}", user="U1", team=team, response_url=mock.response_url(name)
        )
        response = guarded.app.dispatch(
            BoltRequest(body=body, headers=dict(signed_headers(secret, body)))
        )
        assert response.status == 200
    assert "workspace T9 may not decide" in mock.wait_for("resp/t9")[0].body["text"]
    assert "Your approval is recorded" in mock.wait_for("resp/t1")[0].body["text"]
    assert agent.finish()["result"] == "wire-8"
