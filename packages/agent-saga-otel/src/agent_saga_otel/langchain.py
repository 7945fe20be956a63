"""LangChain runs inside a transaction: as OpenTelemetry spans, and tagged with the saga id.

:class:`LangChainLink` is an :class:`agent_saga.Observer`. While a saga runs:

* every LangChain run (chain, chat model, LLM, tool, retriever) is reported to a
  :class:`RunSpans` handler, with no change to the agent's code or config: the handler is
  registered through langchain-core's configure hook for the length of the saga. It turns each
  run into a span (parented on its parent run's span, the first one on the current span: the
  saga's or its step's), so the rollback and the model call that caused it are in one trace;
* each run carries the tag ``saga:<id>`` and LangSmith runs ``metadata["saga_id"]`` (see
  :class:`~agent_saga_otel.langsmith.LangSmithLink`).

Every span of a run gets ``agent_saga.saga.id`` (from the baggage, or from the run's metadata
when the saga id was put there, e.g. by ``agent_saga_langchain.saga_config``) and an
OpenInference span kind. A tool's span is current while the tool runs, so a step of the saga
taken in its body is its child. Message contents and tool arguments are not put on spans.
Needs ``langchain-core``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from uuid import UUID

from agent_saga import Saga
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook
from opentelemetry import baggage, context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
from opentelemetry.util.types import AttributeValue

from . import _names as n
from ._version import VERSION
from .langsmith import LangSmithLink

_ACTIVE: ContextVar[RunSpans | None] = ContextVar("agent_saga_otel_langchain", default=None)
register_configure_hook(_ACTIVE, inheritable=True)


class RunSpans(BaseCallbackHandler):
    """A LangChain callback handler that reports each run as an OpenTelemetry span.

    Each span has an OpenInference span kind (``AGENT`` for a chain named like an agent,
    ``CHAIN``, ``LLM``, ``TOOL``, ``RETRIEVER``). A model's span carries the model name and,
    when the model reports them, its token counts (GenAI and OpenInference names). A tool's
    span carries the model's tool-call id and is the current span while the tool runs, so the
    spans started in its body (the saga's step, HTTP clients) are its children.

    Usable on its own (``config={"callbacks": [RunSpans(tp)]}``); :class:`LangChainLink`
    installs one for every run inside a transaction.
    """

    run_inline = True  # called in the run's own context, so parents resolve as they should

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("agent_saga_otel.langchain", VERSION)
        self._spans: dict[UUID, Span] = {}
        self._current: dict[UUID, tuple[Context, object]] = {}
        """Tool runs' spans made current: the context attached, and its token."""

    def _start(
        self,
        name: str,
        run_type: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any] | None,
        attributes: dict[str, AttributeValue],
    ) -> Span:
        parent = self._spans.get(parent_run_id) if parent_run_id is not None else None
        ctx = context.get_current()
        if parent is not None:
            ctx = trace.set_span_in_context(parent, ctx)
        attributes = {**attributes, "langchain.run.type": run_type, "langchain.run.id": str(run_id)}
        saga_id = (metadata or {}).get(n.RUN_METADATA_KEY) or baggage.get_baggage(n.SAGA_ID)
        if isinstance(saga_id, str):
            attributes[n.SAGA_ID] = saga_id
        span = self._spans[run_id] = self._tracer.start_span(name, ctx, attributes=attributes)
        return span

    def _end(self, run_id: UUID, error: BaseException | None = None) -> Span | None:
        current = self._current.pop(run_id, None)
        if current is not None:
            _detach(*current)
        span = self._spans.pop(run_id, None)
        if span is None:
            return None
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()
        return span

    # -- chains and agents ---------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = _name(serialized, kwargs, "chain")
        attributes: dict[str, AttributeValue] = {n.OPENINFERENCE_SPAN_KIND: "CHAIN"}
        if "agent" in name.lower():
            attributes = {
                n.OPENINFERENCE_SPAN_KIND: "AGENT",
                n.GEN_AI_OPERATION_NAME: n.INVOKE_AGENT,
                n.GEN_AI_AGENT_NAME: name,
            }
        self._start(name, "chain", run_id, parent_run_id, metadata, attributes)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # -- models --------------------------------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start("chat", "chat_model", serialized, run_id, parent_run_id, metadata, kwargs)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_start(
            "text_completion", "llm", serialized, run_id, parent_run_id, metadata, kwargs
        )

    def _model_start(
        self,
        operation: str,
        run_type: str,
        serialized: dict[str, Any] | None,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any] | None,
        kwargs: dict[str, Any],
    ) -> None:
        attributes: dict[str, AttributeValue] = {
            n.GEN_AI_OPERATION_NAME: operation,
            n.OPENINFERENCE_SPAN_KIND: "LLM",
        }
        model = _model_name(metadata, kwargs.get("invocation_params"))
        if model is not None:
            attributes[n.GEN_AI_REQUEST_MODEL] = model
            attributes[n.OPENINFERENCE_MODEL_NAME] = model
        name = f"{operation} {model or _name(serialized, kwargs, run_type)}"
        self._start(name, run_type, run_id, parent_run_id, metadata, attributes)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        span = self._spans.get(run_id)
        if span is not None:
            usage = _token_usage(response)
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
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # -- tools and retrievers ------------------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        tool = _name(serialized, kwargs, "tool")
        attributes: dict[str, AttributeValue] = {
            n.GEN_AI_OPERATION_NAME: n.EXECUTE_TOOL,
            n.GEN_AI_TOOL_NAME: tool,
            n.OPENINFERENCE_SPAN_KIND: "TOOL",
            n.OPENINFERENCE_TOOL_NAME: tool,
        }
        call_id = kwargs.get("tool_call_id")
        if isinstance(call_id, str):
            attributes[n.GEN_AI_TOOL_CALL_ID] = call_id
        name = f"{n.EXECUTE_TOOL} {tool}"
        span = self._start(name, "tool", run_id, parent_run_id, metadata, attributes)
        # Current while the tool runs: LangChain runs its body in a copy of this context and
        # calls on_tool_end/on_tool_error in this one, where the token is reset.
        ctx = trace.set_span_in_context(span)
        self._current[run_id] = (ctx, context.attach(ctx))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = _name(serialized, kwargs, "retriever")
        attributes: dict[str, AttributeValue] = {
            n.GEN_AI_OPERATION_NAME: "retrieval",
            n.OPENINFERENCE_SPAN_KIND: "RETRIEVER",
        }
        self._start(f"retrieval {name}", "retriever", run_id, parent_run_id, metadata, attributes)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)


class LangChainLink(LangSmithLink):
    """While a saga runs, every LangChain run is a span and carries the saga id.

    Args:
        tracer_provider: where the runs' spans go (``None``: the global provider, never set
            here). Use the kit's :class:`~agent_saga_otel.OTelObserver` provider so runs and
            steps land in one trace.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        super().__init__()
        self.handler = RunSpans(tracer_provider)
        self._tokens: dict[str, Any] = {}

    def saga_begin(self, saga: Saga) -> None:
        super().saga_begin(saga)
        self._tokens[saga.id] = _ACTIVE.set(self.handler)

    def saga_end(self, saga: Saga, error: BaseException | None) -> None:
        token = self._tokens.pop(saga.id, None)
        if token is not None:
            _ACTIVE.reset(token)
        super().saga_end(saga, error)


def _name(serialized: dict[str, Any] | None, kwargs: dict[str, Any], default: str) -> str:
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if serialized:
        value = serialized.get("name")
        if isinstance(value, str) and value:
            return value
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return default


def _detach(attached: Context, token: object) -> None:
    # A run that ends in another context than it started in (a framework that moved it) leaves
    # that context alone: resetting a token there would fail.
    if context.get_current() is attached:
        context.detach(token)  # type: ignore[arg-type]


def _model_name(metadata: dict[str, Any] | None, params: Any) -> str | None:
    name = (metadata or {}).get("ls_model_name")
    if not (isinstance(name, str) and name) and isinstance(params, dict):
        name = params.get("model") or params.get("model_name")
    return name if isinstance(name, str) and name else None


def _token_usage(response: LLMResult) -> tuple[int, int] | None:
    """(prompt, completion) tokens as the model reported them, or ``None``."""
    prompt = completion = 0
    found = False
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
            if usage:
                prompt += int(usage.get("input_tokens", 0))
                completion += int(usage.get("output_tokens", 0))
                found = True
    if found:
        return prompt, completion
    reported = (response.llm_output or {}).get("token_usage")
    if isinstance(reported, dict) and reported:
        return int(reported.get("prompt_tokens", 0)), int(reported.get("completion_tokens", 0))
    return None
