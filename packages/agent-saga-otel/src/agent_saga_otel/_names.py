"""Attribute and baggage names: agent-saga's own, and the GenAI semantic conventions we set.

The GenAI names are spelled out rather than imported: they live only in the incubating module
of ``opentelemetry-semantic-conventions``, which this package does not depend on (a test checks
that they match it).
"""

from __future__ import annotations

OWN_SCOPE = "agent_saga_otel"
"""The instrumentation scope of :class:`~agent_saga_otel.OTelObserver`'s spans."""
SAGA_ID = "agent_saga.saga.id"
"""The saga id: on every span of a transaction, and the baggage key that carries it."""
SAGA_NAME = "agent_saga.saga.name"
SAGA_STATUS = "agent_saga.saga.status"
STEP_ORDINAL = "agent_saga.step.ordinal"
STEP_SEMANTICS = "agent_saga.step.semantics"
STEP_OUTCOME = "agent_saga.step.outcome"
"""``failed`` or ``refused`` (with an error status); absent when the step took effect."""
IDEMPOTENCY_KEY = "agent_saga.step.idempotency_key"
"""The step's idempotency key (``as1-...``): joins a step span to its records in the log."""
GATE_RULE = "agent_saga.gate.rule"
GATE_REASON = "agent_saga.gate.reason"
APPROVAL_REASON = "agent_saga.approval.reason"
APPROVAL_OUTCOME = "agent_saga.approval.outcome"
"""``approved``, ``denied``, ``expired`` or ``arguments_changed``."""
APPROVAL_APPROVERS = "agent_saga.approval.approvers"
COMPENSATED_TOOL = "agent_saga.compensation.tool"
COMPENSATION_OUTCOME = "agent_saga.compensation.outcome"
"""``done`` or ``failed``."""

GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
"""The model's id of the tool call (``call_1``), when the framework's tool span carries it."""
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_WORKFLOW_NAME = "gen_ai.workflow.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
EXECUTE_TOOL = "execute_tool"
INVOKE_WORKFLOW = "invoke_workflow"
INVOKE_AGENT = "invoke_agent"

OPENINFERENCE_SPAN_KIND = "openinference.span.kind"
OPENINFERENCE_TOOL_NAME = "tool.name"
OPENINFERENCE_SESSION_ID = "session.id"
OPENINFERENCE_MODEL_NAME = "llm.model_name"
OPENINFERENCE_PROMPT_TOKENS = "llm.token_count.prompt"
OPENINFERENCE_COMPLETION_TOKENS = "llm.token_count.completion"
OPENINFERENCE_TOTAL_TOKENS = "llm.token_count.total"
"""OpenInference's names, which Phoenix reads for its span kinds, model and token columns."""

RUN_METADATA_KEY = "saga_id"
"""The key of the saga id in LangChain / LangSmith run metadata (also a ``saga:<id>`` tag)."""


def saga_tag(saga_id: str) -> str:
    """The run tag that names a saga: ``saga:<id>``."""
    return f"saga:{saga_id}"
