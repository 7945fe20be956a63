"""What agents do in their first minutes, on a FunctionAgent driven by a scripted LLM: wrong
arguments, retries, injected values, the tool's own result, and a run that outlives its
transaction.

No ``from __future__ import annotations`` here: LlamaIndex finds a tool's ``ctx: Context``
parameter by its evaluated annotation.
"""

import asyncio
from typing import Any

import pytest
from agent_saga import AgentKit, CompensatorRegistry, SagaRolledBack
from agent_saga.testing import Ledger
from agent_saga_llamaindex import run_agent, saga_tool, saga_tools
from agent_saga_llamaindex.testing import Script, answer, tool_call
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, HumanResponseEvent, InputRequiredEvent
from workflows.context.serializers import JsonPickleSerializer

pytestmark = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"),
    pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning"),
]


def data(kit: AgentKit, kind: str) -> list[dict[str, Any]]:
    return [r.data for r in kit.store.records() if r.kind == kind]


def tool_outputs(script: Script) -> list[str]:
    return [str(m.content) for m in script.seen[-1] if m.role == "tool"]


def test_arguments_that_do_not_bind_reach_the_model_and_the_fix_commits(kit: AgentKit) -> None:
    ledger = Ledger()

    def book(seat: int) -> str:
        """Book a seat."""
        ledger.record(f"book {seat}")
        return "booked"

    tools = saga_tools(
        [FunctionTool.from_defaults(book)], {"book": {"compensate": lambda: ledger.record("x")}}
    )
    script = Script(
        [tool_call("book", "c1", seat_no=4), tool_call("book", "c2", seat=4), answer("done")]
    )
    asyncio.run(run_agent(FunctionAgent(tools=[*tools], llm=script.llm()), user_msg="4", kit=kit))
    outputs = tool_outputs(script)
    assert "seat_no" in outputs[0] or "seat" in outputs[0]
    assert outputs[1] == "booked"
    assert ledger.actions() == ["book 4"]
    assert [d["args"] for d in data(kit, "step.intent")] == [{"seat": 4}]
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_the_model_retrying_an_idempotent_tool_continues_its_step(kit: AgentKit) -> None:
    ledger = Ledger()
    keys: list[str] = []

    async def book(seat: int, idempotency_key: str = "") -> str:
        """Book a seat (deduplicated by key)."""
        keys.append(idempotency_key)
        if len(keys) == 1:
            raise ConnectionError("airline timed out")
        ledger.record(f"book {seat}")
        return "booked"

    wrapped = saga_tool(
        FunctionTool.from_defaults(async_fn=book), compensate=lambda: ledger.record("cancel")
    )
    script = Script(
        [tool_call("book", "c1", seat=4), tool_call("book", "c2", seat=4), answer("done")]
    )
    asyncio.run(run_agent(FunctionAgent(tools=[wrapped], llm=script.llm()), user_msg="4", kit=kit))
    assert keys[0] == keys[1] != ""
    assert ledger.actions() == ["book 4"]
    assert len(data(kit, "step.intent")) == 1
    assert data(kit, "saga.end")[-1]["status"] == "committed"


def test_context_and_bound_parameters_are_never_logged(kit: AgentKit) -> None:
    got: list[Any] = []

    async def order(ctx: Context, item: str, card: dict[str, str], api_key: str) -> dict[str, Any]:
        """Order an item."""
        await ctx.store.set("ordered", item)
        assert api_key == "sk-secret"
        return {"order": "o-1", "item": item}

    tool = FunctionTool.from_defaults(async_fn=order, partial_params={"api_key": "sk-secret"})
    wrapped = saga_tool(
        tool,
        compensate=lambda result: got.append(result),  # noqa: PLW0108
        redact=["card.cvv"],
    )

    def fail() -> str:
        """Fails."""
        raise RuntimeError("no")

    failing = saga_tool(FunctionTool.from_defaults(fail), semantics="reversible")
    script = Script(
        [
            tool_call("order", "c1", item="lamp", card={"cvv": "cvv-secret-739", "no": "4"}),
            tool_call("fail", "c2"),
            answer("?"),
        ]
    )
    agent = FunctionAgent(tools=[wrapped, failing], llm=script.llm())
    with pytest.raises(SagaRolledBack):
        asyncio.run(run_agent(agent, user_msg="lamp", kit=kit))
    [intent, _] = data(kit, "step.intent")
    assert intent["args"] == {"item": "lamp", "card": {"cvv": {"$redacted": "write"}, "no": "4"}}
    logged = "".join(str(r.data) for r in kit.store.records())
    assert "sk-secret" not in logged
    assert "cvv-secret-739" not in logged
    assert got == [{"order": "o-1", "item": "lamp"}]  # the function's own value


def test_a_run_that_outlives_its_transaction_adds_no_step(kit: AgentKit) -> None:
    ledger = Ledger()

    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    tools = saga_tools(
        [FunctionTool.from_defaults(charge)], {"charge": {"compensate": lambda: None}}
    )
    script = Script(
        [tool_call("charge", "c1", amount=1), tool_call("charge", "c2", amount=2), answer("ok")]
    )
    agent = FunctionAgent(tools=[*tools], llm=script.llm())

    async def main() -> str:
        async with kit.transaction("request"):
            handler = agent.run(user_msg="charge twice")
            async for event in handler.stream_events():
                if isinstance(event, ToolCallResult):
                    break  # the consumer stops streaming and leaves the transaction
        return str(await handler)  # the run goes on without its transaction

    assert asyncio.run(main()) == "ok"
    assert ledger.actions() == ["charge 1"]
    assert "has ended" in tool_outputs(script)[-1]
    kinds = [r.kind for r in kit.store.records()]
    assert kinds[-1] == "saga.end"
    assert kinds.count("step.intent") == 1


def test_a_handler_created_before_the_transaction_runs_untouched(kit: AgentKit) -> None:
    ledger = Ledger()

    def charge(amount: int) -> str:
        """Charge."""
        ledger.record(f"charge {amount}")
        return "ch"

    tools = saga_tools(
        [FunctionTool.from_defaults(charge)], {"charge": {"compensate": lambda: None}}
    )
    script = Script([tool_call("charge", "c1", amount=1), answer("ok")])
    agent = FunctionAgent(tools=[*tools], llm=script.llm())

    async def main() -> str:
        handler = agent.run(user_msg="charge")  # started here, outside any transaction
        async with kit.transaction("request"):
            return str(await handler)  # awaited inside: its tools still ran outside

    assert asyncio.run(main()) == "ok"
    assert ledger.actions() == ["charge 1"]
    assert [r.kind for r in kit.store.records()] == ["saga.begin", "saga.end"]


def test_a_wait_for_a_human_spans_requests_as_one_step(tmp_path: Any) -> None:
    ledger = Ledger()
    registry = CompensatorRegistry()
    registry.register("li.refund", lambda result: ledger.record(f"refund {result}"))
    registry.register("li.recall", lambda result: ledger.record(f"recall {result}"))

    def charge(amount: int) -> str:
        """Charge the card."""
        ledger.record(f"charge {amount}")
        return "ch_1"

    async def wire(ctx: Context, amount: int) -> str:
        """Wire money once a human agrees."""
        reply = await ctx.wait_for_event(
            HumanResponseEvent,
            waiter_event=InputRequiredEvent(prefix=f"wire {amount}?"),  # type: ignore[call-arg]
        )
        if reply.response != "yes":
            return "not approved"
        ledger.record(f"wire {amount}")
        return "wired"

    tools = saga_tools(
        [FunctionTool.from_defaults(charge), FunctionTool.from_defaults(async_fn=wire)],
        {"charge": {"compensate": "li.refund"}, "wire": {"compensate": "li.recall"}},
    )
    script = Script(
        [tool_call("charge", "c1", amount=9), tool_call("wire", "w1", amount=9), answer("done")]
    )
    agent = FunctionAgent(tools=[*tools], llm=script.llm())
    home = tmp_path / "h"

    async def first_request() -> tuple[str, dict[str, Any]]:
        with AgentKit(home=home, registry=registry) as kit:
            async with kit.transaction("order") as saga:
                handler = agent.run(user_msg="wire 9")
                async for event in handler.stream_events():
                    if isinstance(event, InputRequiredEvent):
                        break
                assert handler.ctx is not None
                saved = handler.ctx.to_dict(serializer=JsonPickleSerializer())
                await handler.cancel_run()
                saga.suspend()
        return saga.id, saved

    async def second_request(saga_id: str, saved: dict[str, Any]) -> str:
        with AgentKit(home=home, registry=registry) as kit:
            async with kit.transaction(resume=saga_id):
                ctx = Context.from_dict(agent, saved, serializer=JsonPickleSerializer())
                handler = agent.run(ctx=ctx)
                handler.ctx.send_event(HumanResponseEvent(response="yes"))  # type: ignore[call-arg]
                result = str(await handler)
            kinds = [(r.kind, r.data.get("ordinal")) for r in kit.store.records()]
        assert kinds.count(("step.intent", 2)) == 1  # the re-run continued the paused step
        assert kinds.count(("step.done", 2)) == 1
        assert ("saga.resumed", None) in kinds
        return result

    saga_id, saved = asyncio.run(first_request())
    assert ledger.actions() == ["charge 9"]
    assert asyncio.run(second_request(saga_id, saved)) == "done"
    assert ledger.actions() == ["charge 9", "wire 9"]
