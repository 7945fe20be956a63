"""LlamaIndex's own spans inside a transaction, as OpenTelemetry spans carrying the saga id.

LlamaIndex reports its work (agent steps, LLM calls, tool calls) to span handlers of its
instrumentation dispatcher, not to OpenTelemetry. :class:`LlamaIndexLink` is an
:class:`agent_saga.Observer`: at the first saga it sees, it adds one :class:`DispatcherSpans`
handler to LlamaIndex's root dispatcher (constructing the link changes nothing). The handler
turns each LlamaIndex span started inside a transaction (the saga id is in the current
context's baggage) into an OpenTelemetry span with ``agent_saga.saga.id`` and an OpenInference
span kind, parented on its LlamaIndex parent's span, the first one on the current span (the
saga's or its step's). A tool's span is current while the tool runs, so a step of the saga
taken in its body is its child. Outside transactions it does nothing. Arguments and results
are not put on spans. Needs ``llama-index-core``.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from agent_saga import Observer, Saga
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.tools.types import BaseTool
from llama_index_instrumentation import get_dispatcher
from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue
from pydantic import PrivateAttr

from . import _names as n
from ._version import VERSION


class DispatcherSpans(BaseSpanHandler[Any]):
    """A LlamaIndex span handler that mirrors the spans of transactions into OpenTelemetry.

    Each span gets an OpenInference span kind: ``TOOL`` for a tool's call (the current span
    while the tool runs, with the model's tool-call id when the agent's ``call_tool`` step
    gave one), ``LLM`` for a model's (with its model name, and token counts when the model
    reports them), ``AGENT`` for an agent's run, ``CHAIN`` for the rest.
    """

    _tracer: Tracer = PrivateAttr()
    _spans: dict[str, Span] = PrivateAttr(default_factory=dict)
    _current: dict[str, tuple[Context, object]] = PrivateAttr(default_factory=dict)
    _call_ids: dict[str, str] = PrivateAttr(default_factory=dict)

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
        attributes: dict[str, AttributeValue] = {n.SAGA_ID: saga_id, "llama_index.span.id": id_}
        call_id = _call_id(bound_args) or self._call_ids.get(parent_span_id or "")
        if call_id is not None:
            self._call_ids[id_] = call_id
            attributes[n.GEN_AI_TOOL_CALL_ID] = call_id
        attributes.update(_kind(instance, name))
        span = self._spans[id_] = self._tracer.start_span(name, ctx, attributes=attributes)
        if attributes[n.OPENINFERENCE_SPAN_KIND] == "TOOL":
            # Current while the tool runs (the dispatcher ends the span in the same context).
            current = trace.set_span_in_context(span)
            self._current[id_] = (current, context.attach(current))

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> None:
        span = self._close(id_)
        if span is not None:
            usage = _token_usage(result)
            if usage is not None:
                prompt, completion = usage
                span.set_attributes(
                    {
                        n.GEN_AI_USAGE_INPUT_TOKENS: prompt,
                        n.GEN_AI_USAGE_OUTPUT_TOKENS: completion,
                        n.OPENINFERENCE_PROMPT_TOKENS: prompt,
                        n.OPENINFERENCE_COMPLETION_TOKENS: completion,
                        n.OPENINFERENCE_TOTAL_TOKENS: prompt + completion,
                    }
                )
            span.end()

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> None:
        span = self._close(id_)
        if span is None:
            return
        if err is not None:
            span.record_exception(err)
            span.set_status(Status(StatusCode.ERROR, f"{type(err).__name__}: {err}"))
        span.end()

    def _close(self, id_: str) -> Span | None:
        current = self._current.pop(id_, None)
        if current is not None and context.get_current() is current[0]:
            context.detach(current[1])  # type: ignore[arg-type]
        self._call_ids.pop(id_, None)
        return self._spans.pop(id_, None)


def _kind(instance: Any | None, name: str) -> dict[str, AttributeValue]:
    if isinstance(instance, BaseTool):
        tool = instance.metadata.get_name()
        return {
            n.OPENINFERENCE_SPAN_KIND: "TOOL",
            n.OPENINFERENCE_TOOL_NAME: tool,
            n.GEN_AI_OPERATION_NAME: n.EXECUTE_TOOL,
            n.GEN_AI_TOOL_NAME: tool,
        }
    if isinstance(instance, BaseLLM):
        kind: dict[str, AttributeValue] = {n.OPENINFERENCE_SPAN_KIND: "LLM"}
        model = getattr(instance.metadata, "model_name", None)
        if isinstance(model, str) and model and model != "unknown":
            kind[n.GEN_AI_REQUEST_MODEL] = model
            kind[n.OPENINFERENCE_MODEL_NAME] = model
        return kind
    if instance is not None and "Agent" in type(instance).__name__:
        agent = getattr(instance, "name", None)
        kind = {n.OPENINFERENCE_SPAN_KIND: "AGENT", n.GEN_AI_OPERATION_NAME: n.INVOKE_AGENT}
        if isinstance(agent, str) and agent:
            kind[n.GEN_AI_AGENT_NAME] = agent
        return kind
    return {n.OPENINFERENCE_SPAN_KIND: "CHAIN"}


def _call_id(bound_args: inspect.BoundArguments) -> str | None:
    """The model's tool-call id of an agent's ``call_tool`` step (its ``ToolCall`` event)."""
    event = bound_args.arguments.get("ev")
    call_id = getattr(event, "tool_id", None)
    return call_id if isinstance(call_id, str) and call_id else None


def _token_usage(result: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens from a model's response, when it reports them."""
    reported = getattr(result, "additional_kwargs", None)
    if not isinstance(reported, dict):
        return None
    prompt, completion = reported.get("prompt_tokens"), reported.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int):
        return prompt, completion
    return None


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
