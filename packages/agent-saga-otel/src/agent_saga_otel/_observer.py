"""Sagas, steps, gate refusals and compensations as OpenTelemetry spans.

Span tree of one transaction (names follow the GenAI conventions, ``<op> <target>``)::

    invoke_workflow <saga name>          the saga; current for the whole transaction
      execute_tool <tool>                one per step, current while the step is logged and runs
                                         (the child of the framework's tool span when that span
                                         is current: its gen_ai.tool.call.id is copied)
        gate.refused <tool>              when the gate refused the step (the step span ends too)
                                     (approvals requested and decided: events on the step)
      compensate <tool>                  one per compensation, newest step first

Every one of these spans carries ``agent_saga.saga.id``. While the saga runs, its id is also in
the current context's baggage, so :class:`~agent_saga_otel.SagaIdSpanProcessor` can copy it onto
spans that frameworks start inside the transaction.

Only the API is used: spans go to the ``tracer_provider`` given (or to the global one at the
time a span starts, never installed here). Tool arguments and results are not put on spans:
they may hold what ``redact=`` keeps out of the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from agent_saga import GateRefused, HaltedError, Observer, Saga, Semantics, StepRef
from opentelemetry import baggage, context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from . import _names as n
from ._version import VERSION

if TYPE_CHECKING:
    from opentelemetry.context import Context


_SAGA_ID, _OPERATION, _EXECUTE_TOOL = n.SAGA_ID, n.GEN_AI_OPERATION_NAME, n.EXECUTE_TOOL
_TOOL_NAME, _TOOL_CALL_ID, _KEY = n.GEN_AI_TOOL_NAME, n.GEN_AI_TOOL_CALL_ID, n.IDEMPOTENCY_KEY
_ORDINAL, _SEMANTICS = n.STEP_ORDINAL, n.STEP_SEMANTICS
_SEMANTICS_TEXT = {s: s.value for s in Semantics}
_INTERNAL = SpanKind.INTERNAL


class OTelObserver(Observer):
    """An :class:`agent_saga.Observer` that turns a kit's sagas into spans.

    Args:
        tracer_provider: where spans go; ``None`` means the global provider (looked up when a
            span starts, so one set later is honoured). This never sets the global provider.
        openinference: also set OpenInference attributes (``openinference.span.kind``,
            ``tool.name``), as Phoenix shows them.
        step_details: also put the step's ordinal and semantics (``agent_saga.step.ordinal``,
            ``agent_saga.step.semantics``) on each step span. Off by default: a step span is
            the hot path, each attribute costs the SDK about a microsecond per step, and both
            are in the log, one join away through ``agent_saga.step.idempotency_key``.
            Compensation and gate spans always carry the ordinal.

    A step span carries the saga id, ``gen_ai.operation.name``, ``gen_ai.tool.name`` and the
    step's idempotency key (``agent_saga.step.idempotency_key``). When the step runs inside a
    framework's tool span that is current (as :class:`~agent_saga_otel.langchain.RunSpans` and
    :class:`~agent_saga_otel.llamaindex.DispatcherSpans` make theirs), the step span is its
    child and also carries that span's ``gen_ai.tool.call.id``: the model's id of the call.

    Register it with ``AgentKit(observers=[OTelObserver(tp)])`` or ``kit.observe(...)``.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        openinference: bool = False,
        step_details: bool = False,
    ) -> None:
        if tracer_provider is None:
            self._tracer = trace.get_tracer(n.OWN_SCOPE, VERSION)
        else:
            self._tracer = tracer_provider.get_tracer(n.OWN_SCOPE, VERSION)
        self._openinference = openinference
        self._step_details = step_details
        self._ids: ContextVar[Mapping[str, str] | None] = ContextVar(
            "agent_saga_otel_ids", default=None
        )
        """The ids of this observer's innermost open span in the current context, formatted
        once when it opens: what the records written under it keep (see :meth:`trace_ids`)."""
        self._last_trace: tuple[int, str] = (0, "")
        """The last trace id formatted, and its text."""
        self._open: dict[tuple[str, int, str], tuple[Span, object, Token[Any]]] = {}
        """Open spans by (saga id, ordinal, role) with the tokens that made them current (a
        dict's single set and pop are atomic: steps of one saga may run in several threads)."""

    # -- spans kept open between two events ----------------------------------------------------

    def _push(self, key: tuple[str, int, str], span: Span, ctx: Context) -> None:
        span_context = span.get_span_context()
        trace_id = span_context.trace_id  # 0 for the API's invalid context (no SDK)
        ids = None
        if trace_id and span_context.span_id:
            last_id, trace_hex = self._last_trace  # a saga's spans share one trace
            if last_id != trace_id:
                trace_hex = "%032x" % trace_id  # noqa: UP031 - the fastest form
                self._last_trace = (trace_id, trace_hex)
            ids = {"trace_id": trace_hex, "span_id": "%016x" % span_context.span_id}  # noqa: UP031
        token = context.attach(trace.set_span_in_context(span, ctx))
        self._open[key] = (span, token, self._ids.set(ids))

    def _pop(self, key: tuple[str, int, str]) -> Span | None:
        entry = self._open.pop(key, None)
        if entry is None:
            return None
        span, token, ids_token = entry
        # Both tokens belong to the context that opened the span; where a span ends in another
        # one (a step gated in a worker thread), the context that opened it is left as it is.
        try:  # noqa: SIM105 - contextlib.suppress costs more than the reset, on every step
            self._ids.reset(ids_token)
        except ValueError:
            pass
        context.detach(token)  # type: ignore[arg-type]
        return span

    # -- the saga ------------------------------------------------------------------------------

    def saga_begin(self, saga: Saga) -> None:
        ctx = baggage.set_baggage(n.SAGA_ID, saga.id)
        attributes: dict[str, str] = {
            n.SAGA_ID: saga.id,
            n.SAGA_NAME: saga.name,
            n.GEN_AI_OPERATION_NAME: n.INVOKE_WORKFLOW,
            n.GEN_AI_WORKFLOW_NAME: saga.name,
        }
        if self._openinference:
            attributes[n.OPENINFERENCE_SPAN_KIND] = "CHAIN"
            attributes[n.OPENINFERENCE_SESSION_ID] = saga.id
        span = self._tracer.start_span(
            f"{n.INVOKE_WORKFLOW} {saga.name}", ctx, SpanKind.INTERNAL, attributes
        )
        self._push((saga.id, 0, "saga"), span, ctx)

    def saga_end(self, saga: Saga, error: BaseException | None) -> None:
        span = self._pop((saga.id, 0, "saga"))
        if span is None:
            return
        span.set_attribute(n.SAGA_STATUS, saga.status.value)
        if error is not None:
            _failed(span, error, f"{saga.status.value}: ")
        span.end()

    # -- steps ---------------------------------------------------------------------------------

    def step_begin(self, saga: Saga, step: StepRef, semantics: Semantics) -> None:
        # The hottest event: names are module constants here, not attribute lookups.
        tool = step.tool
        attributes: dict[str, str | int] = {
            _SAGA_ID: saga.id,
            _OPERATION: _EXECUTE_TOOL,
            _TOOL_NAME: tool,
            _KEY: step.idempotency_key,
        }
        ctx = context.get_current()
        # Inside a framework's tool span (made current by its instrumentation): the step is its
        # child, and carries the model's id of the call when that span has it. Reading a live
        # SDK span's attributes copies them (about 4 us): the saga's own span is skipped.
        parent = trace.get_current_span(ctx)
        saga_entry = self._open.get((saga.id, 0, "saga"))
        if saga_entry is None or parent is not saga_entry[0]:
            framework = getattr(parent, "attributes", None)
            call_id = framework.get(_TOOL_CALL_ID) if framework else None
            if call_id is not None:
                attributes[_TOOL_CALL_ID] = call_id
        if self._step_details:
            attributes[_ORDINAL] = step.ordinal
            attributes[_SEMANTICS] = _SEMANTICS_TEXT[semantics]
        if self._openinference:
            attributes[n.OPENINFERENCE_SPAN_KIND] = "TOOL"
            attributes[n.OPENINFERENCE_TOOL_NAME] = tool
        span = self._tracer.start_span(f"{_EXECUTE_TOOL} {tool}", ctx, _INTERNAL, attributes)
        self._push((saga.id, step.ordinal, "step"), span, ctx)

    def step_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        span = self._pop((saga.id, step.ordinal, "step"))
        if span is None:
            return
        # A step that took effect gets no outcome attribute and an unset status (a span's
        # attribute write takes a lock: the common path skips it).
        if error is not None:
            refused = isinstance(error, (GateRefused, HaltedError))
            span.set_attribute(n.STEP_OUTCOME, "refused" if refused else "failed")
            _failed(span, error, "refused: " if refused else "")
        span.end()

    def gate_refused(self, saga: Saga, step: StepRef, rule: str, reason: str) -> None:
        attributes: dict[str, str | int] = {
            n.SAGA_ID: saga.id,
            n.GEN_AI_TOOL_NAME: step.tool,
            n.STEP_ORDINAL: step.ordinal,
            n.GATE_RULE: rule,
            n.GATE_REASON: reason,
        }
        if self._openinference:
            attributes[n.OPENINFERENCE_SPAN_KIND] = "GUARDRAIL"
        span = self._tracer.start_span(f"gate.refused {step.tool}", None, attributes=attributes)
        span.set_status(Status(StatusCode.ERROR, f"{rule}: {reason}"))
        span.end()

    # -- approvals: events on the waiting step's span ------------------------------------------

    def approval_requested(self, saga: Saga, step: StepRef, reason: str) -> None:
        entry = self._open.get((saga.id, step.ordinal, "step"))
        if entry is not None:
            entry[0].add_event("agent_saga.approval.requested", {n.APPROVAL_REASON: reason})

    def approval_decided(
        self, saga: Saga, step: StepRef, outcome: str, approvers: tuple[str, ...]
    ) -> None:
        entry = self._open.get((saga.id, step.ordinal, "step"))
        if entry is not None:
            attributes = {n.APPROVAL_OUTCOME: outcome, n.APPROVAL_APPROVERS: list(approvers)}
            entry[0].add_event("agent_saga.approval.decided", attributes)

    # -- compensations -------------------------------------------------------------------------

    def compensation_begin(self, saga: Saga, step: StepRef) -> None:
        attributes: dict[str, str | int] = {
            n.SAGA_ID: saga.id,
            n.COMPENSATED_TOOL: step.tool,
            n.STEP_ORDINAL: step.ordinal,
            n.IDEMPOTENCY_KEY: f"{step.idempotency_key}/compensate",
        }
        if self._openinference:
            attributes[n.OPENINFERENCE_SPAN_KIND] = "TOOL"
            attributes[n.OPENINFERENCE_TOOL_NAME] = f"compensate {step.tool}"
        ctx = context.get_current()
        span = self._tracer.start_span(f"compensate {step.tool}", ctx, attributes=attributes)
        self._push((saga.id, step.ordinal, "compensation"), span, ctx)

    def compensation_end(self, saga: Saga, step: StepRef, error: BaseException | None) -> None:
        span = self._pop((saga.id, step.ordinal, "compensation"))
        if span is None:
            return
        span.set_attribute(n.COMPENSATION_OUTCOME, "done" if error is None else "failed")
        if error is not None:
            _failed(span, error, "")
        span.end()

    # -- the log's link to the trace -----------------------------------------------------------

    def trace_ids(self) -> Mapping[str, str] | None:
        """The ids of the saga's, step's or compensation's span open in this context: records
        keep the span of the step that wrote them, even when a framework made another span
        current meanwhile. ``None`` when spans are not recorded (no SDK provider)."""
        return self._ids.get()


def _failed(span: Span, error: BaseException, prefix: str) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{prefix}{type(error).__name__}: {error}"))
