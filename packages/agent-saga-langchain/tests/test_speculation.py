"""A LangChain agent's confirmed tool call takes the result its lookup got ahead of the model.

The agent code predicts the model's next lookup and runs it ahead (``kit.speculate`` on the
wrapped LangChain tool, what an agent does while the model thinks); the scripted model then
confirms calls through LangChain's own tool invocation, which reaches the core through the
adapter's seam. A call with the same arguments gets the result run ahead, once; a call with
other arguments runs normally, and the prediction is undone when the transaction ends.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import pytest
from agent_saga import AgentKit, Kind, SpeculationError
from agent_saga_langchain import saga_tool
from agent_saga_langchain.testing import ScriptedChat, agent_loop, call
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolArg, tool


class Catalog:
    """A slow price lookup (counted) whose cached quotes a compensation forgets."""

    def __init__(self) -> None:
        self.lookups: list[str] = []
        self.forgotten: list[str] = []
        lookups, forgotten = self.lookups, self.forgotten

        @tool
        def price(sku: str) -> str:
            """Look up a product's price."""
            lookups.append(sku)
            return f"{sku}: 12.99 EUR"

        def forget(sku: str, result: str) -> None:
            forgotten.append(result)

        self.tool = saga_tool(price, semantics="reversible", compensate=forget)


def _script(*skus: str) -> list[AIMessage]:
    calls = [
        AIMessage("", tool_calls=[call("price", {"sku": sku}, f"c{i}")])
        for i, sku in enumerate(skus)
    ]
    return [*calls, AIMessage("Quoted.")]


def _tool_messages(messages: list[object]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


def test_the_confirmed_call_through_langchain_takes_the_result_run_ahead(kit: AgentKit) -> None:
    catalog = Catalog()
    model = ScriptedChat(script=_script("A-7", "B-2"))
    with kit.transaction("quote") as saga:
        hit = kit.speculate(catalog.tool, sku="A-7")  # the model will confirm this one
        miss = kit.speculate(catalog.tool, sku="Z-9")  # a wrong guess
        assert catalog.lookups == ["A-7", "Z-9"]
        messages = agent_loop(model, [catalog.tool]).invoke([HumanMessage("price A-7, B-2")])
    answers = _tool_messages(messages)
    assert [m.content for m in answers] == ["A-7: 12.99 EUR", "B-2: 12.99 EUR"]
    assert [m.status for m in answers] == ["success", "success"]
    assert catalog.lookups == ["A-7", "Z-9", "B-2"]  # A-7 was not looked up again
    assert catalog.forgotten == ["Z-9: 12.99 EUR"]  # the wrong guess was undone at the end
    records = [r for r in kit.store.records() if r.saga == saga.id]
    redeemed = [r.data for r in records if r.kind == Kind.SPECULATION_REDEEMED]
    assert [(d["ordinal"], d["tool"], d["lease"]) for d in redeemed] == [
        (hit.ordinal, "price", hit.nonce)
    ]
    discarded = [r.data for r in records if r.kind == Kind.SPECULATION_DISCARDED]
    assert [(d["lease"], d["undo"]) for d in discarded] == [(miss.nonce, "undone now")]
    assert [r.kind for r in records].count(Kind.STEP_DONE) == 3  # two run ahead, one called
    assert kit.verify().ok


def test_a_lease_counts_once_through_langchain(kit: AgentKit) -> None:
    catalog = Catalog()
    model = ScriptedChat(script=_script("A-7", "A-7"))
    with kit.transaction("quote"):
        kit.speculate(catalog.tool, sku="A-7")
        messages = agent_loop(model, [catalog.tool]).invoke([HumanMessage("price A-7 twice")])
    assert [m.content for m in _tool_messages(messages)] == ["A-7: 12.99 EUR"] * 2
    assert catalog.lookups == ["A-7", "A-7"]  # run ahead once, then the second call ran
    assert catalog.forgotten == []


def test_an_async_agent_overlaps_the_lookup_with_the_model(kit: AgentKit) -> None:
    catalog = Catalog()
    model = ScriptedChat(script=_script("A-7"))

    async def main() -> list[object]:
        async with kit.transaction("quote"):
            await kit.aspeculate(catalog.tool, sku="A-7")
            out: list[object] = await agent_loop(model, [catalog.tool]).ainvoke(
                [HumanMessage("price A-7")]
            )
            return out

    messages = asyncio.run(main())
    assert [m.content for m in _tool_messages(messages)] == ["A-7: 12.99 EUR"]
    assert catalog.lookups == ["A-7"]
    redeemed = [r for r in kit.store.records() if r.kind == Kind.SPECULATION_REDEEMED]
    assert len(redeemed) == 1


def test_what_cannot_run_ahead_is_refused_before_anything_runs(kit: AgentKit) -> None:
    charged: list[int] = []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        return "ch_1"

    @tool
    def stamp(sku: str, clerk: Annotated[str, InjectedToolArg]) -> str:
        """Stamp a quote."""
        return f"{sku} by {clerk}"

    wrapped: BaseTool = saga_tool(charge, compensate=lambda result: None)
    stamped = saga_tool(stamp, semantics="reversible")
    with kit.transaction("quote"):
        with pytest.raises(SpeculationError, match="only REVERSIBLE steps"):
            kit.speculate(wrapped, amount=5)
        with pytest.raises(SpeculationError, match="injected arguments"):
            kit.speculate(stamped, sku="A-7")
    assert charged == []
