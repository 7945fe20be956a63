"""Who may decide is configuration, not code; a quorum counts each Slack user once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from agent_saga import AgentKit, Allow, CompensatorRegistry, RequireApproval, ToolCall
from agent_saga_slack import SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, button_body, command_body, signed_headers
from slack_bolt import BoltRequest
from slack_sdk import WebClient

if TYPE_CHECKING:
    from conftest import Agent


class TwoPersonRule:
    """Wires need two of the three treasurers."""

    name = "two-person"

    def evaluate(self, call: ToolCall) -> Allow | RequireApproval:
        if call.tool != "bank.wire":
            return Allow()
        return RequireApproval(
            "two-person", "wires need two treasurers", ("slack:U1", "slack:U2", "slack:U3"), 2
        )


def app_for(kit: AgentKit, mock: MockSlackAPI, secret: str) -> SlackApprovals:
    return SlackApprovals(
        store=kit.store,
        signing_secret=secret,
        client=WebClient(token="xoxb-app", base_url=mock.api_url),
        process_before_response=True,
    )


def dispatch(app: SlackApprovals, body: str, headers: dict[str, str]) -> int:
    return app.app.dispatch(BoltRequest(body=body, headers=dict(headers))).status


def test_approvers_come_from_the_configuration(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mock: MockSlackAPI,
    secret: str,
    agent_on: Callable[[AgentKit], Agent],
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent-saga.toml").write_text('approvers = ["slack:U2", "slack:U3"]\n')
    monkeypatch.chdir(project)
    with AgentKit(home=tmp_path / "home", registry=CompensatorRegistry()) as kit:
        agent = agent_on(kit).start(6)
        request = agent.request()
        assert request.approvers == ("slack:U2", "slack:U3")
        app = app_for(kit, mock, secret)
        for user, name in (("U1", "u1"), ("U3", "u3")):
            body = command_body(
                f"approve {request.id}", user=user, response_url=mock.response_url(name)
            )
            assert dispatch(app, body, signed_headers(secret, body)) == 200
        assert agent.finish()["result"] == "wire-6"
        assert "slack:U1 may not approve" in mock.wait_for("resp/u1")[0].body["text"]
        assert "Your approval is recorded" in mock.wait_for("resp/u3")[0].body["text"]


def test_a_replayed_click_is_not_a_second_approver(
    tmp_path: Path, mock: MockSlackAPI, secret: str, agent_on: Callable[[AgentKit], Agent]
) -> None:
    from agent_saga import Approvals

    approvals = Approvals(poll=0.01)
    with AgentKit(
        home=tmp_path / "home",
        rules=[TwoPersonRule()],
        approvals=approvals,
        registry=CompensatorRegistry(),
    ) as kit:
        agent = agent_on(kit).start(10)
        request = agent.request()
        assert request.quorum == 2
        app = app_for(kit, mock, secret)
        click = button_body(request.id, user="U1", response_url=mock.response_url("u1"))
        headers = signed_headers(secret, click)
        for _ in range(3):  # the same signed click, three times inside the window
            assert dispatch(app, click, headers) == 200
        assert agent.waiting  # one approver, however often, is not two
        first, *again = (c.body["text"] for c in mock.wait_for("resp/u1", 3))
        assert "It needs 2 approvers in all" in first
        assert all("slack:U1 has already voted" in text for text in again)
        other = button_body(request.id, user="U2", response_url=mock.response_url("u2"))
        assert dispatch(app, other, signed_headers(secret, other)) == 200
        assert agent.finish()["result"] == "wire-10"
        assert agent.bank.wired == [10]
        votes = [r.data["by"] for r in kit.store.records() if r.kind == "approval.vote"]
        assert votes == ["slack:U1", "slack:U2"]
