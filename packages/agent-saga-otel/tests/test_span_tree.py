"""The span tree of a transaction, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from agent_saga import (
    AgentKit,
    ApprovalRequest,
    Approvals,
    DenyTools,
    SagaRolledBack,
    SequentialIds,
    submit_vote,
)
from agent_saga_otel import SAGA_ID, OTelObserver
from agent_saga_otel import _names as names
from opentelemetry import baggage, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv
from opentelemetry.trace import StatusCode


def failing_order(kit: AgentKit, undone: list[str]) -> str:
    """A three-step saga whose last step raises; returns its saga id."""

    @kit.tool(name="book", compensate=lambda: undone.append("book"))
    def book() -> str:
        return "booked"

    @kit.tool(name="charge", compensate=lambda: undone.append("charge"))
    def charge(amount: int) -> str:
        return f"charged {amount}"

    @kit.tool(name="ship", compensate=lambda: undone.append("ship"))
    def ship() -> str:
        raise RuntimeError("no courier")

    saga_id = ""
    with pytest.raises(SagaRolledBack), kit.transaction("order") as saga:
        saga_id = saga.id
        book()
        charge(amount=30)
        ship()
    return saga_id


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {s.name: s for s in spans}
    assert len(named) == len(spans), [s.name for s in spans]
    return named


def test_failing_three_step_saga_span_tree(kit: AgentKit, exporter: InMemorySpanExporter) -> None:
    undone: list[str] = []
    saga_id = failing_order(kit, undone)
    assert undone == ["charge", "book"]
    spans = exporter.get_finished_spans()
    named = by_name(spans)
    assert sorted(named) == [
        "compensate book",
        "compensate charge",
        "execute_tool book",
        "execute_tool charge",
        "execute_tool ship",
        "invoke_workflow order",
    ]
    root = named["invoke_workflow order"]
    assert root.parent is None
    for span in spans:
        assert span.attributes is not None
        assert span.attributes[SAGA_ID] == saga_id, span.name
        assert span.context is not None
        assert root.context is not None
        assert span.context.trace_id == root.context.trace_id
        if span is not root:
            assert span.parent is not None
            assert span.parent.span_id == root.context.span_id

    assert root.attributes is not None
    assert root.attributes[names.GEN_AI_OPERATION_NAME] == "invoke_workflow"
    assert root.attributes[names.SAGA_STATUS] == "rolled_back"
    assert root.status.status_code is StatusCode.ERROR

    for tool in ["book", "charge", "ship"]:
        step = named[f"execute_tool {tool}"]
        assert step.attributes is not None
        assert step.attributes[names.GEN_AI_OPERATION_NAME] == "execute_tool"
        assert step.attributes[names.GEN_AI_TOOL_NAME] == tool
        assert names.STEP_ORDINAL not in step.attributes  # detail is opt-in on step spans
        assert names.STEP_SEMANTICS not in step.attributes
        key = step.attributes[names.IDEMPOTENCY_KEY]
        assert isinstance(key, str)
        assert key.startswith("as1-")
        assert names.GEN_AI_TOOL_CALL_ID not in step.attributes  # no model call around it
    ship = named["execute_tool ship"]
    assert ship.status.status_code is StatusCode.ERROR
    assert ship.status.description == "RuntimeError: no courier"
    assert ship.attributes is not None
    assert ship.attributes[names.STEP_OUTCOME] == "failed"
    [event] = ship.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"
    assert named["execute_tool book"].status.status_code is StatusCode.UNSET
    book = named["execute_tool book"].attributes
    assert book is not None
    assert names.STEP_OUTCOME not in book

    # One span per compensation, newest step first, each after the failing step ended.
    compensations = [s for s in spans if s.name.startswith("compensate ")]
    assert [s.name for s in compensations] == ["compensate charge", "compensate book"]
    first, second = compensations
    assert ship.end_time is not None
    assert first.start_time is not None
    assert ship.end_time <= first.start_time
    assert first.end_time is not None
    assert second.start_time is not None
    assert first.end_time <= second.start_time
    assert all(s.status.status_code is StatusCode.UNSET for s in compensations)


def test_step_details_put_ordinal_and_semantics_on_step_spans(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    observer = OTelObserver(provider, step_details=True)
    with AgentKit(home=tmp_path / "details", ids=SequentialIds(), observers=[observer]) as kit:
        failing_order(kit, [])
    named = by_name(exporter.get_finished_spans())
    for ordinal, tool in enumerate(["book", "charge", "ship"], start=1):
        attributes = named[f"execute_tool {tool}"].attributes
        assert attributes is not None
        assert attributes[names.STEP_ORDINAL] == ordinal
        assert attributes[names.STEP_SEMANTICS] == "compensable"
    compensation = named["compensate charge"].attributes
    assert compensation is not None
    assert compensation[names.STEP_ORDINAL] == 2


def test_records_keep_the_trace_and_span_of_their_step(
    kit: AgentKit, exporter: InMemorySpanExporter
) -> None:
    failing_order(kit, [])
    named = by_name(exporter.get_finished_spans())
    records = {(r.kind, r.data.get("ordinal")): r.data for r in kit.store.records()}
    ship = named["execute_tool ship"].context
    undo = named["compensate book"].context
    root = named["invoke_workflow order"].context
    assert ship is not None
    assert undo is not None
    assert root is not None
    assert records[("step.failed", 3)]["trace"] == {
        "trace_id": f"{ship.trace_id:032x}",
        "span_id": f"{ship.span_id:016x}",
    }
    assert records[("compensation.done", 1)]["trace"] == {
        "trace_id": f"{undo.trace_id:032x}",
        "span_id": f"{undo.span_id:016x}",
    }
    assert records[("saga.begin", None)]["trace"] == {
        "trace_id": f"{root.trace_id:032x}",
        "span_id": f"{root.span_id:016x}",
    }
    report = kit.verify()  # the chain and certify read the trace field like any other
    assert report.ok
    assert report.records == len(list(kit.store.records()))


def test_gate_refusal_has_its_own_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with AgentKit(
        home=tmp_path / "home",
        ids=SequentialIds(),
        rules=[DenyTools(frozenset({"wire"}))],
        observers=[OTelObserver(provider)],
    ) as kit:

        @kit.tool(name="wire", compensate=lambda: None)
        def wire(amount: int) -> None:
            raise AssertionError("never runs")

        with pytest.raises(SagaRolledBack), kit.transaction("pay") as saga:
            wire(amount=5)
    named = by_name(exporter.get_finished_spans())
    refusal, step = named["gate.refused wire"], named["execute_tool wire"]
    assert refusal.attributes is not None
    assert step.attributes is not None
    assert refusal.attributes[SAGA_ID] == saga.id
    assert refusal.attributes[names.GATE_RULE] == "deny_tools"
    assert refusal.status.status_code is StatusCode.ERROR
    assert refusal.parent is not None
    assert step.context is not None
    assert refusal.parent.span_id == step.context.span_id
    assert step.attributes[names.STEP_OUTCOME] == "refused"
    assert step.status.status_code is StatusCode.ERROR


def test_committed_saga_and_baggage_inside_the_transaction(
    kit: AgentKit, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    @kit.tool(name="note", semantics="reversible")
    def note() -> str:
        return "ok"

    framework = provider.get_tracer("some.framework")
    with kit.transaction("notes") as saga:
        assert baggage.get_baggage(SAGA_ID) == saga.id
        note()
        with framework.start_as_current_span("framework call"):
            pass
    assert baggage.get_baggage(SAGA_ID) is None
    assert trace.get_current_span().get_span_context().is_valid is False
    named = by_name(exporter.get_finished_spans())
    other = named["framework call"]
    assert other.attributes is not None
    assert other.attributes[SAGA_ID] == saga.id
    root = named["invoke_workflow notes"]
    assert root.status.status_code is StatusCode.UNSET
    assert root.attributes is not None
    assert root.attributes[names.SAGA_STATUS] == "committed"


def test_gen_ai_names_match_the_semantic_conventions() -> None:
    assert names.GEN_AI_OPERATION_NAME == semconv.GEN_AI_OPERATION_NAME
    assert names.GEN_AI_TOOL_NAME == semconv.GEN_AI_TOOL_NAME
    assert names.GEN_AI_TOOL_CALL_ID == semconv.GEN_AI_TOOL_CALL_ID
    assert names.GEN_AI_TOOL_TYPE == semconv.GEN_AI_TOOL_TYPE
    assert names.GEN_AI_WORKFLOW_NAME == semconv.GEN_AI_WORKFLOW_NAME
    assert names.GEN_AI_CONVERSATION_ID == semconv.GEN_AI_CONVERSATION_ID
    ops = semconv.GenAiOperationNameValues
    assert ops.EXECUTE_TOOL.value == names.EXECUTE_TOOL
    assert ops.INVOKE_WORKFLOW.value == names.INVOKE_WORKFLOW


class ApproveAtOnce:
    """An approval channel whose approver says yes as soon as a request is posted."""

    def __init__(self) -> None:
        self.kit: AgentKit | None = None

    def request_posted(self, request: ApprovalRequest) -> None:
        assert self.kit is not None
        submit_vote(self.kit.store, request.id, "alice", "approve", channel="test")

    def request_decided(self, request: ApprovalRequest, outcome: str) -> None:
        return None


def test_approval_events_on_the_step_span(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    channel = ApproveAtOnce()
    approvals = Approvals(approvers=["alice"], channels=[channel], poll=0.01)
    with AgentKit(
        home=tmp_path / "home",
        ids=SequentialIds(),
        approvals=approvals,
        observers=[OTelObserver(provider)],
    ) as kit:
        channel.kit = kit

        @kit.tool(name="bank.wire", semantics="irreversible")
        def wire(usd: int) -> str:
            return f"wired {usd}"

        with kit.transaction("pay"):
            wire(usd=5)
    step = by_name(exporter.get_finished_spans())["execute_tool bank.wire"]
    assert [e.name for e in step.events] == [
        "agent_saga.approval.requested",
        "agent_saga.approval.decided",
    ]
    decided = step.events[1].attributes
    assert decided is not None
    assert decided[names.APPROVAL_OUTCOME] == "approved"
    assert tuple(decided[names.APPROVAL_APPROVERS]) == ("alice",)  # type: ignore[arg-type]


def test_async_transaction_spans_and_context(kit: AgentKit, exporter: InMemorySpanExporter) -> None:
    @kit.tool(name="fetch", semantics="reversible")
    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n

    async def agent() -> str:
        async with kit.transaction("async order") as saga:
            await fetch(1)
            await asyncio.gather(fetch(2), fetch(3))
            assert baggage.get_baggage(SAGA_ID) == saga.id
        return saga.id

    saga_id = asyncio.run(agent())
    spans = exporter.get_finished_spans()
    root = by_name(tuple(s for s in spans if s.name.startswith("invoke")))[
        "invoke_workflow async order"
    ]
    steps = [s for s in spans if s.name == "execute_tool fetch"]
    assert len(steps) == 3
    for step in steps:
        assert step.attributes is not None
        assert step.attributes[SAGA_ID] == saga_id
        assert step.parent is not None
        assert root.context is not None
        assert step.parent.span_id == root.context.span_id
