"""An agent blocks on an IRREVERSIBLE step; Slack posts it; a signed click decides it once."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from agent_saga import GateRefused, SagaRolledBack
from agent_saga._approvals.request import ApprovalBook
from agent_saga_slack import SlackApprovalChannel, SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, button_body, signed_headers
from slack_bolt import BoltRequest
from slack_sdk import WebClient

if TYPE_CHECKING:
    from conftest import Agent, Sender


def kinds(agent: Agent, kind: str) -> list[dict[str, object]]:
    return [dict(r.data) for r in agent.kit.store.records() if r.kind == kind]


def test_a_click_from_an_allowed_user_approves_and_the_step_runs_once(
    agent: Agent, send: Sender, mock: MockSlackAPI, channel: SlackApprovalChannel
) -> None:
    agent.start(900)
    request = agent.request()
    posted = mock.wait_for("chat.postMessage")[0]
    assert posted.headers["authorization"] == "Bearer xoxb-agent"
    assert posted.body["channel"] == "C1"
    shown = json.dumps(posted.body["blocks"])
    for fact in ("bank.wire", "irreversible", request.id, request.digest, request.saga, "DE00"):
        assert fact in shown
    assert "1234" not in shown  # the redacted PIN is masked in the message too
    buttons = posted.body["blocks"][-1]["elements"]
    assert [b["action_id"] for b in buttons] == ["agent_saga_approve", "agent_saga_deny"]
    assert {b["value"] for b in buttons} == {request.id}
    assert agent.bank.wired == []  # nothing runs while the human thinks

    mallory = send(button_body(request.id, user="U666", response_url=mock.response_url("m")))
    assert mallory.status == 200
    assert agent.waiting  # a click from someone not allowed decides nothing
    refused = mock.wait_for("resp/m")[-1].body
    assert refused["response_type"] == "ephemeral"
    assert "Nothing was recorded" in refused["text"]
    assert "slack:U666 may not approve" in refused["text"]

    click = button_body(request.id, user="U1", response_url=mock.response_url("u1"))
    assert send(click).status == 200
    assert agent.finish()["result"] == "wire-900"
    assert agent.bank.wired == [900]
    reply = mock.wait_for("resp/u1")[0].body
    assert "Your approval is recorded" in reply["text"]
    assert reply["response_type"] == "ephemeral"

    assert channel.flush()
    update = mock.wait_for("chat.update")[0]
    assert update.body["ts"] == channel.posted[request.id].ts
    assert update.body["channel"] == "C1"
    assert "approved" in update.body["text"]
    assert "agent_saga_approve" not in json.dumps(update.body["blocks"])  # no buttons left

    votes = kinds(agent, "approval.vote")
    assert [(v["by"], v["decision"], v["channel"]) for v in votes] == [
        ("slack:U1", "approve", "slack")
    ]
    assert [r["by"] for r in kinds(agent, "approval.refused")] == ["slack:U666"]
    book = ApprovalBook().take_all(agent.kit.store.records())
    assert book.decided == {request.id: "approved"}


def test_a_denial_from_slack_refuses_the_step_and_rolls_back(
    agent: Agent, send: Sender, mock: MockSlackAPI, channel: SlackApprovalChannel
) -> None:
    agent.start(700)
    request = agent.request()
    stranger = button_body(request.id, user="U666", approve=False, response_url=mock.response_url())
    send(stranger)
    assert agent.waiting
    send(button_body(request.id, user="U1", approve=False, response_url=mock.response_url("d")))
    error = agent.finish()["error"]
    assert isinstance(error, SagaRolledBack)
    assert isinstance(error.cause, GateRefused)
    assert "denied" in error.cause.reason
    assert agent.bank.wired == []
    assert agent.bank.released == ["hold-700"]
    assert "Your denial is recorded" in mock.wait_for("resp/d")[0].body["text"]
    assert channel.flush()
    update = mock.wait_for("chat.update")[0]
    assert "denied" in update.body["text"]
    assert "Denied" in json.dumps(update.body["blocks"])


def test_approve_clicked_on_a_denied_request_says_denied(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start(5)
    request = agent.request()
    send(button_body(request.id, user="U1", approve=False, response_url=mock.response_url("d")))
    assert isinstance(agent.finish()["error"], SagaRolledBack)

    late = send(button_body(request.id, user="U1", response_url=mock.response_url("late")))
    assert late.status == 200
    replace, reply = (c.body for c in mock.wait_for("resp/late", 2))
    assert replace["replace_original"] is True  # the message is corrected in place
    assert "denied" in replace["text"]
    assert "agent_saga_approve" not in json.dumps(replace["blocks"])
    assert "already decided: denied" in reply["text"]
    assert "approved" not in reply["text"].lower()
    assert "Nothing was recorded" in reply["text"]
    assert len(kinds(agent, "approval.vote")) == 1
    assert agent.bank.wired == []


def test_a_replayed_click_inside_the_window_decides_nothing_twice(
    agent: Agent, send: Sender, mock: MockSlackAPI, secret: str
) -> None:
    agent.start(42)
    request = agent.request()
    click = button_body(request.id, user="U1", response_url=mock.response_url("r"))
    headers = signed_headers(secret, click)
    assert send(click, headers).status == 200
    assert send(click, headers).status == 200  # the very same signed request, again
    assert agent.finish()["result"] == "wire-42"
    assert agent.bank.wired == [42]
    assert len(kinds(agent, "approval.vote")) == 1
    decided = kinds(agent, "approval.decided")
    assert [d["decision"] for d in decided] == ["approved"]
    second = mock.wait_for("resp/r", 2)[-1].body["text"]
    assert "Nothing was recorded" in second


def test_an_app_given_no_store_votes_in_the_log_the_agents_use(
    agent: Agent, mock: MockSlackAPI, secret: str
) -> None:
    """Both sides resolve the agent-saga home the same way (here ``$AGENT_SAGA_HOME``), so a
    click finds the request the channel posted: there is no second, app-only store."""
    agent.start(64)
    request = agent.request()
    with SlackApprovals(
        signing_secret=secret,
        client=WebClient(token="xoxb-app", base_url=mock.api_url),
        process_before_response=True,
    ) as app:
        assert app.store is not agent.kit.store
        click = button_body(request.id, user="U1", response_url=mock.response_url("own"))
        response = app.app.dispatch(
            BoltRequest(body=click, headers=dict(signed_headers(secret, click)))
        )
        assert response.status == 200
        assert agent.finish()["result"] == "wire-64"
    assert "Your approval is recorded" in mock.wait_for("resp/own")[0].body["text"]


def test_a_double_click_arriving_at_once_is_one_vote(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    import threading

    agent.start(9)
    request = agent.request()
    clicks = [
        button_body(request.id, user="U1", response_url=mock.response_url(f"d{n}"))
        for n in range(4)
    ]
    threads = [threading.Thread(target=send, args=(click,)) for click in clicks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert agent.finish()["result"] == "wire-9"
    assert agent.bank.wired == [9]
    assert len(kinds(agent, "approval.vote")) == 1
    replies = [mock.wait_for(f"resp/d{n}")[-1].body["text"] for n in range(4)]
    assert sum("Your approval is recorded" in text for text in replies) == 1
    assert sum("Nothing was recorded" in text for text in replies) == 3
