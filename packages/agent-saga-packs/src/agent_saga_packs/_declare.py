"""Declaring a pack's tools and compensators on a kit, or on the process-wide registries.

A pack registers its compensators and probes by name (``<prefix>.<action>``), so that
``agent-saga recover`` in another process finds them once the module that builds the pack is
imported. Names are per registry: two packs with the same prefix in one registry share the
names, and the one built last is the one recovery calls. Give each pack its own prefix.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_saga import Semantics, compensator, tool

if TYPE_CHECKING:
    from agent_saga import AgentKit


class Declarer:
    """Declares tools and compensators on ``kit``, or process-wide when ``kit`` is ``None``."""

    def __init__(self, kit: AgentKit | None, prefix: str) -> None:
        if not prefix or not prefix.strip() or prefix != prefix.strip():
            raise ValueError(f"a pack prefix is a non-empty name without spaces, got {prefix!r}")
        self.kit = kit
        self.prefix = prefix

    def name(self, action: str) -> str:
        """The registered name of ``action`` in this pack (``git.push``)."""
        return f"{self.prefix}.{action}"

    def tool(
        self,
        func: Callable[..., Any],
        action: str,
        semantics: Semantics,
        *,
        compensate: str | None = None,
        probe: Callable[..., Any] | None = None,
    ) -> Callable[..., Any]:
        """Wrap ``func`` as the tool ``<prefix>.<action>`` with declared semantics.

        ``compensate`` is the action name of a compensator registered with :meth:`compensator`.
        """
        name = self.name(action)
        undo = self.name(compensate) if compensate is not None else None
        if self.kit is None:
            return tool(func, name=name, semantics=semantics, compensate=undo, probe=probe)
        return self.kit.tool(func, name=name, semantics=semantics, compensate=undo, probe=probe)

    def compensator(self, action: str, func: Callable[..., Any]) -> None:
        """Register ``func`` as the compensator ``<prefix>.<action>``.

        ``func`` may be a bound method: it is registered through a plain wrapper (the registry
        marks what it registers) that keeps its signature, so it receives the step's
        arguments, ``result`` and ``idempotency_key`` as it declares them.
        """

        @functools.wraps(func)
        def compensate(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        if self.kit is None:
            compensator(self.name(action), compensate)
        else:
            self.kit.compensator(self.name(action), compensate)
