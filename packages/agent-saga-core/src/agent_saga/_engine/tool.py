"""The ``@tool`` wrapper: routes a call through the current saga, or leaves it untouched."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast, overload

from .._errors import ConfigurationError
from .._log.records import Semantics
from .._log.redaction import parse_path
from .compensation import (
    DEFAULT_REGISTRY,
    CompensatorRegistry,
    check_compensator_fits,
    compensation_ref,
    validate_callable_compensation,
)
from .saga import _CURRENT
from .spec import ToolRegistry, ToolSpec

F = TypeVar("F", bound=Callable[..., Any])

SPEC_ATTR = "__agent_saga_tool__"

_current = _CURRENT.get
"""``current_saga`` without its call: every wrapped call asks."""


DEFAULT_TOOLS = ToolRegistry("default")


def make_spec(
    func: Callable[..., Any],
    *,
    name: str | None,
    semantics: Semantics | str | None,
    compensate: object,
    probe: Callable[..., Any] | None = None,
    redact: Iterable[str] = (),
    owner: ToolRegistry | None = None,
) -> ToolSpec:
    """Validate a tool declaration; every mistake is a :class:`ConfigurationError` here."""
    if not callable(func):
        raise ConfigurationError(f"@tool needs a function, got {func!r}")
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        raise ConfigurationError(
            f"{getattr(func, '__name__', func)!r} is a generator: its effects would run after "
            "its step is logged done (and after a rollback); make it return a value instead"
        )
    ref = compensation_ref(compensate)
    if semantics is None:
        semantics = Semantics.COMPENSABLE if ref is not None else Semantics.IRREVERSIBLE
    try:
        semantics = Semantics(semantics)
    except ValueError:
        allowed = ", ".join(s.name for s in Semantics)
        raise ConfigurationError(f"semantics must be one of {allowed}, got {semantics!r}") from None
    if semantics is Semantics.COMPENSABLE and ref is None:
        raise ConfigurationError(
            f"{func.__name__}: a COMPENSABLE tool needs compensate= (a registered name or callable)"
        )
    if semantics is Semantics.IRREVERSIBLE and ref is not None:
        raise ConfigurationError(f"{func.__name__}: an IRREVERSIBLE tool cannot be compensated")
    signature = inspect.signature(func)
    if ref is not None:
        validate_callable_compensation(signature.parameters, ref)
    if probe is not None:
        if not callable(probe):
            raise ConfigurationError(f"probe= must be callable, got {type(probe).__name__}")
        if semantics is Semantics.REVERSIBLE:
            raise ConfigurationError("a REVERSIBLE tool needs no probe: its effect is local")
        check_compensator_fits(probe, signature.parameters)
    tool_name = name or f"{func.__module__}.{func.__qualname__}".removeprefix("__main__.")
    paths = _redact_paths(func, signature, redact)
    is_async = inspect.iscoroutinefunction(func)
    return ToolSpec(tool_name, func, semantics, ref, signature, is_async, paths, owner)


def _redact_paths(
    func: Callable[..., Any], signature: inspect.Signature, redact: Iterable[str]
) -> tuple[tuple[str, ...], ...]:
    """Parse ``redact=`` paths; each must start at one of the function's parameters."""
    if isinstance(redact, str):
        raise ConfigurationError("redact= takes a list of paths, not one string")
    paths = []
    for path in redact:
        try:
            parts = parse_path(path)
        except ValueError as exc:
            raise ConfigurationError(f"{func.__name__}: {exc}") from None
        if parts[0] != "*" and parts[0] not in signature.parameters:
            raise ConfigurationError(
                f"{func.__name__}: redact path {path!r} names no parameter of the function"
            )
        paths.append(parts)
    return tuple(paths)


def wrap(spec: ToolSpec) -> Callable[..., Any]:
    """The wrapper for ``spec``: sync for sync functions, a coroutine function for async ones.

    Called outside any transaction, the wrapper calls the function with exactly the arguments
    it was given.
    """
    func = spec.func
    if spec.is_async:

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = _current()
            if saga is None:
                return await func(*args, **kwargs)
            if saga.ahead is not None:
                claimed = saga.ahead.claim(spec, args, kwargs)
                if claimed is not None:
                    return claimed.result
            return await saga.run_async(spec, args, kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(func)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            saga = _current()
            if saga is None:
                return func(*args, **kwargs)
            if saga.ahead is not None:
                claimed = saga.ahead.claim(spec, args, kwargs)
                if claimed is not None:
                    return claimed.result
            return saga.run_sync(spec, args, kwargs)

        wrapper = sync_wrapper
    setattr(wrapper, SPEC_ATTR, spec)
    return wrapper


def tool_spec(func: Callable[..., Any]) -> ToolSpec | None:
    """The spec of a wrapped tool, or ``None`` for a plain function."""
    spec = getattr(func, SPEC_ATTR, None)
    return spec if isinstance(spec, ToolSpec) else None


@overload
def tool(func: F, /) -> F: ...
@overload
def tool(
    func: F,
    /,
    *,
    name: str | None = None,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    redact: Iterable[str] = (),
) -> F: ...
@overload
def tool(
    *,
    name: str | None = None,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    redact: Iterable[str] = (),
) -> Callable[[F], F]: ...


def tool(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    semantics: Semantics | str | None = None,
    compensate: object = None,
    probe: Callable[..., Any] | None = None,
    redact: Iterable[str] = (),
) -> F | Callable[[F], F]:
    """Declare a function (sync or async) as a tool whose calls are gated, logged and undoable.

    Usable as ``@tool``, ``@tool(...)`` or ``tool(func, ...)``. The wrapper keeps the function's
    name, docstring and signature, and accepts positional arguments.

    Args:
        name: the tool's stable name in the log (default: ``module.qualname``).
        semantics: REVERSIBLE, COMPENSABLE or IRREVERSIBLE. When omitted it is COMPENSABLE if
            ``compensate`` is given and IRREVERSIBLE otherwise; it is never guessed from a name.
        compensate: a compensator's registered name (recoverable after a crash) or a callable
            (in-process only).
        probe: answers, after a crash, whether the call with a given ``idempotency_key``
            landed (``False``: no; ``None``: cannot tell; anything else: yes, and a value other
            than ``True`` is the call's result). Registered under the tool's name, so recovery
            in another process finds it once the declaring module is imported.
        redact: argument paths (``"card.cvv"``, ``"items.*.cvv"``) whose values are never
            written to the log: they are replaced by ``{"$redacted": "write"}`` before any
            record is made. The tool and the gate still see the real values; recovery in
            another process does not (a compensator must not need them).
    """
    return _declare(
        func,
        DEFAULT_TOOLS,
        DEFAULT_REGISTRY,
        name=name,
        semantics=semantics,
        compensate=compensate,
        probe=probe,
        redact=redact,
    )


def _declare(
    func: F | None,
    registry: ToolRegistry,
    compensators: CompensatorRegistry,
    *,
    name: str | None,
    semantics: Semantics | str | None,
    compensate: object,
    probe: Callable[..., Any] | None = None,
    redact: Iterable[str] = (),
    owned: bool = False,
) -> F | Callable[[F], F]:
    """Declare ``func`` into ``registry``; ``owned`` binds it to that registry's kit."""

    def decorate(target: F) -> F:
        spec = make_spec(
            target,
            name=name,
            semantics=semantics,
            compensate=compensate,
            probe=probe,
            redact=redact,
            owner=registry if owned else None,
        )
        if probe is not None:
            compensators.register_probe(spec.name, probe)
        registry.add(spec)
        return cast(F, wrap(spec))

    return decorate(func) if func is not None else decorate
