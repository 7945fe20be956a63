"""LlamaIndex tools as saga steps, translated onto the core seam.

A ``FunctionTool`` is rebuilt around wrapped functions that keep the original signature, so an
agent still injects a ``ctx: Context`` parameter (it only does so for ``FunctionTool``s). Any other
tool is wrapped by a proxy with the same metadata. Agents turn a tool's exception into an error
output for the model; the step is recorded as failed first, which dooms the saga. A tool that
waits for a human (``ctx.wait_for_event``) raises ``WaitingForEvent`` and is re-run from the top
when the answer arrives: that is a pause, not a failure, and the re-run is the same step.

Only the model's arguments (the fields of the tool's schema) are gated and logged: the
``Context`` and ``partial_params`` (an API key bound to the tool) never are. A call whose
arguments do not bind to the function (the model left one out, or made one up) fails with a
``TypeError`` before the step begins, as the unwrapped function would: the model is told and
the saga goes on.
"""

from __future__ import annotations

import functools
import inspect
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
    declarations_for,
)
from llama_index.core.tools import BaseTool, FunctionTool, ToolMetadata, ToolOutput
from llama_index.core.tools.types import AsyncBaseTool, adapt_to_async_tool
from workflows.runtime.types.results import WaitingForEvent

KEY = "idempotency_key"
PAUSES: tuple[type[BaseException], ...] = (WaitingForEvent,)
"""How a workflow suspends a step that waits for an event (it re-runs the step later)."""


def saga_tool(
    tool: BaseTool,
    *,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    on_refusal: OnRefusal = "continue",
    idempotent: bool = False,
    redact: Iterable[str] = (),
) -> AsyncBaseTool:
    """Wrap ``tool`` so that each call inside a transaction is a gated, logged, undoable step.

    A ``FunctionTool`` comes back as a ``FunctionTool`` (context injection keeps working); other
    tools as a proxy with the same metadata. A gate refusal reaches the model as the tool's error
    output and the body does not run; ``on_refusal="rollback"`` also rolls the transaction back
    when it ends. Outside any transaction the tool runs untouched.

    ``semantics``, ``compensate``, ``probe`` and ``redact`` are as for :func:`agent_saga.tool`.
    ``idempotent``: a failed call may be retried (by the model) as the same step with the same
    key; implied for a function with an ``idempotency_key`` parameter, which then receives the
    step's key whatever the model sent.
    """
    takes_key = isinstance(tool, FunctionTool) and KEY in inspect.signature(tool.real_fn).parameters
    guard = ToolCallGuard(
        tool.metadata.get_name(),
        semantics=semantics,
        compensate=compensate,
        probe=probe,
        parameters=[*_parameters(tool.metadata), *([KEY] if takes_key else [])],
        on_refusal=on_refusal,
        pauses=PAUSES,
        idempotent=idempotent,
        redact=redact,
    )
    if isinstance(tool, FunctionTool):
        return _rebuild(tool, guard)
    return SagaToolProxy(tool, guard)


def saga_tools(
    tools: Iterable[BaseTool],
    declarations: Mapping[str, ToolDeclaration] | None = None,
    *,
    on_refusal: OnRefusal = "continue",
) -> list[AsyncBaseTool]:
    """Wrap several tools; ``declarations`` maps a tool's name to its declaration
    (``semantics``, ``compensate``, ``probe``, ``idempotent``, ``redact``).

    A tool with no declaration is IRREVERSIBLE (it needs an approval), as with ``@tool``.
    """
    tools = list(tools)
    found = declarations_for([t.metadata.get_name() for t in tools], declarations)
    return [saga_tool(t, on_refusal=on_refusal, **d) for t, d in zip(tools, found, strict=True)]


def _rebuild(tool: FunctionTool, guard: ToolCallGuard) -> FunctionTool:
    signature = inspect.signature(tool.real_fn)
    name = tool.metadata.get_name()
    model = [p for p in _parameters(tool.metadata) if p != KEY]
    takes_key = KEY in signature.parameters

    def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments; raises ``TypeError`` before any step when they do not bind."""
        try:
            named = signature.bind(*args, **{KEY: "", **kwargs} if takes_key else kwargs)
        except TypeError as exc:
            raise TypeError(f"{name}: {exc}") from None
        return {k: v for k, v in named.arguments.items() if k in model}

    def keyed(kwargs: dict[str, Any], step: StepRef | None) -> dict[str, Any]:
        return {**kwargs, KEY: step.idempotency_key} if takes_key and step else kwargs

    def refused(refusal: RefusedCall) -> Any:
        raise refusal.error()  # the agent hands the model its text as the tool's error output

    @functools.wraps(tool.real_fn)
    def sync_fn(*args: Any, **kwargs: Any) -> Any:
        out = guard.run(arguments(args, kwargs), lambda step: tool.fn(*args, **keyed(kwargs, step)))
        return refused(out) if isinstance(out, RefusedCall) else out

    @functools.wraps(tool.real_fn)
    async def async_fn(*args: Any, **kwargs: Any) -> Any:
        async def effect(step: StepRef | None) -> Any:
            return await tool.async_fn(*args, **keyed(kwargs, step))

        out = await guard.arun(arguments(args, kwargs), effect)
        return refused(out) if isinstance(out, RefusedCall) else out

    return FunctionTool(
        fn=sync_fn,
        async_fn=async_fn,
        metadata=tool.metadata,
        # The callbacks that may rewrite the output are kept as they were (private in 0.14).
        callback=tool._callback,
        async_callback=tool._async_callback,
        partial_params=tool.partial_params,
    )


class SagaToolProxy(AsyncBaseTool):
    """Any LlamaIndex tool, its calls run as saga steps; metadata is the wrapped tool's."""

    def __init__(self, inner: BaseTool, guard: ToolCallGuard) -> None:
        self.inner = inner
        self.guard = guard
        self._async = adapt_to_async_tool(inner)

    @property
    def metadata(self) -> ToolMetadata:
        return self.inner.metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        out = self.guard.run(
            _proxy_arguments(args, kwargs),
            lambda step: self.inner(*args, **kwargs),
            result_of=_raw,
            error_of=_error,
        )
        return self._refused(out, kwargs) if isinstance(out, RefusedCall) else out

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        async def effect(step: StepRef | None) -> ToolOutput:
            return await self._async.acall(*args, **kwargs)

        out = await self.guard.arun(
            _proxy_arguments(args, kwargs), effect, result_of=_raw, error_of=_error
        )
        return self._refused(out, kwargs) if isinstance(out, RefusedCall) else out

    def _refused(self, refusal: RefusedCall, kwargs: dict[str, Any]) -> ToolOutput:
        return ToolOutput(
            content=refusal.message,
            tool_name=self.metadata.get_name(),
            raw_input=kwargs,
            raw_output=refusal.message,
            is_error=True,
        )


def _parameters(metadata: ToolMetadata) -> list[str]:
    properties = metadata.get_parameters_dict().get("properties", {})
    return list(properties) if isinstance(properties, dict) else []


def _proxy_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**({"args": list(args)} if args else {}), **kwargs}


def _raw(out: ToolOutput) -> Any:
    return out.raw_output


def _error(out: ToolOutput) -> BaseException | None:
    if not out.is_error:
        return None
    return out.exception or ToolFailed(out.content)
