"""IRREVERSIBLE tools interrupt the run for approval; resuming consults the gate; tracing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, Approvals, submit_vote
from agent_saga.testing import Ledger
from agent_saga_openai_agents import SAGA_ID_KEY, run_in_saga, saga_run_config, saga_tool
from agents import (
    Agent,
    Runner,
    RunState,
    TracingProcessor,
    function_tool,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import Span, Trace


def wire_agent(ledger: Ledger) -> tuple[Agent[Any], ScriptedModel]:
    @function_tool
    def wire(amount: int, to: str) -> str:
        """Wire money (cannot be undone)."""
        ledger.record("wire")
        return "wired"

    model = ScriptedModel(
        [
            [function_call("wire", {"amount": 500, "to": "bob"}, call_id="w1")],
            [assistant_message("done")],
        ]
    )
    tool = saga_tool(wire, semantics="irreversible")
    assert callable(tool.needs_approval)  # inside a transaction only
    return Agent(name="bank", model=model, tools=[tool]), model


def last_output(model: ScriptedModel) -> str:
    last = model.last_call
    assert last is not None
    items = last.input if isinstance(last.input, list) else []
    outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
    return str(outputs[-1]["output"])


def run_with_approval(kit: AgentKit, approve: bool) -> tuple[Ledger, ScriptedModel, list[str]]:
    ledger = Ledger()
    agent, model = wire_agent(ledger)

    async def main() -> list[str]:
        async with kit.transaction("wire") as saga:
            config = saga_run_config(saga.id)
            first = await Runner.run(agent, "wire 500 to bob", run_config=config)
            assert [item.name for item in first.interruptions] == ["wire"]
            assert ledger.actions() == []
            saved = first.to_state().to_string()  # what an app persists while a human decides
            state = await RunState.from_string(agent, saved)
            item = state.get_interruptions()[0]
            if approve:
                state.approve(item)
            else:
                state.reject(item)
            second = await Runner.run(agent, state, run_config=config)
            return [str(second.final_output)]

    return ledger, model, asyncio.run(main())


def test_rejected_approval_never_runs_the_tool(kit: AgentKit) -> None:
    ledger, model, final = run_with_approval(kit, approve=False)
    assert final == ["done"]
    assert ledger.actions() == []
    assert "not approved" in last_output(model)
    kinds = [r.kind for r in kit.store.records()]
    assert "step.intent" not in kinds
    assert list(kit.store.records())[-1].data["status"] == "committed"


def test_an_sdk_approval_does_not_open_the_gate_without_an_approval_channel(
    kit: AgentKit,
) -> None:
    # The core has no approval channel yet: an approval given through the SDK is not one, so
    # the gate still refuses the IRREVERSIBLE call, logs it, and the body never runs.
    ledger, model, final = run_with_approval(kit, approve=True)
    assert final == ["done"]
    assert ledger.actions() == []
    assert "no approval channel is configured" in last_output(model)
    refused = [r for r in kit.store.records() if r.kind == "gate.refused"]
    assert [(r.data["tool"], r.data["rule"]) for r in refused] == [("wire", "irreversible")]


class VoteWhenPosted:
    """An agent-saga approval channel whose approver answers shortly after each request."""

    def __init__(self, decision: str) -> None:
        self.decision = decision
        self.kit: AgentKit | None = None
        self.requests: list[str] = []

    def request_posted(self, request: Any) -> None:
        kit = self.kit
        assert kit is not None
        self.requests.append(request.tool)

        def vote() -> None:
            submit_vote(kit.store, request.id, "alice", self.decision, channel="test")

        threading.Timer(0.05, vote).start()

    def request_decided(self, request: Any, decision: str) -> None:
        pass


@pytest.mark.parametrize("vote", ["approve", "deny"])
def test_after_the_sdk_approval_the_agent_saga_approval_decides(tmp_path: Path, vote: str) -> None:
    # With an approval set-up, resuming an approved interruption asks agent-saga's approvers
    # (the SDK's approval is not a vote): the call runs only if they approve.
    channel = VoteWhenPosted(vote)
    approvals = Approvals(approvers=["alice"], channels=[channel], poll=0.01)
    with AgentKit(home=tmp_path / "h", approvals=approvals) as kit:
        channel.kit = kit
        ledger, model, final = run_with_approval(kit, approve=True)
        decided = [r.data["decision"] for r in kit.store.records() if r.kind == "approval.decided"]
    assert final == ["done"]
    assert channel.requests == ["wire"]
    if vote == "approve":
        assert ledger.actions() == ["wire"]
        assert last_output(model) == "wired"
        assert decided == ["approved"]
    else:
        assert ledger.actions() == []
        assert "denied" in last_output(model)
        assert decided == ["denied"]


class Collector(TracingProcessor):
    def __init__(self) -> None:
        self.traces: list[Trace] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


def test_the_saga_id_reaches_the_trace(kit: AgentKit) -> None:
    collector = Collector()
    set_trace_processors([collector])  # replaces the exporter: nothing leaves the process
    set_tracing_disabled(False)
    try:
        model = ScriptedModel([[assistant_message("hi")]])
        result = asyncio.run(run_in_saga(Agent(name="a", model=model), "hello", kit=kit))
    finally:
        set_tracing_disabled(True)
    assert result.final_output == "hi"
    saga_id = next(r.saga for r in kit.store.records() if r.kind == "saga.begin")
    exported = [t.export() or {} for t in collector.traces]
    assert [(t.get("group_id"), (t.get("metadata") or {}).get(SAGA_ID_KEY)) for t in exported] == [
        (saga_id, saga_id)
    ]
