"""Compensations: the by-name registry that recovery can load, and how compensators are called.

A compensator is called with the keyword arguments it declares, taken from:

* the compensated step's own arguments, by parameter name;
* ``result``: the value the step returned;
* ``idempotency_key``: a key derived from the step's key, stable across retries and processes.

A compensator that takes ``**kwargs`` receives all of them. A required parameter that none of
these can fill is a :class:`ConfigurationError` when the tool is declared (callable
compensations) or when the step is gated (named ones), before any effect runs.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from .._errors import ConfigurationError
from .._log.codec import JSONValue

F = TypeVar("F", bound=Callable[..., Any])

_NAME_ATTR = "__agent_saga_compensator__"


@dataclass(frozen=True)
class CompensationRef:
    """How a step is undone: by registered name (recoverable anywhere) or in-process callable."""

    name: str | None
    func: Callable[..., Any] | None

    @property
    def recoverable(self) -> bool:
        """True when another process can find this compensation by name."""
        return self.name is not None

    def describe(self) -> dict[str, JSONValue]:
        if self.name is not None:
            return {"name": self.name, "recoverable": True}
        func = self.func
        label = getattr(func, "__qualname__", repr(func))
        return {"callable": f"{getattr(func, '__module__', '?')}.{label}", "recoverable": False}


class CompensatorRegistry:
    """Compensators by name; recovery in another process imports the modules that fill it."""

    def __init__(self) -> None:
        self._by_name: dict[str, Callable[..., Any]] = {}
        self._probes: dict[str, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def register(self, name: str, func: Callable[..., Any]) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("a compensator needs a non-empty name")
        if not callable(func):
            raise ConfigurationError(f"compensator {name!r} must be callable, got {func!r}")
        with self._lock:
            existing = self._by_name.get(name)
            if existing is not None and _identity(existing) != _identity(func):
                raise ConfigurationError(
                    f"compensator name {name!r} is already registered to {_identity(existing)}"
                )
            self._by_name[name] = func

    def get(self, name: str) -> Callable[..., Any] | None:
        return self._by_name.get(name)

    def register_probe(self, tool: str, func: Callable[..., Any]) -> None:
        """Register the probe of ``tool``: did the call with a given idempotency key land?

        A probe is called like a compensator (the step's arguments it declares, and
        ``idempotency_key``) and returns ``False`` (did not land), ``None`` (cannot tell) or
        anything else (landed; a value other than ``True`` is taken as the step's result).
        """
        if not callable(func):
            raise ConfigurationError(f"probe of {tool!r} must be callable, got {func!r}")
        with self._lock:
            existing = self._probes.get(tool)
            if existing is not None and _identity(existing) != _identity(func):
                raise ConfigurationError(f"tool {tool!r} already has probe {_identity(existing)}")
            self._probes[tool] = func

    def probe(self, tool: str) -> Callable[..., Any] | None:
        return self._probes.get(tool)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    @overload
    def compensator(self, name: str) -> Callable[[F], F]: ...
    @overload
    def compensator(self, name: str, func: F) -> F: ...

    def compensator(self, name: str, func: F | None = None) -> F | Callable[[F], F]:
        """Register ``func`` under ``name``; usable as ``@registry.compensator("pay.refund")``."""

        def register(target: F) -> F:
            self.register(name, target)
            setattr(target, _NAME_ATTR, name)
            return target

        return register(func) if func is not None else register


def _identity(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


DEFAULT_REGISTRY = CompensatorRegistry()


@overload
def compensator(name: str) -> Callable[[F], F]: ...
@overload
def compensator(name: str, func: F) -> F: ...


def compensator(name: str, func: F | None = None) -> F | Callable[[F], F]:
    """Register a compensator by name in the process-wide registry.

    Example::

        @compensator("payments.refund")
        def refund(result, idempotency_key):
            ...
    """
    if func is None:
        return DEFAULT_REGISTRY.compensator(name)
    return DEFAULT_REGISTRY.compensator(name, func)


def compensation_ref(spec: object) -> CompensationRef | None:
    """Normalise a ``compensate=`` argument: a registered name, a callable, or ``None``.

    Raises:
        ConfigurationError: for anything else (a dict, a list, an empty string, ...), so a
            misdeclared compensation fails when the tool is declared, not during a rollback.
    """
    if spec is None:
        return None
    if isinstance(spec, str):
        if not spec.strip():
            raise ConfigurationError("compensate= needs a non-empty compensator name")
        return CompensationRef(spec, None)
    if callable(spec):
        registered = getattr(spec, _NAME_ATTR, None)
        return CompensationRef(registered if isinstance(registered, str) else None, spec)
    raise ConfigurationError(
        "compensate= must be a registered compensator name or a callable, "
        f"got {type(spec).__name__}"
    )


_FITS: dict[tuple[Callable[..., Any], frozenset[str]], ConfigurationError | None] = {}


def check_compensator_fits(func: Callable[..., Any], tool_params: Mapping[str, object]) -> None:
    """Raise :class:`ConfigurationError` when ``func`` has a required parameter nobody can fill.

    The answer is remembered per (compensator, tool parameters): steps run this on every call.
    """
    key = (func, frozenset(tool_params))
    try:
        problem = _FITS[key]
    except (KeyError, TypeError):  # TypeError: an unhashable callable is checked every time
        problem = _fit_problem(func, tool_params)
        with contextlib.suppress(TypeError):
            _FITS[key] = problem
    if problem is not None:
        raise problem


def _fit_problem(
    func: Callable[..., Any], tool_params: Mapping[str, object]
) -> ConfigurationError | None:
    try:
        _check_fits(func, tool_params)
    except ConfigurationError as exc:
        return exc
    return None


def _check_fits(func: Callable[..., Any], tool_params: Mapping[str, object]) -> None:
    available = set(tool_params) | {"result", "idempotency_key"}
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    for param in signature.parameters.values():
        if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        if param.kind is param.POSITIONAL_ONLY and param.default is param.empty:
            raise ConfigurationError(
                f"compensator {_identity(func)} has positional-only parameter {param.name!r}; "
                "compensators are called with keyword arguments"
            )
        if param.default is param.empty and param.name not in available:
            raise ConfigurationError(
                f"compensator {_identity(func)} requires {param.name!r}, which is neither an "
                f"argument of the tool ({', '.join(sorted(tool_params)) or 'none'}) nor "
                "'result' or 'idempotency_key'"
            )


def compensator_kwargs(
    func: Callable[..., Any], args: Mapping[str, Any], result: Any, idempotency_key: str
) -> dict[str, Any]:
    """The keyword arguments ``func`` receives for a step with ``args`` and ``result``."""
    offered: dict[str, Any] = {**args, "result": result, "idempotency_key": idempotency_key}
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return offered
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return offered
    return {name: offered[name] for name in params if name in offered}


def resolve_compensator(
    ref: CompensationRef | None,
    tool_params: Mapping[str, object],
    registry: CompensatorRegistry,
) -> tuple[Callable[..., Any] | None, str | None]:
    """The compensator a tool declared (``ref``), checked to fit the tool's parameters; or why
    the step must be refused (a name not registered, or a compensator that does not fit)."""
    if ref is None:
        return None, None
    func = ref.func if ref.name is None else registry.get(ref.name)
    if func is None:
        return None, f"compensator {ref.name!r} is not registered; the step could not be undone"
    if ref.name is not None:
        try:
            check_compensator_fits(func, tool_params)
        except Exception as exc:
            return None, str(exc)
    return func, None


def validate_callable_compensation(spec_params: Mapping[str, object], ref: CompensationRef) -> None:
    """Check at declaration time that a callable compensation can be called for this tool."""
    if ref.func is not None:
        check_compensator_fits(ref.func, spec_params)
