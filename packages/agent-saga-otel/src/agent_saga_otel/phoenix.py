"""One call to trace a kit's sagas to Arize Phoenix (the ``phoenix`` extra).

:func:`register` calls ``phoenix.otel.register`` and fixes what it leaves to the caller:

* spans go to Phoenix's OTLP/HTTP endpoint, ``http://localhost:6006/v1/traces``, unless
  ``endpoint`` or ``PHOENIX_COLLECTOR_ENDPOINT`` says otherwise (``phoenix.otel`` alone
  defaults to gRPC on port 4317);
* the provider's ``force_flush()`` returns ``False`` when an export failed (Phoenix down, wrong
  port), where the SDK's processors return ``True`` once their queue is drained, delivered or
  not (see :class:`~agent_saga_otel.ExportCheckingSpanProcessor`);
* the saga-id processor is added *next to* the exporter: a plain ``add_span_processor`` on
  Phoenix's provider would replace it, and nothing would reach Phoenix;
* every span of a transaction gets the saga id as ``agent_saga.saga.id`` and as OpenInference's
  ``session.id``, so Phoenix shows one session per saga, framework spans included;
* the kit's sagas are traced with OpenInference span kinds (CHAIN, TOOL, GUARDRAIL);
* the global tracer provider is left alone unless asked for.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from agent_saga import AgentKit
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from phoenix.otel import GRPCSpanExporter, HTTPSpanExporter
from phoenix.otel import TracerProvider as PhoenixTracerProvider
from phoenix.otel import register as phoenix_register

from ._export import ExportCheckingSpanProcessor
from ._observer import OTelObserver
from ._processor import SagaIdSpanProcessor

TRACES_PATH = "/v1/traces"


def register(
    kit: AgentKit | None = None,
    *,
    endpoint: str | None = None,
    project_name: str | None = None,
    protocol: Literal["http/protobuf", "grpc"] | None = None,
    batch: bool = True,
    headers: dict[str, str] | None = None,
    set_global_tracer_provider: bool = False,
    **kwargs: Any,
) -> TracerProvider:
    """A Phoenix tracer provider with the saga id on every span; traces ``kit`` when given.

    Args:
        kit: its sagas, steps, refusals and compensations become spans on this provider.
        endpoint: Phoenix's collector. Default: ``PHOENIX_COLLECTOR_ENDPOINT``, else
            ``http://localhost:6006/v1/traces``. An HTTP endpoint without a path gets
            ``/v1/traces``.
        project_name: the Phoenix project (default: ``PHOENIX_PROJECT_NAME``, else
            ``default``).
        protocol: ``"http/protobuf"`` (the default) or ``"grpc"`` (then ``endpoint`` is the
            gRPC address, default ``http://localhost:4317``).
        batch: export in the background (``False`` exports as each span ends: with the
            collector down, every span end then waits for the exporter's retries).
        headers: sent with every export (``PHOENIX_API_KEY`` and ``PHOENIX_CLIENT_HEADERS``
            are read when not given).
        set_global_tracer_provider: also make it the global provider (off by default).
        kwargs: passed on to ``phoenix.otel.register`` (``api_key``, ``resource``...).

    Returns:
        The provider; give it to framework instrumentations so their spans join the trace.
        Its ``force_flush()`` is ``False`` when an export failed since the last flush.
    """
    api_key = kwargs.pop("api_key", None)
    if api_key:
        headers = {**(headers or {}), "authorization": f"Bearer {api_key}"}
    if protocol != "grpc":
        protocol = "http/protobuf"
        endpoint = _http_endpoint(endpoint)
    provider = phoenix_register(
        endpoint=endpoint,
        project_name=project_name,
        protocol=protocol,
        batch=batch,
        headers=headers,
        set_global_tracer_provider=set_global_tracer_provider,
        verbose=False,
        **kwargs,
    )
    # This exporter replaces the default one phoenix.otel made (same endpoint rules, HTTP first).
    exporting = ExportCheckingSpanProcessor(_exporter(endpoint, protocol, headers), batch=batch)
    processor = SagaIdSpanProcessor(session_id=True)
    if isinstance(provider, PhoenixTracerProvider):
        provider.add_span_processor(exporting, replace_default_processor=True)
        provider.add_span_processor(processor, replace_default_processor=False)
    else:  # pragma: no cover - a phoenix.otel without its own provider class
        provider.add_span_processor(exporting)
        provider.add_span_processor(processor)
    if kit is not None:
        kit.observe(OTelObserver(provider, openinference=True))
    return provider


def _exporter(
    endpoint: str | None, protocol: str | None, headers: dict[str, str] | None
) -> SpanExporter:
    if protocol == "grpc":
        return GRPCSpanExporter(endpoint=endpoint, headers=headers)
    return HTTPSpanExporter(endpoint=endpoint, headers=headers)


def _http_endpoint(endpoint: str | None) -> str | None:
    """``endpoint`` with the OTLP traces path when it has none (``None`` stays: the exporter
    then reads ``PHOENIX_COLLECTOR_ENDPOINT`` or takes ``http://localhost:6006/v1/traces``)."""
    if endpoint is None:
        return None
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        return endpoint
    return urlunsplit(parts._replace(path=path + TRACES_PATH))
