"""A span processor that puts the saga id on every span started inside a transaction.

OpenTelemetry does not copy baggage onto spans. Inside a transaction the saga id is in the
current context's baggage (put there by :class:`~agent_saga_otel.OTelObserver`), so spans that
frameworks start there (LangChain, LlamaIndex, HTTP clients...) get it as an attribute when
this processor is on their tracer provider. This module needs the OpenTelemetry SDK.
"""

from __future__ import annotations

from opentelemetry import baggage
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from . import _names as n


class SagaIdSpanProcessor(SpanProcessor):
    """Copies the saga id from the baggage of a span's parent context onto the span.

    Args:
        session_id: also set OpenInference's ``session.id`` (Phoenix groups a session's traces).
        conversation_id: also set ``gen_ai.conversation.id``.

    It exports nothing and keeps no state: add it next to the exporting processors
    (``tracer_provider.add_span_processor(SagaIdSpanProcessor())``).
    """

    def __init__(self, *, session_id: bool = False, conversation_id: bool = False) -> None:
        self._keys: tuple[str, ...] = (n.SAGA_ID,)
        if session_id:
            self._keys += (n.OPENINFERENCE_SESSION_ID,)
        if conversation_id:
            self._keys += (n.GEN_AI_CONVERSATION_ID,)
        self._saga_id_only = len(self._keys) == 1

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        scope = span.instrumentation_scope
        if self._saga_id_only and scope is not None and scope.name == n.OWN_SCOPE:
            return  # an OTelObserver span: it has the saga id already (the cheap test first)
        attributes = span.attributes
        if attributes and self._keys[-1] in attributes:  # agent-saga's own spans have them
            return
        saga_id = baggage.get_baggage(n.SAGA_ID, parent_context)
        if isinstance(saga_id, str):
            for key in self._keys:
                span.set_attribute(key, saga_id)

    def on_end(self, span: ReadableSpan) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
