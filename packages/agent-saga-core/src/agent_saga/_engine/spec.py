"""The immutable description of a wrapped tool, and the kit's registry of known tools."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

from .._log.records import Semantics
from .compensation import CompensationRef

_PLAIN = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class ToolSpec:
    """Everything the engine knows about a wrapped tool. Immutable after construction."""

    __slots__ = (
        "_all_positional",
        "_count",
        "_defaults",
        "_positional",
        "_simple",
        "accepts_idempotency_key",
        "compensation",
        "compensation_json",
        "durable_intent",
        "func",
        "is_async",
        "name",
        "owner",
        "redact",
        "semantics",
        "semantics_value",
        "signature",
    )

    def __init__(
        self,
        name: str,
        func: Callable[..., Any],
        semantics: Semantics,
        compensation: CompensationRef | None,
        signature: inspect.Signature,
        is_async: bool,
        redact: tuple[tuple[str, ...], ...] = (),
        owner: ToolRegistry | None = None,
    ) -> None:
        self.name = name
        self.owner = owner
        """The tool registry of the kit the tool was declared on (``None`` for module-level
        tools, which run under whichever kit's transaction is current)."""
        self.redact = redact
        """Argument paths masked before anything is logged (:mod:`agent_saga._log.redaction`)."""
        self.func = func
        self.semantics = semantics
        self.compensation = compensation
        self.signature = signature
        self.is_async = is_async
        self.durable_intent = semantics.durable_intent
        self.semantics_value = semantics.value
        self.compensation_json = compensation.describe() if compensation is not None else None
        params = signature.parameters
        self.accepts_idempotency_key = "idempotency_key" in params
        # Signatures made only of plain parameters are bound without inspect (hot path).
        self._simple = all(p.kind in _PLAIN for p in params.values())
        self._positional = tuple(
            n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        self._defaults = {n: p.default for n, p in params.items() if p.default is not p.empty}
        self._count = len(params)
        self._all_positional = (
            self._simple
            and len(self._positional) == self._count
            and "idempotency_key" not in params
        )

    def __repr__(self) -> str:
        return f"ToolSpec({self.name!r}, {self.semantics.name})"

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults applied (raises ``TypeError``).

        ``idempotency_key`` is not part of the result: it is logged on its own.
        """
        if not kwargs and self._all_positional and len(args) == self._count:
            return dict(zip(self._positional, args, strict=True))  # every parameter given
        if self._simple and len(args) <= len(self._positional):
            named = dict(self._defaults)
            named.update(zip(self._positional, args, strict=False))
            if not kwargs and len(named) == self._count:
                named.pop("idempotency_key", None)
                return named
            for key, value in kwargs.items():
                if key in named and key not in self._defaults:
                    raise TypeError(f"multiple values for argument {key!r}")
                if key not in self.signature.parameters:
                    raise TypeError(f"got an unexpected keyword argument {key!r}")
                named[key] = value
            clash = set(self._positional[: len(args)]) & kwargs.keys()
            if clash:
                raise TypeError(f"multiple values for argument {sorted(clash)[0]!r}")
            if len(named) != len(self.signature.parameters):
                missing = [n for n in self.signature.parameters if n not in named]
                raise TypeError(f"missing a required argument: {missing[0]!r}")
            named.pop("idempotency_key", None)
            return named
        return self._bind_general(args, kwargs)

    def _bind_general(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                named[name] = list(value)
            else:
                named[name] = value
        named.pop("idempotency_key", None)
        return named


class ToolRegistry:
    """Tools known to an engine (declared through it or run in its sagas), for the manifest.

    ``label`` names the kit it belongs to in messages (a tool declared on one kit and called in
    another kit's transaction is refused, naming both).
    """

    def __init__(self, label: str = "unnamed") -> None:
        self.label = label
        self._specs: dict[str, ToolSpec] = {}
        self._lock = threading.Lock()

    def add(self, spec: ToolSpec) -> None:
        if self._specs.get(spec.name) is spec:
            return
        with self._lock:
            self._specs[spec.name] = spec

    def specs(self) -> list[ToolSpec]:
        with self._lock:
            return sorted(self._specs.values(), key=lambda s: s.name)
