"""Shared fixtures: an isolated home, no network but loopback, a local tracer provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_saga import AgentKit, SequentialIds
from agent_saga.testing import loopback_only
from agent_saga_otel import OTelObserver, SagaIdSpanProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pytest_agent_saga import clean_environment

EXPORTERS = ("OTEL_", "PHOENIX_", "LANGSMITH_", "LANGCHAIN_")
"""The exporters' own settings (endpoints, headers, keys, sampling, ``OTEL_SDK_DISABLED``)."""
PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No shell setting for agent-saga, the terminal, OpenTelemetry, Phoenix or LangSmith, and
    no proxy; an own agent-saga home; any non-loopback connection fails the test."""
    clean_environment(monkeypatch, prefixes=EXPORTERS, names=PROXIES)
    monkeypatch.setenv("AGENT_SAGA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with loopback_only() as refused:
        yield
    assert refused == [], f"network access attempted: {refused}"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A local provider (never the global one): saga ids copied, spans kept in memory."""
    tp = TracerProvider()
    tp.add_span_processor(SagaIdSpanProcessor())
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    yield tp
    tp.shutdown()


@pytest.fixture
def kit(tmp_path: Path, provider: TracerProvider) -> Iterator[AgentKit]:
    with AgentKit(
        home=tmp_path / "home", ids=SequentialIds(), observers=[OTelObserver(provider)]
    ) as k:
        yield k
