"""LangChain tools as saga steps: a proxy ``BaseTool`` that translates onto the core seam.

The proxy overrides ``invoke``/``ainvoke`` and calls the wrapped tool's own ``invoke``/``ainvoke``
inside the step, so the wrapped tool keeps its validation, error handling and callbacks, and its
tool run is the only one reported (callbacks fire once). Name, description and argument schema
are the wrapped tool's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent_saga import (
    OnRefusal,
    RefusedCall,
    Semantics,
    StepRef,
    ToolCallGuard,
    ToolDeclaration,
    ToolFailed,
    current_saga,
    declarations_for,
)
from langchain_core.messages import ToolCall, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.tools.base import ArgsSchema
from langchain_core.utils.pydantic import TypeBaseModel
from pydantic import ConfigDict

from ._config import saga_config


class SagaTool(BaseTool):
    """A LangChain tool whose calls are steps of the current saga (untouched outside one).

    A gate refusal answers a tool call with an error ``ToolMessage`` the model can act on
    (plain-argument calls raise :class:`agent_saga.GateRefused`). A call whose wrapped tool
    raises, or answers with an error ``ToolMessage`` (``handle_tool_error``), is recorded as
    failed and dooms the saga: its transaction rolls back when it ends.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    guard: ToolCallGuard

    def __init__(self, inner: BaseTool, guard: ToolCallGuard) -> None:
        super().__init__(
            name=inner.name,
            description=inner.description,
            args_schema=inner.args_schema,
            return_direct=inner.return_direct,
            response_format=inner.response_format,
            extras=inner.extras,
            inner=inner,
            guard=guard,
        )

    # The schema is the wrapped tool's even when it has no args_schema and derives one from its
    # own _run signature (the proxy's _run would give a different one).
    @property
    def args(self) -> dict[str, Any]:
        return self.inner.args

    @property
    def tool_call_schema(self) -> ArgsSchema:
        return self.inner.tool_call_schema

    @property
    def is_single_input(self) -> bool:
        return self.inner.is_single_input

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.inner.get_input_schema(config)

    def invoke(
        self,
        input: str | dict[str, Any] | ToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        def effect(step: StepRef | None) -> Any:
            return self.inner.invoke(input, _step_config(config, step), **kwargs)

        out = self.guard.run(_arguments(input), effect, result_of=_result, error_of=_error)
        return self._refused(input, out) if isinstance(out, RefusedCall) else out

    async def ainvoke(
        self,
        input: str | dict[str, Any] | ToolCall,
        config: RunnableConfig | None = None,
        **kwargs: Any,
    ) -> Any:
        async def effect(step: StepRef | None) -> Any:
            return await self.inner.ainvoke(input, _step_config(config, step), **kwargs)

        out = await self.guard.arun(_arguments(input), effect, result_of=_result, error_of=_error)
        return self._refused(input, out) if isinstance(out, RefusedCall) else out

    def _refused(self, input: str | dict[str, Any] | ToolCall, refusal: RefusedCall) -> ToolMessage:
        if isinstance(input, dict) and input.get("type") == "tool_call":
            return ToolMessage(
                content=refusal.message,
                tool_call_id=str(input.get("id")),
                name=self.name,
                status="error",
            )
        raise refusal.error()

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("call invoke() or ainvoke(): they run the call as a saga step")


def saga_tool(
    tool: BaseTool,
    *,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    on_refusal: OnRefusal = "continue",
) -> SagaTool:
    """Wrap ``tool`` so that each call inside a transaction is a gated, logged, undoable step.

    Args:
        semantics, compensate, probe: as for :func:`agent_saga.tool`; a compensator may take
            any of the tool's arguments by name, ``result`` (the tool's output, or its artifact
            when it has one) and ``idempotency_key``.
        on_refusal: ``"continue"`` (the model is told and the transaction goes on) or
            ``"rollback"`` (the model is told and the transaction rolls back when it ends).
    """
    guard = ToolCallGuard(
        tool.name,
        semantics=semantics,
        compensate=compensate,
        probe=probe,
        parameters=list(tool.args),
        on_refusal=on_refusal,
    )
    return SagaTool(tool, guard)


def saga_tools(
    tools: Iterable[BaseTool],
    declarations: Mapping[str, ToolDeclaration] | None = None,
    *,
    on_refusal: OnRefusal = "continue",
) -> list[SagaTool]:
    """Wrap several tools; ``declarations`` maps a tool's name to its semantics/compensation.

    A tool with no declaration is IRREVERSIBLE (it needs an approval), as with ``@tool``.
    """
    tools = list(tools)
    found = declarations_for([t.name for t in tools], declarations)
    return [saga_tool(t, on_refusal=on_refusal, **d) for t, d in zip(tools, found, strict=True)]


def _arguments(input: str | dict[str, Any] | ToolCall) -> dict[str, Any]:
    if isinstance(input, dict):
        args = input.get("args", {}) if input.get("type") == "tool_call" else input
        return dict(args) if isinstance(args, Mapping) else {"input": args}
    return {"input": input}


def _step_config(config: RunnableConfig | None, step: StepRef | None) -> RunnableConfig | None:
    saga = current_saga()
    if step is None or saga is None:
        return config
    merged = saga_config(saga.id, config)
    metadata = dict(merged.get("metadata") or {})
    metadata.update({"saga_step": step.ordinal, "idempotency_key": step.idempotency_key})
    merged["metadata"] = metadata
    return merged


def _result(out: Any) -> Any:
    if isinstance(out, ToolMessage):
        return out.artifact if out.artifact is not None else out.content
    return out


def _error(out: Any) -> BaseException | None:
    if isinstance(out, ToolMessage) and out.status == "error":
        return ToolFailed(str(out.content))
    return None
