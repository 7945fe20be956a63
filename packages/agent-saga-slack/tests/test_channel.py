"""The channel shows requests and outcomes; it never decides, and Slack trouble never stalls."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

import pytest
from agent_saga import ApprovalRequest, Approvals, ConfigurationError, submit_vote
from agent_saga_slack import SlackApprovalChannel, decided_blocks, request_blocks
from agent_saga_slack.testing import MockSlackAPI
from slack_sdk import WebClient

if TYPE_CHECKING:
    from conftest import Agent


def a_request(**changes: object) -> ApprovalRequest:
    fields: dict[str, object] = {
        "id": "apr-0123456789abcdef",
        "saga": "saga-1",
        "ordinal": 2,
        "tool": "bank.wire",
        "semantics": "irreversible",
        "digest": "ab" * 32,
        "args": {"usd": 900, "memo": "<@U999> <https://evil.example|click> & co"},
        "rule": "irreversible",
        "reason": "needs a human",
        "approvers": ("slack:U1",),
        "quorum": 1,
        "requested_at": 1_800_000_000.0,
        "expires_at": 1_800_000_600.0,
    }
    fields.update(changes)
    return ApprovalRequest(**fields)  # type: ignore[arg-type]


def test_text_from_the_request_cannot_forge_mentions_or_links() -> None:
    shown = json.dumps(request_blocks(a_request()))
    assert "<@U999>" not in shown
    assert "&lt;@U999&gt;" in shown
    assert "<https://evil.example" not in shown
    assert "&amp; co" in shown


def test_long_arguments_are_clipped_within_block_kit_limits() -> None:
    blocks = request_blocks(a_request(args={"blob": "x" * 50_000}))
    for block in blocks:
        text = block.get("text", {}).get("text", "")
        assert len(text) <= 3000
        for field in block.get("fields", []):
            assert len(field["text"]) <= 2000
    assert "more characters" in json.dumps(blocks)


def test_the_decided_message_has_no_buttons_and_says_the_outcome() -> None:
    for decision, words in [
        ("approved", "Approved"),
        ("denied", "Denied"),
        ("expired", "Expired"),
        ("arguments_changed", "arguments changed"),
    ]:
        shown = json.dumps(decided_blocks(a_request(), decision))
        assert words in shown
        assert "agent_saga_approve" not in shown


def test_a_decision_made_elsewhere_updates_the_message_in_place(
    agent: Agent, mock: MockSlackAPI, channel: SlackApprovalChannel
) -> None:
    agent.start(3)
    request = agent.request()
    assert channel.flush()
    # decided outside Slack (the CLI does exactly this)
    assert submit_vote(agent.kit.store, request.id, "slack:U1", "approve", channel="cli").accepted
    assert agent.finish()["result"] == "wire-3"
    assert channel.flush()
    [update] = mock.calls_to("chat.update")
    assert update.body["ts"] == channel.posted[request.id].ts
    assert "approved" in update.body["text"]


def test_an_expired_request_is_shown_expired(
    agent: Agent, mock: MockSlackAPI, channel: SlackApprovalChannel, approvals: Approvals
) -> None:
    approvals.expires_after = 0.2  # the kit's own Approvals
    agent.start(3)
    assert "expired" in str(agent.finish()["error"])
    assert channel.flush()
    assert "expired" in mock.wait_for("chat.update")[0].body["text"]
    assert agent.bank.wired == []


def test_a_failing_slack_decides_nothing_and_is_reported(
    agent: Agent, mock: MockSlackAPI, approvals: Approvals, caplog: pytest.LogCaptureFixture
) -> None:
    broken = SlackApprovalChannel(
        "C1", client=WebClient(token="xoxb-secret-token", base_url=mock.url + "/nowhere/")
    )
    approvals.channels = (broken,)
    with caplog.at_level(logging.DEBUG):
        agent.start(4)
        request = agent.request()
        mock.wait_for("nowhere/chat.postMessage")  # the engine queues the post after logging
        assert broken.flush()
        assert agent.waiting  # still waiting for a human, not approved or denied by the error
        assert broken.errors == [f"post {request.id}: Slack API error unknown_method"]
        submit_vote(agent.kit.store, request.id, "slack:U1", "deny", channel="cli")
        agent.finish()
        assert broken.flush()
        broken.close()
    assert broken.errors[-1] == (
        f"update {request.id}: ConfigurationError: no posted message to update for {request.id}"
    )
    assert "xoxb-secret-token" not in caplog.text
    assert "xoxb-secret-token" not in repr(broken)


def test_posting_returns_at_once_even_when_slack_is_slow(mock: MockSlackAPI) -> None:
    slow = SlackApprovalChannel(
        "C1", client=WebClient(token="xoxb-x", base_url="http://127.0.0.1:9/api/", timeout=1)
    )
    started = time.monotonic()
    slow.request_posted(a_request())
    slow.request_decided(a_request(), "denied")
    assert time.monotonic() - started < 0.5
    assert slow.flush(timeout=30)
    slow.close()
    assert len(slow.errors) == 2


def test_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="channel id"):
        SlackApprovalChannel("")
    with pytest.raises(ConfigurationError, match="team_id"):
        from agent_saga_slack import installation_store

        SlackApprovalChannel("C1", installation_store=installation_store(client_id="1.2"))
    missing = SlackApprovalChannel("C1")
    missing.request_posted(a_request())
    assert missing.flush()
    missing.close()
    assert missing.errors == [
        "post apr-0123456789abcdef: ConfigurationError: no Slack bot token: pass token= or set "
        "SLACK_BOT_TOKEN"
    ]
