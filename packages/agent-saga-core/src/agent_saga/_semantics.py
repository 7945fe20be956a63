"""Tool semantics and the immutable description of a wrapped tool."""

from __future__ import annotations

import enum
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._compensation import CompensationRef


class Semantics(enum.StrEnum):
    """What undoing a tool's effect takes. Declared explicitly; never guessed from a name.

    * ``REVERSIBLE``: undo is local and cheap (or there is nothing to undo, like a read). Its
      records may take the fast path: buffered, made durable at the next durable point.
    * ``COMPENSABLE``: an external effect with a compensating action. The intent, with the named
      compensation, is durable before the effect runs.
    * ``IRREVERSIBLE``: cannot be undone; needs an approval, and is refused when no approval
      channel is configured.
    """

    REVERSIBLE = "reversible"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"

    @property
    def durable_intent(self) -> bool:
        """Whether the step's intent must be on stable storage before the effect runs."""
        return self is not Semantics.REVERSIBLE


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """Everything the engine knows about a wrapped tool."""

    name: str
    func: Callable[..., Any]
    semantics: Semantics
    compensation: CompensationRef | None
    signature: inspect.Signature
    is_async: bool

    @property
    def accepts_idempotency_key(self) -> bool:
        return "idempotency_key" in self.signature.parameters

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, defaults applied (raises ``TypeError``)."""
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
    """Tools known to an engine (declared through it or run in its sagas), for the manifest."""

    def __init__(self) -> None:
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
