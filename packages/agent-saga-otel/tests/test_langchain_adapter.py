"""Tools wrapped by agent-saga-langchain (``SagaTool``, which runs LangChain's own run/arun):
each step span is the child of LangChain's tool span for that call, sync and async."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds
from agent_saga_langchain import SagaTool, saga_tools
from agent_saga_langchain.testing import ScriptedChat, agent_loop, call
from agent_saga_otel import OTelObserver
from agent_saga_otel._names import OWN_SCOPE
from agent_saga_otel.langchain import LangChainLink
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode


def wrapped_tools(refunds: list[str]) -> list[SagaTool]:
    @tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        return "ch_1"

    @tool
    async def ship(city: str) -> str:
        """Book a courier."""
        raise RuntimeError(f"no courier in {city}")

    def refund(result: str) -> None:
        refunds.append(result)

    return saga_tools(
        [charge, ship], {"charge": {"compensate": refund}, "ship": {"semantics": "reversible"}}
    )


def parent_of(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, span.name
    return spans[span.parent.span_id]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_wrapped_tools_step_span_is_inside_langchains_tool_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter, mode: str
) -> None:
    refunds: list[str] = []
    calls = [call("charge", {"amount": 30}, "call_1")]
    if mode == "async":  # ship has only an async body
        calls.append(call("ship", {"city": "Oslo"}, "call_2"))
    model = ScriptedChat(
        script=[*(AIMessage("", tool_calls=[c]) for c in calls), AIMessage("done")]
    )
    loop = agent_loop(model, wrapped_tools(refunds))
    observers = [OTelObserver(provider), LangChainLink(provider)]
    with AgentKit(home=tmp_path / "home", ids=SequentialIds(), observers=observers) as kit:
        if mode == "sync":
            with kit.transaction("order"):
                loop.invoke([HumanMessage("buy")])
        else:

            async def main() -> None:
                async with kit.transaction("order"):
                    await loop.ainvoke([HumanMessage("buy and ship")])

            with pytest.raises(SagaRolledBack):
                asyncio.run(main())
    assert refunds == (["ch_1"] if mode == "async" else [])

    finished = exporter.get_finished_spans()
    spans = {s.context.span_id: s for s in finished if s.context is not None}
    steps = [
        s
        for s in finished
        if s.instrumentation_scope is not None
        and s.instrumentation_scope.name == OWN_SCOPE
        and s.name.startswith("execute_tool ")
    ]
    assert [s.name for s in steps] == [f"execute_tool {c['name']}" for c in calls]
    for step, made in zip(steps, calls, strict=True):
        tool_span = parent_of(step, spans)  # the framework's span of this very call
        assert tool_span.instrumentation_scope is not None
        assert tool_span.instrumentation_scope.name == "agent_saga_otel.langchain"
        assert tool_span.name == step.name
        assert tool_span.attributes is not None
        assert step.attributes is not None
        assert tool_span.attributes["gen_ai.tool.call.id"] == made["id"]
        assert step.attributes["gen_ai.tool.call.id"] == made["id"]
        assert parent_of(tool_span, spans).name == "agent_loop"
    # One span per call from LangChain (the proxy's run is the only tool run), one step span.
    tool_runs = [s for s in finished if s.attributes and s.attributes.get("langchain.run.type")]
    assert sorted(str(s.name) for s in tool_runs if s.name.startswith("execute_tool")) == sorted(
        s.name for s in steps
    )
    if mode == "async":
        assert steps[1].status.status_code is StatusCode.ERROR
