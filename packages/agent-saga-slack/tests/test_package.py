"""The package's surface, what it imports, and that secrets stay out of logs and reprs."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

import agent_saga_slack
import pytest
from agent_saga.testing import installed_from, modules_after_import
from agent_saga_slack import SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, button_body, command_body, signed_headers
from slack_bolt import BoltRequest
from slack_sdk import WebClient

if TYPE_CHECKING:
    from conftest import Agent

PUBLIC = [
    "SCOPES",
    "Command",
    "PostedMessage",
    "RefusalLimit",
    "RotatingInstallationStore",
    "SlackApprovalChannel",
    "SlackApprovals",
    "SlackVote",
    "approver_id",
    "build_oauth_install_url",
    "decided_blocks",
    "installation_store",
    "oauth_settings",
    "parse_command",
    "request_blocks",
]


def test_the_public_surface_is_pinned() -> None:
    assert agent_saga_slack.__all__ == PUBLIC
    for name in PUBLIC:
        assert getattr(agent_saga_slack, name) is not None


def test_the_frameworks_are_the_installed_distributions() -> None:
    assert installed_from(importlib.import_module("slack_bolt"), "slack-bolt")
    assert installed_from(importlib.import_module("slack_sdk"), "slack-sdk")


def test_importing_the_package_loads_slack_and_no_other_framework_or_server() -> None:
    loaded = modules_after_import("agent_saga_slack")
    assert {"slack_bolt", "slack_sdk", "agent_saga"} <= loaded
    others = {"langchain_core", "llama_index", "agents", "opentelemetry", "starlette", "uvicorn"}
    assert loaded & others == set()


def test_no_secret_reaches_a_log_or_a_repr(
    agent: Agent, mock: MockSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    signing_secret, bot_token = "signing-secret-5f1e", "xoxb-bot-token-77aa"
    with caplog.at_level(logging.DEBUG):
        app = SlackApprovals(
            store=agent.kit.store,
            signing_secret=signing_secret,
            client=WebClient(token=bot_token, base_url=mock.api_url),
            process_before_response=True,
        )
        agent.start(2)
        request = agent.request()
        for body in (
            command_body(f"approve {request.id}", user="U7", response_url=mock.response_url()),
            button_body(request.id, user="U1", response_url=mock.response_url()),
        ):
            headers = dict(signed_headers(signing_secret, body))
            assert app.app.dispatch(BoltRequest(body=body, headers=headers)).status == 200  # type: ignore[arg-type]
        assert agent.finish()["result"] == "wire-2"
    assert "slack vote approve by slack:U1" in caplog.text  # our own log line is there
    for secret in (signing_secret, bot_token):
        assert secret not in caplog.text
        assert secret not in repr(app)
