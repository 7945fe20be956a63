"""Refused votes are logged within a bound: anyone in the workspace can vote on made-up ids, but
cannot make the app write one fsynced record per attempt. Votes that count always go through."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import pytest
from agent_saga_slack import RefusalLimit, SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, command_body, signed_headers
from slack_bolt import BoltRequest

if TYPE_CHECKING:
    from conftest import Agent


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def refused(agent: Agent) -> list[dict[str, object]]:
    return [dict(r.data) for r in agent.kit.store.records() if r.kind == "approval.refused"]


def made_up(n: int) -> str:
    return f"apr-{n:016x}"


def app_for(
    agent: Agent, slack: SlackApprovals, clock: Clock, limit: RefusalLimit | None = None
) -> SlackApprovals:
    return SlackApprovals(
        store=agent.kit.store,
        signing_secret="s",
        client=slack.app.client,
        clock=clock,
        teams=["T1"],
        refusals=limit,
        process_before_response=True,
    )


def test_a_flood_from_one_user_writes_a_few_records_per_burst(
    agent: Agent,
    slack: SlackApprovals,
    mock: MockSlackAPI,
    secret: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    app = app_for(agent, slack, clock)
    agent.start(5)
    request = agent.request()
    # Through the real bolt app first, as Slack sends them: signed slash commands.
    signed = SlackApprovals(
        store=agent.kit.store,
        signing_secret=secret,
        client=slack.app.client,
        clock=clock,
        refusals=app.refusals,  # the same limit, as one server has
        process_before_response=True,
    )
    for n in range(20):
        body = command_body(
            f"approve {made_up(n)}", user="U666", response_url=mock.response_url(f"f{n}")
        )
        sent = BoltRequest(body=body, headers=dict(signed_headers(secret, body)))
        assert signed.app.dispatch(sent).status == 200
    last = mock.wait_for("resp/f19")[0].body["text"]
    assert f"Nothing was recorded for '{made_up(19)}': no such approval request" in last
    for n in range(20, 150):
        assert not app.vote(made_up(n), "U666", "T1", "approve").accepted
    written = refused(agent)
    assert 1 <= len(written) <= 3  # 150 attempts, at most 3 records in the minute
    assert {r["by"] for r in written} == {"slack:U666"}

    # The approver is not held back by the flood: the vote counts and the step runs.
    outcome = app.vote(request.id, "U1", "T1", "approve")
    assert outcome.accepted
    assert agent.finish()["result"] == "wire-5"

    # A minute later the next burst is recorded again, and says how many were left out.
    clock.now += 61
    with caplog.at_level(logging.WARNING, logger="agent_saga_slack"):
        for n in range(150, 200):
            app.vote(made_up(n), "U666", "T1", "approve")
    left = 150 - len(written)
    assert f"{left} refused Slack vote(s) were not logged in the last 60 s" in caplog.text
    later = refused(agent)[len(written) :]
    assert 1 <= len(later) <= 3
    assert later[0]["unlogged"] == left
    assert app.refusals.left_out() == 50 - len(later)


def test_a_flood_from_many_users_is_bounded_in_all(
    agent: Agent, slack: SlackApprovals, secret: str
) -> None:
    clock = Clock()
    app = app_for(agent, slack, clock)
    agent.start(6)
    request = agent.request()
    for user in range(40):
        for n in range(5):
            app.vote(made_up(user * 100 + n), f"U{user:04d}", "T1", "approve")
    # and from a workspace that may not vote at all
    for _ in range(20):
        app.vote(request.id, "U1", "T9", "approve")
    written = refused(agent)
    assert 1 <= len(written) <= 30  # 220 attempts from 41 users: at most 30 records a minute
    per_user: dict[object, int] = {}
    for record in written:
        per_user[record["by"]] = per_user.get(record["by"], 0) + 1
    assert max(per_user.values()) <= 3
    assert app.vote(request.id, "U1", "T1", "approve").accepted
    assert agent.finish()["result"] == "wire-6"
    assert len(refused(agent)) == len(written)


def test_the_limit_can_be_set_and_every_refusal_written_below_it(
    agent: Agent, slack: SlackApprovals
) -> None:
    clock = Clock()
    app = app_for(agent, slack, clock, RefusalLimit(per_user=1, total=2, window=10.0))
    agent.start(7)
    request = agent.request()
    for n in range(5):
        app.vote(made_up(n), "U2", "T1", "deny")
    assert len(refused(agent)) == 1
    app.vote(request.id, "U3", "T1", "approve")  # a stranger on a real request: refused
    app.vote(request.id, "U4", "T1", "approve")  # over the total for this window
    assert [r["by"] for r in refused(agent)] == ["slack:U2", "slack:U3"]
    clock.now += 10
    app.vote(request.id, "U4", "T1", "approve")
    assert [r["by"] for r in refused(agent)][-1] == "slack:U4"
    assert refused(agent)[-1]["unlogged"] == 1
    assert app.vote(request.id, "U1", "T1", "approve").accepted
    assert agent.finish()["result"] == "wire-7"
