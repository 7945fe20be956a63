"""One call to trace a kit's sagas to Arize Phoenix (the ``phoenix`` extra).

:func:`register` calls ``phoenix.otel.register`` and fixes what it leaves to the caller:

* the saga-id processor is added *next to* Phoenix's exporter: a plain ``add_span_processor``
  on Phoenix's provider would replace that exporter, and nothing would reach Phoenix;
* every span of a transaction gets the saga id as ``agent_saga.saga.id`` and as OpenInference's
  ``session.id``, so Phoenix shows one session per saga, framework spans included;
* the kit's sagas are traced with OpenInference span kinds (CHAIN, TOOL, GUARDRAIL);
* the global tracer provider is left alone unless asked for.
"""

from __future__ import annotations

from typing import Any, Literal

from agent_saga import AgentKit
from opentelemetry.sdk.trace import TracerProvider
from phoenix.otel import TracerProvider as PhoenixTracerProvider
from phoenix.otel import register as phoenix_register

from ._observer import OTelObserver
from ._processor import SagaIdSpanProcessor


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
        endpoint, project_name, protocol, headers: as for ``phoenix.otel.register`` (which also
            reads ``PHOENIX_COLLECTOR_ENDPOINT`` and friends).
        batch: export in the background (``False`` exports as each span ends: with the
            collector down, every span end then waits for the exporter's retries).
        set_global_tracer_provider: also make it the global provider (off by default).
        kwargs: passed on to ``phoenix.otel.register``.

    Returns:
        The provider; give it to framework instrumentations so their spans join the trace.
    """
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
    processor = SagaIdSpanProcessor(session_id=True)
    if isinstance(provider, PhoenixTracerProvider):
        provider.add_span_processor(processor, replace_default_processor=False)
    else:  # pragma: no cover - a phoenix.otel without its own provider class
        provider.add_span_processor(processor)
    if kit is not None:
        kit.observe(OTelObserver(provider, openinference=True))
    return provider
