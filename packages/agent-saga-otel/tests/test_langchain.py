"""A LangChain agent (scripted model) in a transaction: its own runs and spans carry the saga id;
the same run traced to a real Phoenix server reads back through Phoenix's own APIs as one trace,
filterable by saga id, with the steps inside the tool spans."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds
from agent_saga_langchain import testing
from agent_saga_otel import SAGA_ID, OTelObserver
from agent_saga_otel._names import OWN_SCOPE as OWN
from agent_saga_otel.langchain import LangChainLink, RunSpans
from agent_saga_otel.langsmith import LangSmithLink
from agent_saga_otel.phoenix import register
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.tools import tool
from langchain_core.tracers.context import collect_runs
from langsmith.run_helpers import get_tracing_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode


class ScriptedChat(testing.ScriptedChat):
    """The LangChain package's scripted model, with a model name for the chat spans."""

    model: str = "scripted-1"


def call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    usage = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
    return AIMessage(
        "", tool_calls=[{"name": name, "args": args, "id": call_id}], usage_metadata=usage
    )


def order_agent(kit: AgentKit, refunds: list[int]) -> tuple[Runnable[Any, Any], Any]:
    """An agent whose script charges 30, then fails to book a courier and gives up; and the
    charge tool itself (``payments.charge``, compensated by appending to ``refunds``)."""

    def refund(amount: int) -> None:
        refunds.append(amount)

    @kit.tool(name="payments.charge", compensate=refund)
    def charge_card(amount: int) -> str:
        return f"charged {amount}"

    @kit.tool(name="shipping.book", compensate=lambda: None)
    def book_courier(city: str) -> str:
        raise RuntimeError(f"no courier in {city}")

    @tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        return charge_card(amount=amount)

    @tool
    def ship(city: str) -> str:
        """Book a courier."""
        return book_courier(city=city)

    model = ScriptedChat(
        script=[
            call("charge", {"amount": 30}, "call_1"),
            call("ship", {"city": "Oslo"}, "call_2"),
            AIMessage("I could not ship it."),
        ]
    )
    return testing.agent_loop(model, [charge, ship]), charge_card


def test_agent_runs_and_spans_carry_the_saga_id(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    refunds: list[int] = []
    with AgentKit(
        home=tmp_path / "home",
        ids=SequentialIds(),
        observers=[OTelObserver(provider), LangChainLink(provider)],
    ) as kit:
        loop, _ = order_agent(kit, refunds)
        with (
            collect_runs() as runs,
            pytest.raises(SagaRolledBack),
            kit.transaction("order") as saga,
        ):
            assert get_tracing_context()["metadata"] == {"saga_id": saga.id}
            loop.invoke([HumanMessage("buy and ship")])
            raise RuntimeError("the agent could not finish the order")
    assert refunds == [30]

    # LangChain's own runs carry the saga id as a tag.
    assert runs.traced_runs
    for run in runs.traced_runs:
        assert f"saga:{saga.id}" in (run.tags or []), run.name

    # LangChain's runs as spans: the loop, two model calls... all in the saga's trace.
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "invoke_workflow order")
    runs_spans = [s for s in spans if s.attributes and "langchain.run.type" in s.attributes]
    kinds = sorted(str(s.attributes["langchain.run.type"]) for s in runs_spans if s.attributes)
    assert kinds == ["chain", "chat_model", "chat_model", "chat_model", "tool", "tool"]
    for span in spans:
        assert span.attributes is not None
        assert span.attributes[SAGA_ID] == saga.id, span.name
        assert span.context is not None
        assert root.context is not None
        assert span.context.trace_id == root.context.trace_id
    loop_span = next(s for s in runs_spans if s.name == "agent_loop")
    assert loop_span.parent is not None
    assert root.context is not None
    assert loop_span.parent.span_id == root.context.span_id
    tool_spans = {
        str(s.attributes["gen_ai.tool.call.id"]): s
        for s in runs_spans
        if s.attributes and s.attributes["langchain.run.type"] == "tool"
    }
    assert sorted(tool_spans) == ["call_1", "call_2"]
    assert tool_spans["call_2"].status.status_code is StatusCode.ERROR

    # Each step is the child of the tool run it ran in, with the model's id of the call and
    # its own idempotency key; every run has an OpenInference span kind.
    steps = {s.name: s for s in spans if s.name.startswith("execute_tool ") and s not in runs_spans}
    for step_name, call_id in [
        ("execute_tool payments.charge", "call_1"),
        ("execute_tool shipping.book", "call_2"),
    ]:
        step = steps[step_name]
        assert step.attributes is not None
        assert step.attributes["gen_ai.tool.call.id"] == call_id
        assert str(step.attributes["agent_saga.step.idempotency_key"]).startswith("as1-")
        assert step.parent is not None
        assert tool_spans[call_id].context is not None
        assert step.parent.span_id == tool_spans[call_id].context.span_id
    run_kinds = {
        (s.name, s.attributes["openinference.span.kind"]) for s in runs_spans if s.attributes
    }
    assert run_kinds == {
        ("agent_loop", "AGENT"),
        ("chat scripted-1", "LLM"),
        ("execute_tool charge", "TOOL"),
        ("execute_tool ship", "TOOL"),
    }
    chats = [s for s in runs_spans if s.name == "chat scripted-1"]
    assert [s.attributes["gen_ai.request.model"] for s in chats if s.attributes] == 3 * [
        "scripted-1"
    ]
    counted = [
        s.attributes for s in chats if s.attributes and "llm.token_count.prompt" in s.attributes
    ]
    assert len(counted) == 2  # the two tool calls reported usage, the final answer did not
    for attributes in counted:
        assert attributes["gen_ai.usage.input_tokens"] == 20
        assert attributes["gen_ai.usage.output_tokens"] == 5
        assert attributes["llm.token_count.total"] == 25
    own = [s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == OWN]
    assert sorted(s.name for s in own if s is not root) == [
        "compensate payments.charge",
        "execute_tool payments.charge",
        "execute_tool shipping.book",
    ]


def test_outside_a_transaction_runs_are_left_alone(exporter: InMemorySpanExporter) -> None:
    LangChainLink()  # constructing it registers nothing for runs outside a saga

    def same(x: int) -> int:
        return x

    with collect_runs() as runs:
        RunnableLambda(same, name="plain").invoke(1)
    assert [r.tags for r in runs.traced_runs] == [[]]
    assert exporter.get_finished_spans() == ()


def test_run_spans_handler_on_its_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    handler = RunSpans(provider)

    def add(x: int) -> int:
        return x + 1

    RunnableLambda(add, name="add").invoke(1, {"callbacks": [handler]})
    [span] = exporter.get_finished_spans()
    assert span.name == "add"
    assert span.attributes is not None
    assert SAGA_ID not in span.attributes


def test_langsmith_context_is_restored_after_the_saga(tmp_path: Path) -> None:
    with AgentKit(home=tmp_path / "home", observers=[LangSmithLink()]) as kit:
        with kit.transaction("t") as saga:
            context = get_tracing_context()
            assert context["tags"] == [f"saga:{saga.id}"]
            assert context["metadata"] == {"saga_id": saga.id}
        assert get_tracing_context()["metadata"] is None
        assert kit.observers.errors == 0


# -- a real Phoenix server ----------------------------------------------------------------------

SPANS = """query ($project: ID!, $condition: String) {
  node(id: $project) {
    ... on Project {
      spans(first: 200, filterCondition: $condition) {
        edges { node { name spanKind statusCode parentId context { traceId spanId } } }
      }
    }
  }
}"""
PROJECTS = "{ projects { edges { node { id name } } } }"


def graphql(server: str, query: str, variables: dict[str, Any]) -> Any:
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(
        f"{server}/graphql", body, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer = json.load(reply)
    assert "errors" not in answer, answer
    return answer["data"]


def rest(server: str, path: str) -> Any:
    with urllib.request.urlopen(f"{server}/v1/{path}", timeout=30) as reply:
        return json.load(reply)["data"]


def spans_where(server: str, project: str, condition: str) -> list[dict[str, Any]]:
    """Spans of ``project`` matching ``condition``, typed as in Phoenix's span search box."""
    projects = graphql(server, PROJECTS, {})["projects"]["edges"]
    ids = [p["node"]["id"] for p in projects if p["node"]["name"] == project]
    if not ids:
        return []
    data = graphql(server, SPANS, {"project": ids[0], "condition": condition})
    return [edge["node"] for edge in data["node"]["spans"]["edges"]]


def arrived(server: str, project: str, condition: str, count: int) -> list[Any]:
    """Phoenix writes received spans in the background: wait (bounded) until all are there."""
    deadline = time.monotonic() + 60
    while True:
        found = spans_where(server, project, condition)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_rolled_back_agent_run_is_one_trace_filterable_by_saga_id(
    tmp_path: Path, phoenix_server: str
) -> None:
    project = "agent-saga-rollback"
    refunds: list[int] = []
    with AgentKit(home=tmp_path / "home") as kit:
        provider = register(kit, endpoint=f"{phoenix_server}/v1/traces", project_name=project)
        kit.observe(LangChainLink(provider))

        loop, charge_card = order_agent(kit, refunds)
        with pytest.raises(SagaRolledBack), kit.transaction("order") as saga:
            loop.invoke([HumanMessage("buy and ship")])
            raise RuntimeError("the agent could not finish the order")
        with kit.transaction("another order") as other:
            charge_card(amount=5)
    assert refunds == [30]
    assert provider.force_flush() is True  # delivered, not just dequeued
    provider.shutdown()

    # The filter a person types in Phoenix finds exactly this saga's spans.
    spans = arrived(phoenix_server, project, f"agent_saga.saga.id == '{saga.id}'", 10)
    names = sorted(span["name"] for span in spans)
    assert names == [
        "agent_loop",
        "chat scripted-1",
        "chat scripted-1",
        "chat scripted-1",
        "compensate payments.charge",
        "execute_tool charge",
        "execute_tool payments.charge",
        "execute_tool ship",
        "execute_tool shipping.book",
        "invoke_workflow order",
    ]
    assert len({span["context"]["traceId"] for span in spans}) == 1  # one trace
    by_id = {span["context"]["spanId"]: span for span in spans}
    named = {span["name"]: span for span in spans}
    assert named["invoke_workflow order"]["parentId"] is None
    assert all(s["parentId"] in by_id for s in spans if s["name"] != "invoke_workflow order")

    # Each step is inside the tool span of the model's call, not beside it.
    for step, tool_span in [
        ("execute_tool payments.charge", "execute_tool charge"),
        ("execute_tool shipping.book", "execute_tool ship"),
    ]:
        assert by_id[named[step]["parentId"]]["name"] == tool_span
        assert named[tool_span]["spanKind"] == "tool"
    assert named["execute_tool shipping.book"]["statusCode"] == "ERROR"
    assert named["agent_loop"]["spanKind"] == "agent"
    assert named["chat scripted-1"]["spanKind"] == "llm"
    assert named["invoke_workflow order"]["spanKind"] == "chain"

    # The other saga is not in that filter, and has its own.
    others = spans_where(phoenix_server, project, f"agent_saga.saga.id == '{other.id}'")
    assert {span["name"] for span in others} == {
        "invoke_workflow another order",
        "execute_tool payments.charge",
    }

    # Sessions: one per saga, holding the saga's one trace.
    session = rest(phoenix_server, f"sessions/{saga.id}")
    assert session["session_id"] == saga.id
    assert [t["trace_id"] for t in session["traces"]] == [spans[0]["context"]["traceId"]]
