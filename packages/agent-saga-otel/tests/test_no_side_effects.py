"""Constructing and using the observers installs no global tracer provider; errors are contained."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agent_saga import AgentKit, Saga, SequentialIds
from agent_saga_otel import OTelObserver, SagaIdSpanProcessor
from agent_saga_otel.langchain import LangChainLink, RunSpans
from agent_saga_otel.langsmith import LangSmithLink
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def test_no_global_tracer_provider_is_installed(tmp_path: Path) -> None:
    before = trace.get_tracer_provider()
    assert isinstance(before, trace.ProxyTracerProvider)
    observers = [OTelObserver(), LangChainLink(), LangSmithLink()]
    RunSpans()
    SagaIdSpanProcessor(session_id=True)
    with AgentKit(home=tmp_path / "home", ids=SequentialIds(), observers=observers) as kit:

        @kit.tool(name="note", semantics="reversible")
        def note() -> str:
            return "ok"

        with kit.transaction("t"):
            note()
        records = list(kit.store.records())
        assert kit.observers.errors == 0
    assert trace.get_tracer_provider() is before
    # With no SDK provider the spans are not recording: no trace context reaches the log.
    assert [r for r in records if "trace" in r.data] == []


class Exploding(OTelObserver):
    def step_begin(self, *args: object) -> None:
        raise RuntimeError("exporter bug")

    def trace_ids(self) -> Mapping[str, str] | None:
        raise RuntimeError("exporter bug")


def test_a_failing_observer_does_not_change_the_transaction(
    tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with AgentKit(
        home=tmp_path / "home", ids=SequentialIds(), observers=[Exploding(provider)]
    ) as kit:

        @kit.tool(name="note", semantics="reversible")
        def note() -> str:
            return "ok"

        with kit.transaction("t") as saga:
            assert note() == "ok"
        assert isinstance(saga, Saga)
        assert saga.status.value == "committed"
        assert kit.observers.errors > 0
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["invoke_workflow t"]
