"""LlamaIndex's own spans inside a transaction, as OpenTelemetry spans carrying the saga id.

LlamaIndex reports its work (agent steps, LLM calls, tool calls) to span handlers of its
instrumentation dispatcher, not to OpenTelemetry. :class:`LlamaIndexLink` is an
:class:`agent_saga.Observer`: at the first saga it sees, it adds one :class:`DispatcherSpans`
handler to LlamaIndex's root dispatcher (constructing the link changes nothing). The handler
turns each LlamaIndex span started inside a transaction (the saga id is in the current
context's baggage) into an OpenTelemetry span with ``agent_saga.saga.id``, parented on its
LlamaIndex parent's span, the first one on the current span (the saga's or its step's).
Outside transactions it does nothing. Arguments and results are not put on spans. Needs
``llama-index-core``.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from agent_saga import Observer, Saga
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index_instrumentation import get_dispatcher
from opentelemetry import baggage, context, trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
from pydantic import PrivateAttr

from . import _names as n
from ._version import VERSION


class DispatcherSpans(BaseSpanHandler[Any]):
    """A LlamaIndex span handler that mirrors the spans of transactions into OpenTelemetry."""

    _tracer: Tracer = PrivateAttr()
    _spans: dict[str, Span] = PrivateAttr(default_factory=dict)

    def __init__(self, tracer_provider: TracerProvider | None = None, **data: Any) -> None:
        super().__init__(**data)
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("agent_saga_otel.llamaindex", VERSION)

    @classmethod
    def class_name(cls) -> str:
        return "AgentSagaDispatcherSpans"

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        saga_id = baggage.get_baggage(n.SAGA_ID)
        if not isinstance(saga_id, str):
            return  # outside any transaction
        ctx = context.get_current()
        parent = self._spans.get(parent_span_id) if parent_span_id is not None else None
        if parent is not None:
            ctx = trace.set_span_in_context(parent, ctx)
        name = id_.partition("-")[0]  # "<Class>.<method>-<uuid>"
        attributes = {n.SAGA_ID: saga_id, "llama_index.span.id": id_}
        self._spans[id_] = self._tracer.start_span(name, ctx, attributes=attributes)

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> None:
        span = self._spans.pop(id_, None)
        if span is not None:
            span.end()

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        span = self._spans.pop(id_, None)
        if span is None:
            return
        if err is not None:
            span.record_exception(err)
            span.set_status(Status(StatusCode.ERROR, f"{type(err).__name__}: {err}"))
        span.end()


class LlamaIndexLink(Observer):
    """Mirrors LlamaIndex's spans of each transaction into OpenTelemetry (see the module doc).

    Args:
        tracer_provider: where the spans go (``None``: the global provider, never set here).
            Use the kit's :class:`~agent_saga_otel.OTelObserver` provider so LlamaIndex's spans
            and the saga's land in one trace.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self.handler = DispatcherSpans(tracer_provider)
        self._installed = False
        self._lock = threading.Lock()

    def saga_begin(self, saga: Saga) -> None:
        if self._installed:
            return
        with self._lock:
            if not self._installed:
                get_dispatcher().add_span_handler(self.handler)
                self._installed = True

    def uninstall(self) -> None:
        """Remove the handler from LlamaIndex's root dispatcher (it is added at the first saga)."""
        with self._lock:
            handlers = get_dispatcher().span_handlers
            for index, handler in enumerate(handlers):
                if handler is self.handler:
                    del handlers[index]
                    break
            self._installed = False
