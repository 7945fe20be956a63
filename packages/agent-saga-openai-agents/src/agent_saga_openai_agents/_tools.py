"""OpenAI Agents SDK function tools as saga steps, translated onto the core seam.

The wrapped tool is a copy of the original (same name, schema, guardrails, timeouts) with:

* one more tool input guardrail, last in the list: it gates the call and logs its intent. A
  refusal becomes the guardrail's ``reject_content`` (the model gets the reason, the body never
  runs, the outcome is in ``result.tool_input_guardrail_results``); a halt raises the guardrail's
  tripwire, which stops the run;
* an ``on_invoke_tool`` that runs the original's invoker as the step. The original is copied so
  that it raises instead of answering a failure with text: the step is recorded as failed (which
  dooms the saga) and only then is the failure given to the model, as the original's own
  failure policy words it;
* ``needs_approval`` for IRREVERSIBLE tools inside a transaction, so the run is interrupted for
  the application's human before the gate is asked (outside any transaction the tool runs
  untouched, as every wrapped tool does). That approval is not an agent-saga vote unless the
  application says who gave it (:func:`agent_saga_openai_agents.approve`): on resume the gate
  still requires agent-saga's own approval (or refuses when none is set up).

The SDK refuses a call's arguments (invalid JSON, a schema mismatch) with ``ModelBehaviorError``
before the tool's function runs; the step is then logged refused (rule ``arguments``), nothing
is doomed, and the model gets the SDK's own error text. With
``ToolExecutionConfig(pre_approval_tool_input_guardrails=True)`` the guardrail runs once before
the human is asked: the gate is not asked then (no step begins for a call that may be rejected)
but when the approved call is about to run.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from agent_saga import (
    OnRefusal,
    PendingCall,
    RefusedCall,
    Semantics,
    StepRef,
    ToolCallGuard,
    ToolDeclaration,
    current_saga,
    declarations_for,
)
from agents import (
    FunctionTool,
    ModelBehaviorError,
    RunContextWrapper,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)
from agents.tool import maybe_invoke_function_tool_failure_error_function
from agents.tool_context import ToolContext

from ._approvals import CALL_ID

GUARDRAIL_NAME = "agent_saga_gate"


class _Gated:
    """Calls the guardrail let through, by saga and tool call id, until the tool runs."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], PendingCall] = {}
        self._lock = threading.Lock()

    def put(self, call_id: str, pending: PendingCall) -> None:
        with self._lock:
            self._calls[(pending.saga.id, call_id)] = pending

    def take(self, call_id: str) -> PendingCall | None:
        saga = current_saga()
        if saga is None:
            return None
        with self._lock:
            return self._calls.pop((saga.id, call_id), None)


def saga_tool(
    tool: FunctionTool,
    *,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    on_refusal: OnRefusal = "continue",
    idempotent: bool = False,
    redact: Iterable[str] = (),
) -> FunctionTool:
    """Wrap ``tool`` so that each call inside a transaction is a gated, logged, undoable step.

    Args:
        semantics, compensate, probe, redact: as for :func:`agent_saga.tool`; a compensator may
            take any of the tool's arguments by name, ``result`` (what the tool returned) and
            ``idempotency_key``.
        on_refusal: ``"continue"`` (the model is told and the run goes on) or ``"rollback"``
            (the model is told and the transaction rolls back when it ends).
        idempotent: a failed call may be retried (the model calls it again with the same
            arguments) as the same step with the same key; the saga rolls back only if no
            retry succeeds.
    """
    properties = tool.params_json_schema.get("properties", {})
    guard = ToolCallGuard(
        tool.name,
        semantics=semantics,
        compensate=compensate,
        probe=probe,
        parameters=list(properties) if isinstance(properties, dict) else [],
        on_refusal=on_refusal,
        idempotent=idempotent,
        redact=redact,
        invalid_call=(ModelBehaviorError,),
    )
    gated = _Gated()
    # A tool made by @function_tool answers its own failures with text; its copy raises them.
    handles_failures = callable(getattr(tool.on_invoke_tool, "__agents_bind_function_tool__", None))
    raising = (
        dataclasses.replace(
            tool, _failure_error_function=None, _use_default_failure_error_function=False
        )
        if handles_failures
        else tool
    )

    needs_approval = _needs_approval(guard, tool)

    async def gate(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        arguments = _arguments(context.tool_arguments)
        if await _before_approval(context, tool.name, needs_approval, arguments):
            return ToolGuardrailFunctionOutput.allow(output_info={"agent_saga": "after approval"})
        token = CALL_ID.set(context.tool_call_id)
        try:
            pending = await guard.abegin(arguments)
        finally:
            CALL_ID.reset(token)
        if pending is None:
            return ToolGuardrailFunctionOutput.allow()
        if isinstance(pending, RefusedCall):
            info = {"rule": pending.rule, "reason": pending.reason}
            if pending.halted:
                return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
            return ToolGuardrailFunctionOutput.reject_content(pending.message, output_info=info)
        gated.put(context.tool_call_id, pending)
        return ToolGuardrailFunctionOutput.allow(output_info={"saga_step": pending.step.ordinal})

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        pending = gated.take(context.tool_call_id)
        if pending is None:  # called without the guardrails (directly, or outside a saga)
            began = await guard.abegin(_arguments(arguments))
            if began is None:
                return await tool.on_invoke_tool(context, arguments)
            if isinstance(began, RefusedCall):
                return began.message
            pending = began

        async def effect(step: StepRef | None) -> Any:
            return await raising.on_invoke_tool(context, arguments)

        try:
            return await pending.arun(effect)
        except Exception as exc:
            if not handles_failures:
                raise
            text = await maybe_invoke_function_tool_failure_error_function(
                function_tool=tool, context=context, error=exc
            )
            if text is None:
                raise
            return text

    return dataclasses.replace(
        tool,
        on_invoke_tool=invoke,
        tool_input_guardrails=[
            *(tool.tool_input_guardrails or []),
            ToolInputGuardrail(guardrail_function=gate, name=GUARDRAIL_NAME),
        ],
        needs_approval=needs_approval,
    )


def saga_tools(
    tools: Iterable[FunctionTool],
    declarations: Mapping[str, ToolDeclaration] | None = None,
    *,
    on_refusal: OnRefusal = "continue",
) -> list[FunctionTool]:
    """Wrap several tools; ``declarations`` maps a tool's name to its declaration
    (``semantics``, ``compensate``, ``probe``, ``idempotent``, ``redact``).

    A tool with no declaration is IRREVERSIBLE (it needs an approval), as with ``@tool``.
    """
    tools = list(tools)
    found = declarations_for([t.name for t in tools], declarations)
    return [saga_tool(t, on_refusal=on_refusal, **d) for t, d in zip(tools, found, strict=True)]


def _arguments(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


NeedsApproval = Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]


def _needs_approval(guard: ToolCallGuard, tool: FunctionTool) -> bool | NeedsApproval:
    """The wrapped tool's ``needs_approval``: an IRREVERSIBLE one asks inside a transaction
    only (outside any, a wrapped tool runs untouched); otherwise the tool's own setting."""
    original = tool.needs_approval
    if guard.semantics is not Semantics.IRREVERSIBLE:
        return original

    async def needs(context: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        if current_saga() is not None:
            return True
        return await _ask(original, context, params, call_id)

    return needs


async def _ask(
    needs: bool | Callable[..., Any], context: Any, params: dict[str, Any], call_id: str
) -> bool:
    if not callable(needs):
        return bool(needs)
    answer = needs(context, params, call_id)
    return bool(await answer if inspect.isawaitable(answer) else answer)


async def _before_approval(
    context: ToolContext[Any],
    name: str,
    needs: bool | Callable[..., Any],
    arguments: dict[str, Any],
) -> bool:
    """Whether this guardrail run is the one before the human is asked
    (``pre_approval_tool_input_guardrails``): the call may yet be rejected, so no step begins."""
    execution = getattr(getattr(context, "run_config", None), "tool_execution", None)
    if execution is None or not execution.pre_approval_tool_input_guardrails:
        return False
    if context.is_tool_approved(name, context.tool_call_id) is not None:
        return False  # decided: this run is the one before the call
    return await _ask(needs, context, arguments, context.tool_call_id)
