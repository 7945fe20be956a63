"""An Agent with Runner.run / run_sync, driven by agents.testing.ScriptedModel, in a transaction."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from agent_saga import AgentKit, DenyTools, MemoryKillSwitch, SagaRolledBack, SequentialIds
from agent_saga.testing import Ledger
from agent_saga_openai_agents import (
    GUARDRAIL_NAME,
    SAGA_ID_KEY,
    run_in_saga,
    saga_run_config,
    saga_tool,
    saga_tools,
)
from agents import (
    Agent,
    FunctionTool,
    Runner,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
    tool_input_guardrail,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext


class Travel:
    """charge (async) and book can be undone; notify fails."""

    def __init__(self) -> None:
        self.ledger = ledger = Ledger()

        @function_tool
        async def charge(amount: int, card: str) -> str:
            """Charge the card."""
            ledger.record("charge")
            return "ch_1"

        @function_tool
        def book(hotel: str) -> str:
            """Book a room."""
            ledger.record("book")
            return "bk_1"

        @function_tool
        def notify(to: str) -> str:
            """Send the confirmation."""
            ledger.record("notify")
            raise ConnectionError("mail server down")

        def refund(result: str, amount: int) -> None:
            assert result == "ch_1"
            ledger.record("refund")

        def cancel(result: str) -> None:
            ledger.record("cancel")

        self.raw = [charge, book, notify]
        self.tools = saga_tools(
            self.raw,
            {
                "charge": {"compensate": refund},
                "book": {"compensate": cancel},
                "notify": {"semantics": "reversible"},
            },
        )


def travel_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("charge", {"amount": 120, "card": "visa"}, call_id="c1")],
            [function_call("book", {"hotel": "Ritz"}, call_id="c2")],
            [function_call("notify", {"to": "ann"}, call_id="c3")],
            [assistant_message("Booked, but the confirmation could not be sent.")],
        ]
    )


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """The tool results the model was shown in its last call, by call id."""
    last = model.last_call
    assert last is not None
    items = last.input if isinstance(last.input, list) else []
    return {
        item["call_id"]: str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def test_failure_rolls_back_in_reverse_and_the_model_saw_the_error(kit: AgentKit) -> None:
    travel = Travel()
    model = travel_model()
    agent = Agent(name="travel", model=model, tools=list(travel.tools))
    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(run_in_saga(agent, "book the Ritz", kit=kit, name="trip"))
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]
    assert isinstance(raised.value.cause, ConnectionError)
    # The SDK's own failure text, as the unwrapped tool would have answered.
    assert tool_outputs(model)["c3"].startswith("An error occurred while running the tool")
    assert tool_outputs(model)["c1"] == "ch_1"
    assert kit.verify().ok
    kinds = [r.kind for r in kit.store.records()]
    assert kinds.count("step.done") == 2
    assert kinds.count("step.failed") == 1
    assert kinds.count("compensation.done") == 2


@pytest.mark.usefixtures("sync_runs")
def test_run_sync_inside_a_sync_transaction(kit: AgentKit) -> None:
    travel = Travel()
    agent = Agent(name="travel", model=travel_model(), tools=list(travel.tools))
    with pytest.raises(SagaRolledBack), kit.transaction("trip") as saga:
        result = Runner.run_sync(agent, "book", run_config=saga_run_config(saga.id))
        assert "could not be sent" in str(result.final_output)
    assert travel.ledger.actions() == ["charge", "book", "notify", "cancel", "refund"]


def test_a_hand_built_function_tool_that_raises_fails_the_run_and_rolls_back(
    kit: AgentKit,
) -> None:
    ledger = Ledger()

    async def on_invoke(ctx: ToolContext[Any], arguments: str) -> str:
        ledger.record("ship")
        raise RuntimeError("warehouse offline")

    ship = FunctionTool(
        name="ship",
        description="Ship.",
        params_json_schema={
            "type": "object",
            "properties": {"item": {"type": "string"}},
            "required": ["item"],
            "additionalProperties": False,
        },
        on_invoke_tool=on_invoke,
    )
    wrapped = saga_tool(ship, semantics="reversible")
    model = ScriptedModel(
        [[function_call("ship", {"item": "lamp"}, call_id="s1")], [assistant_message("?")]]
    )
    agent = Agent(name="shop", model=model, tools=[wrapped])
    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(run_in_saga(agent, "ship", kit=kit))
    assert "warehouse offline" in str(raised.value.cause)
    assert ledger.actions() == ["ship"]


def test_a_refusal_is_a_guardrail_rejection_and_the_body_never_runs(tmp_path: Any) -> None:
    travel = Travel()
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 5, "card": "v"}, call_id="c1")],
            [function_call("book", {"hotel": "Ritz"}, call_id="c2")],
            [assistant_message("I could not book.")],
        ]
    )
    agent = Agent(name="travel", model=model, tools=list(travel.tools))
    rules = [DenyTools(frozenset({"book"}))]
    with AgentKit(home=tmp_path / "h", rules=rules, ids=SequentialIds()) as kit:
        result = asyncio.run(run_in_saga(agent, "go", kit=kit))
        assert result.final_output == "I could not book."
        assert "deny list" in tool_outputs(model)["c2"]
        assert travel.ledger.actions() == ["charge"]
        outcomes = [
            (r.guardrail.get_name(), r.output.behavior["type"])
            for r in result.tool_input_guardrail_results
        ]
        assert outcomes == [(GUARDRAIL_NAME, "allow"), (GUARDRAIL_NAME, "reject_content")]
        records = list(kit.store.records())
        assert [r.data["rule"] for r in records if r.kind == "gate.refused"] == ["deny_tools"]
        assert records[-1].data["status"] == "committed"


def test_a_halt_trips_the_guardrail_and_rolls_back(tmp_path: Any) -> None:
    switch = MemoryKillSwitch()
    travel = Travel()

    @function_tool
    def halt_now() -> str:
        """Engage the kill switch (stands for an operator elsewhere)."""
        switch.halt("incident", at=0.0)
        return "halted"

    tools = [*travel.tools, saga_tool(halt_now, semantics="reversible")]
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 5, "card": "v"}, call_id="c1")],
            [function_call("halt_now", {}, call_id="h")],
            [function_call("book", {"hotel": "Ritz"}, call_id="c2")],
            [assistant_message("?")],
        ]
    )
    agent = Agent(name="travel", model=model, tools=[*tools])
    with AgentKit(home=tmp_path / "h", kill_switch=switch) as kit:
        with pytest.raises(SagaRolledBack) as raised:
            asyncio.run(run_in_saga(agent, "go", kit=kit))
        assert isinstance(raised.value.cause, ToolInputGuardrailTripwireTriggered)
    assert travel.ledger.actions() == ["charge", "refund"]


def test_users_guardrails_run_first_and_a_rejection_logs_nothing(kit: AgentKit) -> None:
    travel = Travel()

    @tool_input_guardrail
    def no_visa(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        if "visa" in data.context.tool_arguments:
            return ToolGuardrailFunctionOutput.reject_content("no visa cards")
        return ToolGuardrailFunctionOutput.allow()

    charge = dataclasses.replace(travel.raw[0], tool_input_guardrails=[no_visa])
    wrapped = saga_tool(charge, compensate=lambda: None)
    assert wrapped.tool_input_guardrails is not None
    assert [g.get_name() for g in wrapped.tool_input_guardrails] == ["no_visa", GUARDRAIL_NAME]
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 5, "card": "visa"}, call_id="c1")],
            [assistant_message("no")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[wrapped])
    asyncio.run(run_in_saga(agent, "go", kit=kit))
    assert tool_outputs(model)["c1"] == "no visa cards"
    assert "step.intent" not in [r.kind for r in kit.store.records()]


@pytest.mark.usefixtures("sync_runs")
def test_outside_a_transaction_tools_run_untouched(kit: AgentKit) -> None:
    travel = Travel()
    model = ScriptedModel(
        [[function_call("book", {"hotel": "x"}, call_id="b")], [assistant_message("ok")]]
    )
    result = Runner.run_sync(Agent(name="a", model=model, tools=list(travel.tools)), "go")
    assert result.final_output == "ok"
    assert travel.ledger.actions() == ["book"]
    assert list(kit.store.records()) == []


def test_name_description_and_schema_are_unchanged() -> None:
    travel = Travel()
    for raw, wrapped in zip(travel.raw, travel.tools, strict=True):
        assert wrapped.name == raw.name
        assert wrapped.description == raw.description
        assert wrapped.params_json_schema == raw.params_json_schema
        assert wrapped.strict_json_schema == raw.strict_json_schema


def test_the_saga_id_is_on_the_run_config() -> None:
    config = saga_run_config("saga-9")
    assert config.group_id == "saga-9"
    assert config.trace_metadata == {SAGA_ID_KEY: "saga-9"}
    assert json.dumps(config.trace_metadata)


def test_on_refusal_rollback_aborts_the_transaction() -> None:
    travel = Travel()
    tools = saga_tools(
        travel.raw[:2],
        {
            "charge": {"compensate": lambda: travel.ledger.record("refund")},
            "book": {"semantics": "reversible"},
        },
        on_refusal="rollback",
    )
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 5, "card": "v"}, call_id="c1")],
            [function_call("book", {"hotel": "Ritz"}, call_id="c2")],
            [assistant_message("x")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[*tools])
    rules = [DenyTools(frozenset({"book"}))]
    with AgentKit(store="memory", rules=rules) as kit, pytest.raises(SagaRolledBack):
        asyncio.run(run_in_saga(agent, "go", kit=kit))
    assert travel.ledger.actions() == ["charge", "refund"]
    assert "deny list" in tool_outputs(model)["c2"]


def test_a_tool_without_failure_text_still_fails_the_run(kit: AgentKit) -> None:
    ledger = Ledger()

    @function_tool(failure_error_function=None)
    def ship(item: str) -> str:
        """Ship the order."""
        raise RuntimeError("warehouse offline")

    charge = Travel().raw[0]
    tools = saga_tools(
        [charge, ship],
        {
            "charge": {"compensate": lambda: ledger.record("refund")},
            "ship": {"semantics": "reversible"},
        },
    )
    model = ScriptedModel(
        [
            [function_call("charge", {"amount": 5, "card": "v"}, call_id="c1")],
            [function_call("ship", {"item": "lamp"}, call_id="s1")],
            [assistant_message("?")],
        ]
    )
    with pytest.raises(SagaRolledBack) as raised:
        asyncio.run(run_in_saga(Agent(name="a", model=model, tools=[*tools]), "go", kit=kit))
    assert "warehouse offline" in str(raised.value.cause)
    assert ledger.actions() == ["refund"]
    assert len(model.calls) == 2  # the run stopped at the failing tool, as it would unwrapped
