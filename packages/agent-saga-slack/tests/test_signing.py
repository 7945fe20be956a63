"""Authenticity is the framework's: slack-bolt verifies every request's v0 signature.

A request that fails verification is answered 401 and reaches no listener, so it records no vote.
A valid signature only proves Slack sent the request; who may decide is checked separately.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from agent_saga_slack import SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, button_body, signed_headers
from slack_sdk.signature import SignatureVerifier

if TYPE_CHECKING:
    from conftest import Agent, Sender


def votes(agent: Agent) -> int:
    return sum(1 for r in agent.kit.store.records() if r.kind == "approval.vote")


def test_slacks_worked_example_verifies() -> None:
    # https://docs.slack.dev/authentication/verifying-requests-from-slack/ (worked example)
    body = (
        "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect"
        "&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554"
        "%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    verifier = SignatureVerifier(secret)
    assert verifier.generate_signature(timestamp="1531420618", body=body) == expected


def test_a_bad_signature_is_401_and_records_nothing(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start()
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    forged = signed_headers("not-the-signing-secret", click)
    assert send(click, forged).status == 401
    assert votes(agent) == 0
    assert mock.calls_to("resp/1") == []
    assert agent.waiting


@pytest.mark.parametrize("skew", [-301, 301, -3600])
def test_a_timestamp_outside_five_minutes_is_401(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str, skew: int
) -> None:
    agent.start()
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    old = signed_headers(secret, click, timestamp=int(time.time()) + skew)
    assert send(click, old).status == 401
    assert votes(agent) == 0
    assert agent.waiting


def test_a_timestamp_inside_the_window_is_accepted(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str
) -> None:
    agent.start(3)
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    recent = signed_headers(secret, click, timestamp=int(time.time()) - 280)
    assert send(click, recent).status == 200
    assert agent.finish()["result"] == "wire-3"
    assert votes(agent) == 1


def test_the_signature_covers_the_raw_body_not_its_parse(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str
) -> None:
    agent.start()
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    assert "%2F" in click
    headers = signed_headers(secret, click)
    reencoded = click.replace("%2F", "/")  # the same form data, other bytes
    assert send(reencoded, headers).status == 401
    tampered = click.replace("U1", "U2")
    assert send(tampered, headers).status == 401
    assert votes(agent) == 0


@pytest.mark.parametrize(
    "broken",
    ["no signature", "no timestamp", "upper-case hex", "two signatures"],
)
def test_malformed_signature_headers_are_401(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str, broken: str
) -> None:
    agent.start()
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    headers: dict[str, str] = signed_headers(secret, click)
    if broken == "no signature":
        del headers["x-slack-signature"]
    elif broken == "no timestamp":
        del headers["x-slack-request-timestamp"]
    elif broken == "upper-case hex":
        headers["x-slack-signature"] = "v0=" + headers["x-slack-signature"][3:].upper()
    else:
        headers["x-slack-signature"] = "v0=" + "0" * 64 + "," + headers["x-slack-signature"]
    assert send(click, headers).status == 401
    assert votes(agent) == 0


def test_the_app_refuses_to_start_without_a_signing_secret(mock: MockSlackAPI) -> None:
    from agent_saga import ConfigurationError

    with pytest.raises(ConfigurationError, match="signing secret"):
        SlackApprovals(token="xoxb-x", base_url=mock.api_url)
    with pytest.raises(ConfigurationError, match="no Slack bot token"):
        SlackApprovals(signing_secret="s", base_url=mock.api_url)
    assert mock.calls == []  # nothing was sent before the configuration was complete


def test_a_fractional_timestamp_is_rejected_and_records_nothing(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """slack-sdk's verifier raises on ``1531420618.0``, which slack-bolt answers 500: rejected,
    not 401 (the HTTP handler of :mod:`agent_saga_slack.asgi` answers 401 before dispatch)."""
    agent.start()
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url())
    headers = signed_headers(secret, click)
    headers["x-slack-request-timestamp"] += ".0"
    with caplog.at_level("CRITICAL", logger="slack_bolt"):
        assert send(click, headers).status == 500
    assert votes(agent) == 0
    assert agent.waiting
