"""Shared fixtures: an isolated home, no network beyond 127.0.0.1, a mock Slack Web API, the
real slack-bolt app, and an agent thread that blocks on an IRREVERSIBLE step."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from agent_saga import (
    AgentKit,
    ApprovalRequest,
    Approvals,
    CompensatorRegistry,
    SequentialIds,
    submit_vote,
)
from agent_saga._approvals.request import ApprovalBook
from agent_saga.testing import loopback_only
from agent_saga_slack import SlackApprovalChannel, SlackApprovals
from agent_saga_slack.testing import MockSlackAPI, signed_headers
from pytest_agent_saga import clean_environment
from slack_bolt import BoltRequest, BoltResponse
from slack_sdk import WebClient

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documented example signing secret
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No shell setting for agent-saga, the terminal or Slack, and no proxy (slack-sdk reads
    ``HTTPS_PROXY``); an own agent-saga home; any non-loopback connection fails the test."""
    clean_environment(monkeypatch, prefixes=["SLACK_"], names=PROXIES)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture
def secret() -> str:
    return SECRET


@pytest.fixture
def mock() -> Iterator[MockSlackAPI]:
    with MockSlackAPI() as api:
        yield api


@pytest.fixture
def channel(mock: MockSlackAPI) -> Iterator[SlackApprovalChannel]:
    with SlackApprovalChannel(
        "C1", client=WebClient(token="xoxb-agent", base_url=mock.api_url)
    ) as posting:
        yield posting


@dataclass
class Bank:
    """The agent's world: counters that witness what ran."""

    held: list[int] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    wired: list[int] = field(default_factory=list)


@dataclass
class Agent:
    """One transaction (hold, then an IRREVERSIBLE wire) running in a thread."""

    kit: AgentKit
    bank: Bank
    run: Callable[[int], str]
    outcome: dict[str, Any] = field(default_factory=dict)
    thread: threading.Thread | None = None

    def start(self, usd: int = 900) -> Agent:
        def target() -> None:
            try:
                self.outcome["result"] = self.run(usd)
            except BaseException as exc:  # the test inspects it
                self.outcome["error"] = exc

        self.thread = threading.Thread(target=target)
        self.thread.start()
        return self

    def request(self, timeout: float = 10.0) -> ApprovalRequest:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = list(ApprovalBook().take_all(self.kit.store.records()).requests.values())
            if found:
                return found[-1]
            time.sleep(0.01)
        raise AssertionError("no approval request was logged")

    def finish(self) -> dict[str, Any]:
        assert self.thread is not None
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        return self.outcome

    @property
    def waiting(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def make_agent(kit: AgentKit) -> Agent:
    bank = Bank()

    def release(result: str) -> None:
        bank.released.append(result)

    kit.compensator("bank.release", release)

    @kit.tool(name="bank.hold", compensate="bank.release")
    def hold(usd: int) -> str:
        bank.held.append(usd)
        return f"hold-{usd}"

    @kit.tool(name="bank.wire", semantics="irreversible", redact=["to.pin"])
    def wire(usd: int, to: dict[str, str]) -> str:
        bank.wired.append(usd)
        return f"wire-{usd}"

    def run(usd: int) -> str:
        with kit.transaction("pay"):
            hold(usd)
            return wire(usd, {"iban": "DE00", "pin": "1234"})

    return Agent(kit, bank, run)


@pytest.fixture
def approvals(channel: SlackApprovalChannel) -> Approvals:
    return Approvals(approvers=["slack:U1"], channels=[channel], poll=0.01)


@pytest.fixture
def kit(tmp_path: Path, approvals: Approvals) -> Iterator[AgentKit]:
    with AgentKit(
        home=tmp_path / "home",
        ids=SequentialIds(),
        approvals=approvals,
        registry=CompensatorRegistry(),
        checkpoints=False,
    ) as k:
        yield k


@pytest.fixture
def agent(kit: AgentKit) -> Iterator[Agent]:
    """An agent on ``kit`` (not started)."""
    running = make_agent(kit)
    yield running
    if running.waiting:  # a test that left it waiting: deny, so the thread ends
        submit_vote(kit.store, running.request().id, "slack:U1", "deny", channel="teardown")
    if running.thread is not None:
        running.thread.join(timeout=30)


@pytest.fixture
def agent_on() -> Iterator[Callable[[AgentKit], Agent]]:
    """Agents on kits a test builds itself; their threads are ended at teardown."""
    made: list[Agent] = []

    def make(kit: AgentKit) -> Agent:
        made.append(make_agent(kit))
        return made[-1]

    yield make
    for running in made:
        if running.thread is not None:
            running.thread.join(timeout=30)


@pytest.fixture
def slack(kit: AgentKit, mock: MockSlackAPI) -> SlackApprovals:
    return SlackApprovals(
        store=kit.store,
        signing_secret=SECRET,
        client=WebClient(token="xoxb-app", base_url=mock.api_url),
        process_before_response=True,
    )


class Sender(Protocol):
    def __call__(self, body: str, headers: dict[str, str] | None = None) -> BoltResponse: ...


@pytest.fixture
def send(slack: SlackApprovals) -> Sender:
    """Dispatch one request to the real slack-bolt app, signed like Slack's unless told."""

    def dispatch(body: str, headers: dict[str, str] | None = None) -> BoltResponse:
        signed: dict[str, str | Sequence[str]] = dict(
            headers if headers is not None else signed_headers(SECRET, body)
        )
        return slack.app.dispatch(BoltRequest(body=body, headers=dict(signed)))

    return dispatch
