"""`/saga-approve approve|deny <id> [note]`: no verb or an unknown verb is an error, not a vote."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, Approvals, CompensatorRegistry, SagaRolledBack
from agent_saga_slack import Command, SlackApprovals, parse_command
from agent_saga_slack.testing import MockSlackAPI, command_body
from slack_sdk import WebClient

if TYPE_CHECKING:
    from pathlib import Path

    from conftest import Agent, Sender


def votes(agent: Agent) -> list[dict[str, object]]:
    return [dict(r.data) for r in agent.kit.store.records() if r.kind == "approval.vote"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "No verb given"),
        ("   ", "No verb given"),
        ("apr-0123456789abcdef", "Unknown verb"),  # an id alone is not an approval
        ("yes apr-0123456789abcdef", "Unknown verb"),
        ("approved apr-0123456789abcdef", "Unknown verb"),
        ("ok apr-0123456789abcdef", "Unknown verb"),
        ("approve", "No request id given"),
        ("deny ", "No request id given"),
        ("approve " + "x" * 3000, "too long"),
    ],
)
def test_malformed_commands_are_errors(text: str, error: str) -> None:
    parsed = parse_command(text)
    assert isinstance(parsed, str)
    assert error in parsed
    assert "Nothing was recorded" in parsed


def test_well_formed_commands() -> None:
    assert parse_command("approve apr-1") == Command("approve", "apr-1", "")
    assert parse_command("APPROVE apr-1  checked the invoice ") == Command(
        "approve", "apr-1", "checked the invoice"
    )
    assert parse_command("deny apr-2 wrong account") == Command("deny", "apr-2", "wrong account")


def test_an_unknown_verb_in_slack_records_nothing(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start()
    request = agent.request()
    for n, text in enumerate(["", request.id, f"yes {request.id}", f"approved {request.id}"]):
        url = mock.response_url(f"c{n}")
        assert send(command_body(text, user="U1", response_url=url)).status == 200
        reply = mock.wait_for(f"resp/c{n}")[0].body
        assert reply["response_type"] == "ephemeral"
        assert "Usage: `/saga-approve approve <request id> [note]`" in reply["text"]
    assert votes(agent) == []
    assert agent.waiting


def test_approve_by_command_runs_the_step_once_with_the_note(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start(12)
    request = agent.request()
    text = f"approve {request.id} checked the invoice"
    assert send(command_body(text, user="U1", response_url=mock.response_url("a"))).status == 200
    assert agent.finish()["result"] == "wire-12"
    assert "Your approval is recorded" in mock.wait_for("resp/a")[0].body["text"]
    assert [(v["by"], v["note"]) for v in votes(agent)] == [("slack:U1", "checked the invoice")]
    again = send(command_body(text, user="U1", response_url=mock.response_url("b")))
    assert again.status == 200
    assert "already decided: approved" in mock.wait_for("resp/b")[0].body["text"]
    assert agent.bank.wired == [12]


def test_deny_by_command_rolls_the_saga_back(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start(8)
    request = agent.request()
    denied = command_body(f"deny {request.id} wrong account", user="U1", response_url=mock.url)
    send(denied)
    assert isinstance(agent.finish()["error"], SagaRolledBack)
    assert agent.bank.released == ["hold-8"]
    assert [v["decision"] for v in votes(agent)] == ["deny"]


def test_a_user_not_on_the_list_is_refused_and_logged(
    agent: Agent, send: Sender, mock: MockSlackAPI
) -> None:
    agent.start()
    request = agent.request()
    send(command_body(f"approve {request.id}", user="U2", response_url=mock.response_url("x")))
    reply = mock.wait_for("resp/x")[0].body["text"]
    assert "Nothing was recorded" in reply
    assert "slack:U2 may not approve" in reply
    assert votes(agent) == []
    refused = [r.data for r in agent.kit.store.records() if r.kind == "approval.refused"]
    assert [(r["by"], r["channel"]) for r in refused] == [("slack:U2", "slack")]
    assert agent.waiting


def test_an_expired_request_is_said_to_be_expired(
    tmp_path: Path, mock: MockSlackAPI, secret: str
) -> None:
    approvals = Approvals(approvers=["slack:U1"], expires_after=0.2, poll=0.01)
    with AgentKit(
        home=tmp_path / "home", approvals=approvals, registry=CompensatorRegistry()
    ) as kit:

        @kit.tool(name="ops.drop_table", semantics="irreversible")
        def drop(table: str) -> str:
            return table

        with pytest.raises(SagaRolledBack), kit.transaction("cleanup"):
            drop("users")
        [request] = [
            r.data["request"] for r in kit.store.records() if r.kind == "approval.requested"
        ]
        slack = SlackApprovals(
            store=kit.store,
            signing_secret=secret,
            client=WebClient(token="xoxb-app", base_url=mock.api_url),
            process_before_response=True,
        )
        outcome = slack.vote(str(request), "U1", "T1", "approve")
        assert not outcome.accepted
        assert outcome.final == "expired"
        assert "already decided: expired" in outcome.text
        assert "approved" not in outcome.text.lower()


def test_an_expired_request_its_agent_never_closed_is_said_to_be_expired(
    agent: Agent, slack: SlackApprovals
) -> None:
    agent.start()
    request = agent.request()
    later = SlackApprovals(
        store=agent.kit.store,
        signing_secret="s",
        client=slack.app.client,
        clock=lambda: time.time() + 3600,  # the approver looks an hour later
    )
    outcome = later.vote(request.id, "U1", "T1", "approve")
    assert not outcome.accepted
    assert outcome.final == "expired"
    assert "has expired" in outcome.text
    assert votes(agent) == []


def test_only_the_listed_workspaces_may_vote(agent: Agent, slack: SlackApprovals) -> None:
    agent.start(1)
    request = agent.request()
    guarded = SlackApprovals(
        store=agent.kit.store, signing_secret="s", client=slack.app.client, teams=["T1"]
    )
    other = guarded.vote(request.id, "U1", "T9", "approve")  # same user id, another workspace
    assert not other.accepted
    assert "workspace T9 may not decide" in other.text
    assert agent.waiting
    refused = [r.data for r in agent.kit.store.records() if r.kind == "approval.refused"]
    assert [r["reason"] for r in refused] == ["Slack workspace T9 is not allowed"]
    assert guarded.vote(request.id, "U1", "T1", "approve").accepted
    assert agent.finish()["result"] == "wire-1"
