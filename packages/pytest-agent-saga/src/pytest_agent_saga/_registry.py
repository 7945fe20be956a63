"""Compensator registries for tests: one layer per test over the process-wide registry.

A test's kit registers its compensators and probes in its own layer, so two tests may declare
the same name without clashing, while compensators declared at import time with
``@compensator`` (the process-wide registry, which recovery in another process also uses)
are still found.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from agent_saga import (
    AgentKit,
    Approvals,
    CompensatorRegistry,
    MemoryKillSwitch,
    MemoryLogStore,
)

from ._faults import failing

if TYPE_CHECKING:
    from ._intercept import InterceptingStore


ACTIVE: ContextVar[CompensatorRegistry | None] = ContextVar(
    "pytest_agent_saga_registry", default=None
)
"""The registry of the running test's ``saga_kit``, while it is set up."""


def process_registry() -> CompensatorRegistry:
    """The process-wide registry, as every kit built without ``registry=`` uses it."""
    with AgentKit(
        home=".", store=MemoryLogStore(), kill_switch=MemoryKillSwitch(), approvals=Approvals()
    ) as kit:  # every part given, so no configuration file is read
        return kit.runtime.registry


class LayeredRegistry(CompensatorRegistry):
    """Looks a name up in its own layer first, then in ``parent``; registers in its layer."""

    def __init__(self, parent: CompensatorRegistry) -> None:
        super().__init__()
        self.parent = parent

    def get(self, name: str) -> Callable[..., Any] | None:
        return super().get(name) or self.parent.get(name)

    def probe(self, tool: str) -> Callable[..., Any] | None:
        return super().probe(tool) or self.parent.probe(tool)

    def names(self) -> list[str]:
        return sorted(set(super().names()) | set(self.parent.names()))


class FailingRegistry(LayeredRegistry):
    """``parent``'s compensators, except that step ``ordinal``'s compensation raises.

    The engine logs a compensation's intent right before calling it, so the compensator can
    tell which step it is undoing from the store's last record.
    """

    def __init__(self, parent: CompensatorRegistry, store: InterceptingStore, ordinal: int) -> None:
        super().__init__(parent)
        self.store = store
        self.ordinal = ordinal

    def _targeted(self) -> bool:
        last = self.store.last
        return (
            last is not None
            and last.kind == "compensation.intent"
            and last.data.get("ordinal") == self.ordinal
        )

    def get(self, name: str) -> Callable[..., Any] | None:
        func = super().get(name)
        return None if func is None else failing(func, self._targeted)
