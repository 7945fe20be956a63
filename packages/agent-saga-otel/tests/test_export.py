"""Real exports over OTLP/HTTP to a collector on 127.0.0.1, plainly and through Phoenix."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds
from agent_saga.testing import run_markdown_examples
from agent_saga_otel import SAGA_ID, OTelObserver, SagaIdSpanProcessor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


class Collector:
    """A small OTLP/HTTP trace collector on 127.0.0.1 that decodes what it receives."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(request)
                collector.paths.append(self.path)
                collector.content_types.append(self.headers.get("Content-Type", ""))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[tuple[str, dict[str, str]]]:
        """Every received span as (name, string attributes)."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        attributes = {a.key: a.value.string_value for a in span.attributes}
                        found.append((span.name, attributes))
        return found

    def resource_attributes(self) -> dict[str, str]:
        return {
            a.key: a.value.string_value
            for request in self.requests
            for resource_spans in request.resource_spans
            for a in resource_spans.resource.attributes
        }


@pytest.fixture
def collector() -> Iterator[Collector]:
    running = Collector()
    running.thread.start()
    yield running
    running.server.shutdown()
    running.server.server_close()


@pytest.fixture(autouse=True)
def _global_provider_untouched() -> Iterator[None]:
    before = trace.get_tracer_provider()
    yield
    assert trace.get_tracer_provider() is before


def order(kit: AgentKit) -> str:
    @kit.tool(name="charge", compensate=lambda: None)
    def charge(amount: int) -> str:
        return "ok"

    @kit.tool(name="ship", compensate=lambda: None)
    def ship() -> None:
        raise RuntimeError("no courier")

    with pytest.raises(SagaRolledBack), kit.transaction("order") as saga:
        charge(amount=3)
        ship()
    return saga.id


def test_plain_otlp_http_export(tmp_path: Path, collector: Collector) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SagaIdSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.endpoint)))
    with AgentKit(
        home=tmp_path / "home", ids=SequentialIds(), observers=[OTelObserver(provider)]
    ) as kit:
        saga_id = order(kit)
    provider.shutdown()
    assert set(collector.paths) == {"/v1/traces"}
    assert set(collector.content_types) == {"application/x-protobuf"}
    spans = collector.spans()
    assert sorted(name for name, _ in spans) == [
        "compensate charge",
        "execute_tool charge",
        "execute_tool ship",
        "invoke_workflow order",
    ]
    assert all(attributes[SAGA_ID] == saga_id for _, attributes in spans)


def test_phoenix_one_call_setup_keeps_its_exporter(tmp_path: Path, collector: Collector) -> None:
    from agent_saga_otel.phoenix import register

    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        provider = register(
            kit,
            endpoint=collector.endpoint,
            project_name="agent-saga-tests",
            protocol="http/protobuf",
            batch=False,
        )
        framework = provider.get_tracer("some.framework")
        with kit.transaction("notes") as saga, framework.start_as_current_span("framework call"):
            pass
        saga_id = order(kit)
    provider.shutdown()
    spans = dict(collector.spans())
    assert spans["framework call"][SAGA_ID] == saga.id
    assert spans["framework call"]["session.id"] == saga.id
    assert spans["invoke_workflow order"]["session.id"] == saga_id
    assert spans["invoke_workflow order"]["openinference.span.kind"] == "CHAIN"
    assert spans["execute_tool ship"]["openinference.span.kind"] == "TOOL"
    assert spans["execute_tool ship"][SAGA_ID] == saga_id
    assert collector.resource_attributes()["openinference.project.name"] == "agent-saga-tests"


def test_readme_examples_export_to_the_collector(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLLECTOR", collector.endpoint)
    readme = Path(__file__).resolve().parents[1] / "README.md"
    assert run_markdown_examples(readme) == 4
    spans = collector.spans()
    by_name = dict(spans)
    order_id = by_name["invoke_workflow order"][SAGA_ID]
    assert by_name["compensate payments.charge"][SAGA_ID] == order_id
    assert by_name["planner"][SAGA_ID] == by_name["invoke_workflow order-2"][SAGA_ID]
    assert (
        by_name["invoke_workflow restock"]["session.id"]
        == by_name["invoke_workflow restock"][SAGA_ID]
    )
    assert all(SAGA_ID in attributes for _, attributes in spans)
    assert by_name["FunctionTool.acall"][SAGA_ID] == by_name["invoke_workflow trip"][SAGA_ID]
