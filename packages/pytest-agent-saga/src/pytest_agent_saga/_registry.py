"""Compensator registries for tests: one layer per test over the process-wide registry.

A test's kit registers its compensators and probes in its own layer, so two tests may declare
the same name without clashing, while compensators declared at import time with
``@compensator`` (the process-wide registry, which recovery in another process also uses)
are still found.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from agent_saga import (
    AgentKit,
    Approvals,
    CompensatorRegistry,
    MemoryKillSwitch,
    MemoryLogStore,
)

ACTIVE: ContextVar[AgentKit | None] = ContextVar("pytest_agent_saga_kit", default=None)
"""The running test's ``saga_kit``, while it is set up: its compensators and its tools (a tool
declared on a kit runs only in kits that share that kit's tool registry)."""


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
