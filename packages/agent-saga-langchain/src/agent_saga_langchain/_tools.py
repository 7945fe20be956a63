"""LangChain tools as saga steps: a proxy ``BaseTool`` that translates onto the core seam.

The proxy is a ``BaseTool`` with the wrapped tool's name, description, schemas and error
settings, so LangChain's own ``run``/``arun`` (and ``invoke``, ``ainvoke``, LangGraph's
``ToolNode``, a classic ``AgentExecutor``) do for it what they do for the wrapped tool: fire
the callbacks once, validate the arguments, inject ``InjectedToolArg``/``InjectedState``/
``InjectedStore``/``ToolRuntime`` values, and turn errors into messages. Only the body runs as
the step: the proxy's ``_run``/``_arun`` gate the model's arguments (never the injected ones),
then call the wrapped tool's own ``_run``/``_arun``. So a call the framework refuses before the
body (a pydantic ``ValidationError``) never reaches the saga, and the log and the compensator
see the body's own return value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any

from agent_saga import (
    OnRefusal,
    RefusedCall,
    Semantics,
    SpeculationError,
    StepRef,
    ToolCallGuard,
    ToolDeclaration,
    current_saga,
    declarations_for,
)
from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig, ensure_config
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool
from langchain_core.tools.base import ArgsSchema, _get_runnable_config_param
from langchain_core.utils.pydantic import TypeBaseModel
from pydantic import ConfigDict

from ._config import saga_config

KEY = "idempotency_key"
_CALL_ID: ContextVar[str | None] = ContextVar("agent_saga_langchain_call", default=None)
"""The tool call id of the run in progress (a refusal answers it with an error message)."""


def _pauses() -> tuple[type[BaseException], ...]:
    """LangGraph's ``interrupt()`` suspends a tool to re-run it on resume: a pause."""
    try:
        from langgraph.errors import GraphInterrupt
    except ImportError:  # LangGraph is optional
        return ()
    return (GraphInterrupt,)


class SagaTool(BaseTool):
    """A LangChain tool whose calls are steps of the current saga (untouched outside one).

    A gate refusal answers a tool call with an error ``ToolMessage`` the model can act on
    (plain-argument calls raise :class:`agent_saga.GateRefused`). A call whose body raises is
    recorded as failed and dooms the saga (unless the tool is idempotent and a retry
    succeeds); LangChain then handles the error as the wrapped tool would (``handle_tool_error``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseTool
    guard: ToolCallGuard
    model_arguments: tuple[str, ...]
    takes_key: bool

    def __init__(self, inner: BaseTool, guard: ToolCallGuard) -> None:
        full = _fields(inner.get_input_schema())
        super().__init__(
            name=inner.name,
            description=inner.description,
            args_schema=inner.args_schema,
            return_direct=inner.return_direct,
            response_format=inner.response_format,
            extras=inner.extras,
            handle_tool_error=inner.handle_tool_error,
            handle_validation_error=inner.handle_validation_error,
            callbacks=inner.callbacks,
            tags=inner.tags,
            metadata=inner.metadata,
            verbose=inner.verbose,
            inner=inner,
            guard=guard,
            model_arguments=tuple(n for n in _fields(inner.tool_call_schema) if n != KEY),
            takes_key=KEY in full,
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

    @property
    def _injected_args_keys(self) -> frozenset[str]:
        return self.inner._injected_args_keys

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.inner.get_input_schema(config)

    # -- LangChain's entry points: they validate and inject, then call _run / _arun -----------

    def run(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kw: Any,
    ) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return super().run(tool_input, *args, tool_call_id=tool_call_id, **kw)
        finally:
            _CALL_ID.reset(token)

    async def arun(
        self,
        tool_input: str | dict[str, Any],
        *args: Any,
        tool_call_id: str | None = None,
        **kw: Any,
    ) -> Any:
        token = _CALL_ID.set(tool_call_id)
        try:
            return await super().arun(tool_input, *args, tool_call_id=tool_call_id, **kw)
        finally:
            _CALL_ID.reset(token)

    def _run(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        inner_run = self.inner._run
        extra = _extras(inner_run, config, run_manager)

        def effect(step: StepRef | None) -> Any:
            token = _enter_step(step)
            try:
                return inner_run(*args, **self._with_key(kwargs, step), **extra)
            finally:
                if token is not None:
                    var_child_runnable_config.reset(token)

        out = self.guard.run(self._arguments(args, kwargs), effect, result_of=self._result)
        return self._refused(out) if isinstance(out, RefusedCall) else out

    async def _arun(
        self,
        *args: Any,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> Any:
        inner = self.inner
        inner_arun = inner._arun
        own = type(inner)._arun is not BaseTool._arun
        extra = _extras(inner_arun if own else inner._run, config, run_manager)
        if not own and run_manager is not None and "run_manager" in extra:
            extra["run_manager"] = run_manager.get_sync()  # BaseTool._arun runs _run in a thread

        async def effect(step: StepRef | None) -> Any:
            token = _enter_step(step)
            try:
                return await inner_arun(*args, **self._with_key(kwargs, step), **extra)
            finally:
                if token is not None:
                    var_child_runnable_config.reset(token)

        out = await self.guard.arun(self._arguments(args, kwargs), effect, result_of=self._result)
        return self._refused(out) if isinstance(out, RefusedCall) else out

    # -- running ahead of confirmation (AgentKit.speculate) -----------------------------------

    def call_ahead(self, arguments: dict[str, Any]) -> Callable[[StepRef], tuple[Any, Any]]:
        """The body to run ahead of the model's confirmation for these arguments (what
        ``kit.speculate(this_tool, **arguments)`` runs as a step): it returns the output the
        confirmed call will get, and the result logged.

        The arguments are the model's, by name, validated now by the tool's schema; the body
        sees the step's config and key as in a call.

        Raises:
            SpeculationError: the tool takes injected arguments, which only a call supplies;
                pydantic.ValidationError: the arguments do not fit the tool's schema.
        """
        named = self._ahead_arguments(arguments)
        inner_run = self.inner._run

        def body(step: StepRef) -> tuple[Any, Any]:
            extra = _extras(inner_run, ensure_config(), None)
            token = _enter_step(step)
            try:
                out = inner_run(**self._with_key(named, step), **extra)
            finally:
                if token is not None:
                    var_child_runnable_config.reset(token)
            return out, self._result(out)

        return body

    def acall_ahead(
        self, arguments: dict[str, Any]
    ) -> Callable[[StepRef], Awaitable[tuple[Any, Any]]]:
        """:meth:`call_ahead` for async code: the tool's own ``_arun`` when it has one."""
        named = self._ahead_arguments(arguments)
        inner = self.inner
        own = type(inner)._arun is not BaseTool._arun

        async def body(step: StepRef) -> tuple[Any, Any]:
            method = inner._arun if own else inner._run
            extra = _extras(method, ensure_config(), None)
            token = _enter_step(step)
            try:
                if own:
                    out = await inner._arun(**self._with_key(named, step), **extra)
                else:
                    out = inner._run(**self._with_key(named, step), **extra)
            finally:
                if token is not None:
                    var_child_runnable_config.reset(token)
            return out, self._result(out)

        return body

    def _ahead_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.inner._injected_args_keys:
            raise SpeculationError(
                f"{self.name} takes injected arguments, which only a call supplies: it cannot "
                "run ahead"
            )
        schema = self.inner.tool_call_schema
        if isinstance(schema, type) and hasattr(schema, "model_validate"):
            parsed = schema.model_validate(arguments)
            return {name: getattr(parsed, name) for name in arguments}
        return dict(arguments)

    # -- translation ------------------------------------------------------------------------

    def _arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The model's arguments only: injected values are neither gated nor logged."""
        named = {k: v for k, v in kwargs.items() if k in self.model_arguments}
        if args:  # a plain string input for a single-input tool
            named[self.model_arguments[0] if self.model_arguments else "input"] = args[0]
        return named

    def _with_key(self, kwargs: dict[str, Any], step: StepRef | None) -> dict[str, Any]:
        if step is None or not self.takes_key:
            return kwargs
        return {**kwargs, KEY: step.idempotency_key}

    def _result(self, out: Any) -> Any:
        """The body's own value as logged and given to the compensator (the artifact of a
        ``content_and_artifact`` tool)."""
        if self.response_format == "content_and_artifact" and isinstance(out, tuple):
            return out[1] if len(out) == 2 else out
        return out

    def _refused(self, refusal: RefusedCall) -> ToolMessage:
        call_id = _CALL_ID.get()
        if call_id is None:
            raise refusal.error()
        return ToolMessage(
            content=refusal.message, tool_call_id=call_id, name=self.name, status="error"
        )


def saga_tool(
    tool: BaseTool,
    *,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    on_refusal: OnRefusal = "continue",
    idempotent: bool = False,
    redact: Iterable[str] = (),
) -> SagaTool:
    """Wrap ``tool`` so that each call inside a transaction is a gated, logged, undoable step.

    Args:
        semantics, compensate, probe, redact: as for :func:`agent_saga.tool`; a compensator may
            take any of the tool's model arguments by name, ``result`` (the body's return
            value, or its artifact when it has one) and ``idempotency_key``.
        on_refusal: ``"continue"`` (the model is told and the transaction goes on) or
            ``"rollback"`` (the model is told and the transaction rolls back when it ends).
        idempotent: a failed call may be retried (``ToolRetryMiddleware``, a ``RetryPolicy``,
            the model) as the same step with the same key. Implied for a tool with an
            ``idempotency_key`` argument, which then receives the step's key.
    """
    wrapped_fields = _fields(tool.get_input_schema())
    names = [n for n in _fields(tool.tool_call_schema) if n != KEY]
    guard = ToolCallGuard(
        tool.name,
        semantics=semantics,
        compensate=compensate,
        probe=probe,
        parameters=[*names, *([KEY] if KEY in wrapped_fields else [])],
        on_refusal=on_refusal,
        pauses=_pauses(),
        idempotent=idempotent,
        redact=redact,
    )
    return SagaTool(tool, guard)


def saga_tools(
    tools: Iterable[BaseTool],
    declarations: Mapping[str, ToolDeclaration] | None = None,
    *,
    on_refusal: OnRefusal = "continue",
) -> list[SagaTool]:
    """Wrap several tools; ``declarations`` maps a tool's name to its declaration
    (``semantics``, ``compensate``, ``probe``, ``idempotent``, ``redact``).

    A tool with no declaration is IRREVERSIBLE (it needs an approval), as with ``@tool``.
    """
    tools = list(tools)
    found = declarations_for([t.name for t in tools], declarations)
    return [saga_tool(t, on_refusal=on_refusal, **d) for t, d in zip(tools, found, strict=True)]


def _fields(schema: ArgsSchema | TypeBaseModel) -> list[str]:
    if isinstance(schema, dict):
        properties = schema.get("properties", {})
        return list(properties) if isinstance(properties, dict) else []
    if hasattr(schema, "model_fields"):
        return list(schema.model_fields)
    return list(getattr(schema, "__fields__", {}))  # a pydantic.v1 model


def _extras(method: Callable[..., Any], config: RunnableConfig, run_manager: Any) -> dict[str, Any]:
    """What LangChain's ``run`` would hand ``method`` besides the arguments."""
    extra: dict[str, Any] = {}
    try:
        import inspect

        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "run_manager" in params:
        extra["run_manager"] = run_manager
    name = _get_runnable_config_param(method)
    if name is not None:
        extra[name] = config
    return extra


def _enter_step(step: StepRef | None) -> Token[RunnableConfig | None] | None:
    """Make the runs the body starts (and ``ensure_config()`` in it) see the saga and step."""
    saga = current_saga()
    if step is None or saga is None:
        return None
    config = saga_config(saga.id, var_child_runnable_config.get())
    metadata = dict(config.get("metadata") or {})
    metadata.update({"saga_step": step.ordinal, KEY: step.idempotency_key})
    config["metadata"] = metadata
    return var_child_runnable_config.set(config)
