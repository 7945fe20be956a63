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
when the saga id was put there, e.g. by ``agent_saga_langchain.saga_config``). Message contents
and tool arguments are not put on spans. Needs ``langchain-core``.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from uuid import UUID

from agent_saga import Saga
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.tracers.context import register_configure_hook
from opentelemetry import baggage, context, trace
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from . import _names as n
from ._version import VERSION
from .langsmith import LangSmithLink

_ACTIVE: ContextVar[RunSpans | None] = ContextVar("agent_saga_otel_langchain", default=None)
register_configure_hook(_ACTIVE, inheritable=True)


class RunSpans(BaseCallbackHandler):
    """A LangChain callback handler that reports each run as an OpenTelemetry span.

    Usable on its own (``config={"callbacks": [RunSpans(tp)]}``); :class:`LangChainLink`
    installs one for every run inside a transaction.
    """

    run_inline = True  # called in the run's own context, so parents resolve as they should

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        provider = tracer_provider or trace.get_tracer_provider()
        self._tracer = provider.get_tracer("agent_saga_otel.langchain", VERSION)
        self._spans: dict[UUID, Span] = {}

    def _start(
        self,
        name: str,
        run_type: str,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: dict[str, Any] | None,
        attributes: dict[str, str],
    ) -> None:
        parent = self._spans.get(parent_run_id) if parent_run_id is not None else None
        ctx = context.get_current()
        if parent is not None:
            ctx = trace.set_span_in_context(parent, ctx)
        attributes = {**attributes, "langchain.run.type": run_type, "langchain.run.id": str(run_id)}
        saga_id = (metadata or {}).get(n.RUN_METADATA_KEY) or baggage.get_baggage(n.SAGA_ID)
        if isinstance(saga_id, str):
            attributes[n.SAGA_ID] = saga_id
        self._spans[run_id] = self._tracer.start_span(name, ctx, attributes=attributes)

    def _end(self, run_id: UUID, error: BaseException | None = None) -> None:
        span = self._spans.pop(run_id, None)
        if span is None:
            return
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    # -- chains --------------------------------------------------------------------------------

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
        self._start(name, "chain", run_id, parent_run_id, metadata, {})

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
        model = _name(serialized, kwargs, "chat_model")
        attributes = {n.GEN_AI_OPERATION_NAME: "chat"}
        self._start(f"chat {model}", "chat_model", run_id, parent_run_id, metadata, attributes)

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
        model = _name(serialized, kwargs, "llm")
        attributes = {n.GEN_AI_OPERATION_NAME: "text_completion"}
        self._start(f"text_completion {model}", "llm", run_id, parent_run_id, metadata, attributes)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
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
        attributes = {n.GEN_AI_OPERATION_NAME: n.EXECUTE_TOOL, n.GEN_AI_TOOL_NAME: tool}
        call_id = kwargs.get("tool_call_id")
        if isinstance(call_id, str):
            attributes[n.GEN_AI_TOOL_CALL_ID] = call_id
        name = f"{n.EXECUTE_TOOL} {tool}"
        self._start(name, "tool", run_id, parent_run_id, metadata, attributes)

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
        attributes = {n.GEN_AI_OPERATION_NAME: "retrieval"}
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
