"""Real exports over OTLP/HTTP to a collector on 127.0.0.1, plainly and through Phoenix."""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from agent_saga import AgentKit, SagaRolledBack, SequentialIds
from agent_saga.testing import run_markdown_examples
from agent_saga_otel import SAGA_ID, ExportCheckingSpanProcessor, OTelObserver, SagaIdSpanProcessor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor


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

    def parents(self) -> dict[str, str | None]:
        """Each received span's name and its parent's name (``None`` for a root)."""
        spans = [
            span
            for request in self.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]
        names = {span.span_id: span.name for span in spans}
        return {span.name: names.get(span.parent_span_id) for span in spans}

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
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", collector.endpoint)  # Phoenix's 6006
    readme = Path(__file__).resolve().parents[1] / "README.md"
    assert run_markdown_examples(readme) == 4
    spans = collector.spans()
    by_name = dict(spans)
    order_id = by_name["invoke_workflow order"][SAGA_ID]
    assert by_name["compensate payments.charge"][SAGA_ID] == order_id
    assert by_name["planner"][SAGA_ID] == by_name["invoke_workflow order-2"][SAGA_ID]
    restock = by_name["invoke_workflow restock"]
    assert restock["session.id"] == restock[SAGA_ID]
    assert all(SAGA_ID in attributes for _, attributes in spans)
    assert by_name["FunctionTool.acall"][SAGA_ID] == by_name["invoke_workflow trip"][SAGA_ID]
    # The Phoenix example: the LangChain tool's span, the step inside it, one session.
    assert by_name["execute_tool restock"]["openinference.span.kind"] == "TOOL"
    assert by_name["execute_tool restock"]["gen_ai.tool.call.id"] == "call_7"
    step = by_name["execute_tool inventory.reserve"]
    assert step["gen_ai.tool.call.id"] == "call_7"
    assert step["session.id"] == restock[SAGA_ID]
    parents = collector.parents()
    assert parents["execute_tool inventory.reserve"] == "execute_tool restock"
    assert parents["execute_tool restock"] == "invoke_workflow restock"


def closed_endpoint() -> str:
    """An OTLP/HTTP endpoint on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/traces"


def one_span(provider: TracerProvider) -> None:
    with provider.get_tracer("t").start_as_current_span("work"):
        pass


def test_the_sdk_batch_processor_claims_a_failed_export_flushed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Why force_flush() said True with Phoenix down: the SDK's processors report whether their
    # queue was drained; the exporter's failure (after its retries) is only logged.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=closed_endpoint())))
    one_span(provider)
    assert provider.force_flush() is True
    provider.shutdown()


def test_export_checking_processor_reports_failed_exports_once(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    down = TracerProvider()
    checking = ExportCheckingSpanProcessor(OTLPSpanExporter(endpoint=closed_endpoint()))
    down.add_span_processor(checking)
    one_span(down)
    assert down.force_flush() is False
    assert checking.failed_exports == 1
    assert down.force_flush() is True  # nothing new failed (nothing was left to export)
    down.shutdown()

    up = TracerProvider()
    simple = ExportCheckingSpanProcessor(OTLPSpanExporter(endpoint=collector.endpoint), batch=False)
    up.add_span_processor(simple)
    one_span(up)
    assert up.force_flush() is True
    assert simple.failed_exports == 0
    assert [name for name, _ in collector.spans()] == ["work"]
    up.shutdown()


def test_phoenix_provider_flush_is_false_when_phoenix_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga_otel.phoenix import register

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.5")
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", closed_endpoint())
    with AgentKit(home=tmp_path / "home", ids=SequentialIds()) as kit:
        provider = register(kit, project_name="down")
        with kit.transaction("t"):
            pass
        assert provider.force_flush() is False
    provider.shutdown()


def test_phoenix_export_is_http_by_default_and_endpoints_get_their_path(
    collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_saga_otel.phoenix import register

    bare = collector.endpoint.removesuffix("/v1/traces")
    monkeypatch.setenv("PHOENIX_COLLECTOR_ENDPOINT", bare)  # as `phoenix serve` prints it
    from_environment = register(batch=False)  # no protocol: HTTP (phoenix.otel: gRPC)
    one_span(from_environment)
    assert from_environment.force_flush() is True
    from_environment.shutdown()
    monkeypatch.delenv("PHOENIX_COLLECTOR_ENDPOINT")
    given = register(endpoint=bare, batch=False)
    one_span(given)
    assert given.force_flush() is True
    given.shutdown()
    assert collector.paths == ["/v1/traces", "/v1/traces"]
    assert set(collector.content_types) == {"application/x-protobuf"}
