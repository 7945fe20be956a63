"""What agents do in their first minutes, on Runner.run driven by agents.testing.ScriptedModel:
arguments the SDK refuses, retries, the run context, approvals before guardrails, approvals
given through the SDK that count as votes, a run that spans requests, and a run that outlives
its transaction."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_saga import (
    AgentKit,
    Approvals,
    CompensatorRegistry,
    SagaEndedError,
    SagaRolledBack,
    StepOutcome,
    build_history,
)
from agent_saga.testing import Ledger
from agent_saga_openai_agents import (
    SdkApprovals,
    approve,
    resume_run,
    run_in_saga,
    saga_run_config,
    saga_tool,
    saga_tools,
    suspend_run,
)
from agents import (
    Agent,
    RunConfig,
    RunContextWrapper,
    Runner,
    ToolExecutionConfig,
    function_tool,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel


def data(kit: AgentKit, kind: str) -> list[dict[str, Any]]:
    return [r.data for r in kit.store.records() if r.kind == kind]


def outputs(model: ScriptedModel) -> dict[str, str]:
    last = model.last_call
    assert last is not None
    items = last.input if isinstance(last.input, list) else []
    return {
        i["call_id"]: str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


@pytest.mark.parametrize(
    "mistake",
    [{"seat": "the window one"}, '{"seat": 4'],
    ids=["schema-mismatch", "invalid-json"],
)
def test_arguments_the_sdk_refuses_reach_the_model_and_the_fix_commits(
    kit: AgentKit, mistake: dict[str, Any] | str
) -> None:
    ledger = Ledger()

    @function_tool
    def book(seat: int) -> str:
        """Book a seat."""
        ledger.record(f"book {seat}")
        return "booked"

    tools = saga_tools([book], {"book": {"compensate": lambda: ledger.record("cancel")}})
    model = ScriptedModel(
        [
            [function_call("book", mistake, call_id="c1")],
            [function_call("book", {"seat": 4}, call_id="c2")],
            [assistant_message("Seat 4.")],
        ]
    )
    asyncio.run(run_in_saga(Agent(name="a", model=model, tools=[*tools]), "book", kit=kit))
    shown = outputs(model)
    assert shown["c1"].startswith("An error occurred while running the tool")  # the SDK's words
    assert shown["c2"] == "booked"
    assert ledger.actions() == ["book 4"]
    assert [(d["ordinal"], d["rule"]) for d in data(kit, "gate.refused")] == [(1, "arguments")]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_the_model_retrying_an_idempotent_tool_continues_its_step(kit: AgentKit) -> None:
    ledger = Ledger()
    calls: list[int] = []

    @function_tool
    def book(seat: int) -> str:
        """Book a seat (the airline deduplicates)."""
        calls.append(seat)
        if len(calls) == 1:
            raise ConnectionError("airline timed out")
        ledger.record(f"book {seat}")
        return "booked"

    wrapped = saga_tool(book, compensate=lambda: ledger.record("cancel"), idempotent=True)
    model = ScriptedModel(
        [
            [function_call("book", {"seat": 4}, call_id="c1")],
            [function_call("book", {"seat": 4}, call_id="c2")],
            [assistant_message("Booked.")],
        ]
    )
    asyncio.run(run_in_saga(Agent(name="a", model=model, tools=[wrapped]), "4", kit=kit))
    assert ledger.actions() == ["book 4"]
    assert len(data(kit, "step.intent")) == 1
    assert [d["ordinal"] for d in data(kit, "step.done")] == [1]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


@dataclass
class Secrets:
    api_key: str


class Card(BaseModel):
    cvv: str
    no: str


def test_the_run_context_is_not_logged_and_redacted_paths_are_masked(kit: AgentKit) -> None:
    @function_tool
    def pay(ctx: RunContextWrapper[Secrets], amount: int, card: Card) -> dict[str, Any]:
        """Pay."""
        assert ctx.context.api_key == "sk-secret"
        return {"payment": "p-1", "amount": amount}

    got: list[Any] = []
    wrapped = saga_tool(pay, compensate=lambda result: got.append(result), redact=["card.cvv"])  # noqa: PLW0108
    model = ScriptedModel(
        [
            [
                function_call(
                    "pay", {"amount": 5, "card": {"cvv": "cvv-secret-739", "no": "4"}}, call_id="p"
                )
            ],
            [assistant_message("paid")],
        ]
    )
    agent: Agent[Secrets] = Agent(name="a", model=model, tools=[wrapped])

    async def main() -> None:
        async with kit.transaction() as saga:
            await Runner.run(
                agent, "pay", context=Secrets("sk-secret"), run_config=saga_run_config(saga.id)
            )
            raise RuntimeError("the order was cancelled")

    with pytest.raises(Exception, match="cancelled"):
        asyncio.run(main())
    [intent] = data(kit, "step.intent")
    assert intent["args"] == {"amount": 5, "card": {"cvv": {"$redacted": "write"}, "no": "4"}}
    logged = "".join(str(r.data) for r in kit.store.records())
    assert "sk-secret" not in logged
    assert "cvv-secret-739" not in logged
    assert got == [{"payment": "p-1", "amount": 5}]  # the function's own value


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_guardrails_before_approval_leave_no_intent_without_outcome(
    kit: AgentKit, decision: str
) -> None:
    ledger = Ledger()

    @function_tool(needs_approval=True)
    def refund(amount: int) -> str:
        """Refund the customer."""
        ledger.record(f"refund {amount}")
        return "refunded"

    wrapped = saga_tool(refund, compensate=lambda: ledger.record("charge back"))
    model = ScriptedModel(
        [[function_call("refund", {"amount": 3}, call_id="r1")], [assistant_message("done")]]
    )
    agent = Agent(name="a", model=model, tools=[wrapped])
    execution = ToolExecutionConfig(pre_approval_tool_input_guardrails=True)

    async def main() -> None:
        async with kit.transaction() as saga:
            config = saga_run_config(saga.id, RunConfig(tool_execution=execution))
            first = await Runner.run(agent, "refund 3", run_config=config)
            state = first.to_state()
            item = first.interruptions[0]
            if decision == "approve":
                state.approve(item)
            else:
                state.reject(item)
            await Runner.run(agent, state, run_config=config)

    asyncio.run(main())
    [view] = build_history(kit.store.records()).sagas
    assert [s.outcome for s in view.steps if s.outcome is StepOutcome.UNKNOWN] == []
    expected = ["refund 3"] if decision == "approve" else []
    assert ledger.actions() == expected
    assert len(data(kit, "step.intent")) == len(expected)
    assert data(kit, "saga.end")[-1]["status"] == "committed"


@pytest.mark.usefixtures("sync_runs")
def test_an_irreversible_tool_outside_a_transaction_runs_untouched(kit: AgentKit) -> None:
    ledger = Ledger()

    @function_tool
    def wire(amount: int) -> str:
        """Wire money."""
        ledger.record(f"wire {amount}")
        return "wired"

    wrapped = saga_tool(wire, semantics="irreversible")
    model = ScriptedModel(
        [[function_call("wire", {"amount": 1}, call_id="w")], [assistant_message("ok")]]
    )
    result = Runner.run_sync(Agent(name="a", model=model, tools=[wrapped]), "wire 1")
    assert result.interruptions == []
    assert ledger.actions() == ["wire 1"]
    assert list(kit.store.records()) == []


def test_an_sdk_approval_counts_as_the_named_approvers_vote_across_requests(
    tmp_path: Path,
) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    registry.register("bank.refund", lambda result: ledger.record(f"refund {result}"))

    @function_tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        ledger.record(f"charge {amount}")
        return "ch_1"

    @function_tool
    def wire(amount: int, to: str) -> str:
        """Wire money (cannot be undone)."""
        ledger.record(f"wire {amount} to {to}")
        return "wired"

    tools = saga_tools(
        [charge, wire],
        {"charge": {"compensate": "bank.refund"}, "wire": {"semantics": "irreversible"}},
    )

    def agent(model: ScriptedModel) -> Agent[Any]:
        return Agent(name="bank", model=model, tools=[*tools])

    first_model = ScriptedModel(
        [
            [function_call("charge", {"amount": 500}, call_id="c1")],
            [function_call("wire", {"amount": 500, "to": "bob"}, call_id="w1")],
        ]
    )
    approvals = Approvals(approvers=["unix:alice"], channels=[SdkApprovals()], poll=0.01)
    home = tmp_path / "h"

    async def first_request() -> str:
        with AgentKit(home=home, registry=registry, approvals=approvals) as kit:
            async with kit.transaction("wire") as saga:
                result = await Runner.run(
                    agent(first_model), "wire 500", run_config=saga_run_config(saga.id)
                )
                assert [i.name for i in result.interruptions] == ["wire"]
                return json.dumps(suspend_run(result, saga))  # what the app persists

    saved = asyncio.run(first_request())
    assert ledger.actions() == ["charge 500"]

    second_model = ScriptedModel([[assistant_message("Wired 500 to bob.")]])

    async def second_request() -> str:
        saga_id, state = await resume_run(agent(second_model), json.loads(saved))
        approve(state, state.get_interruptions()[0], approver="unix:alice")
        with AgentKit(home=home, registry=registry, approvals=approvals) as kit:
            async with kit.transaction(resume=saga_id):
                result = await Runner.run(
                    agent(second_model), state, run_config=saga_run_config(saga_id)
                )
            votes = data(kit, "approval.vote")
            decided = data(kit, "approval.decided")
            ends = data(kit, "saga.end")
        assert [(v["by"], v["channel"]) for v in votes] == [("unix:alice", "openai-agents")]
        assert [d["decision"] for d in decided] == ["approved"]
        assert ends[-1]["status"] == "committed"
        return str(result.final_output)

    assert asyncio.run(second_request()) == "Wired 500 to bob."
    assert ledger.actions() == ["charge 500", "wire 500 to bob"]


def test_a_run_that_outlives_its_transaction_is_refused(kit: AgentKit) -> None:
    ledger = Ledger()

    @function_tool
    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    wrapped = saga_tool(charge, compensate=lambda: ledger.record("refund"))
    model = ScriptedModel(
        [[function_call("charge", {"amount": 1}, call_id="c1")], [assistant_message("ok")]]
    )
    agent = Agent(name="a", model=model, tools=[wrapped])

    async def main() -> BaseException | None:
        gate = asyncio.Event()

        async def later() -> Any:
            await gate.wait()  # the request handler has returned meanwhile
            return await Runner.run(agent, "charge 1")

        async with kit.transaction("request"):
            task = asyncio.create_task(later())
        gate.set()
        try:
            await task
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(main())
    chain = [error, getattr(error, "__cause__", None)]
    assert any(isinstance(e, SagaEndedError) for e in chain), repr(error)
    assert ledger.actions() == []
    assert [r.kind for r in kit.store.records()] == ["saga.begin", "saga.end"]


def test_a_failure_after_resume_compensates_both_requests_newest_first(tmp_path: Path) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    registry.register("trip.refund", lambda result: ledger.record(f"refund {result}"))
    registry.register("trip.cancel", lambda result: ledger.record(f"cancel {result}"))

    @function_tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        ledger.record(f"charge {amount}")
        return "ch_1"

    @function_tool(needs_approval=True)
    def book(hotel: str) -> str:
        """Book a room once the customer confirms."""
        ledger.record(f"book {hotel}")
        return "bk_1"

    @function_tool
    def notify(to: str) -> str:
        """Send the confirmation."""
        raise ConnectionError("mail server down")

    tools = saga_tools(
        [charge, book, notify],
        {
            "charge": {"compensate": "trip.refund"},
            "book": {"compensate": "trip.cancel"},
            "notify": {"semantics": "reversible"},
        },
    )
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 9}, call_id="c1")],
            [function_call("book", {"hotel": "Ritz"}, call_id="b1")],
            [function_call("notify", {"to": "ann"}, call_id="n1")],
            [assistant_message("Booked, but nobody was told.")],
        ]
    )
    agent = Agent(name="trip", model=model, tools=[*tools])
    home = tmp_path / "h"

    async def first_request() -> str:
        with AgentKit(home=home, registry=registry) as kit:
            async with kit.transaction("trip") as saga:
                result = await Runner.run(agent, "book", run_config=saga_run_config(saga.id))
                assert [i.name for i in result.interruptions] == ["book"]
                return json.dumps(suspend_run(result, saga))

    saved = asyncio.run(first_request())
    assert ledger.actions() == ["charge 9"]

    async def second_request() -> None:
        saga_id, state = await resume_run(agent, json.loads(saved))
        state.approve(state.get_interruptions()[0])
        with AgentKit(home=home, registry=registry) as kit:
            async with kit.transaction(resume=saga_id):
                await Runner.run(agent, state, run_config=saga_run_config(saga_id))

    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(second_request())
    assert isinstance(raised.value.cause, ConnectionError)
    assert [r.ordinal for r in raised.value.report.compensated] == [2, 1]
    assert ledger.actions() == ["charge 9", "book Ritz", "cancel bk_1", "refund ch_1"]


def test_a_streamed_run_the_consumer_left_is_refused_at_its_next_call(kit: AgentKit) -> None:
    ledger = Ledger()

    @function_tool
    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    wrapped = saga_tool(charge, compensate=lambda: ledger.record("refund"))
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 1}, call_id="c1")],
            [function_call("charge", {"amount": 2}, call_id="c2")],
            [assistant_message("ok")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[wrapped])

    async def main() -> BaseException | None:
        async with kit.transaction("request") as saga:
            result = Runner.run_streamed(agent, "charge twice", run_config=saga_run_config(saga.id))
            async for event in result.stream_events():
                if event.type == "run_item_stream_event" and event.name == "tool_output":
                    break  # the consumer stops streaming and leaves the transaction
        try:
            async for _ in result.stream_events():  # the run goes on without it
                pass
        except Exception as exc:
            return exc
        return None

    error = asyncio.run(main())
    assert isinstance(getattr(error, "__cause__", None), SagaEndedError), repr(error)
    assert ledger.actions() == ["charge 1"]
    kinds = [r.kind for r in kit.store.records()]
    assert kinds[-1] == "saga.end"
    assert kinds.count("step.intent") == 1
