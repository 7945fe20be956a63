"""The engine's side of calls run ahead of confirmation: one protocol, two hooks.

A saga may carry :class:`AheadCalls` (``SagaState.ahead``, set by ``speculation`` when a step is
speculated or a lease is presented). The engine asks it in two places only:

* before a wrapped tool's call runs as a step (:func:`agent_saga._engine.tool.wrap`):
  :meth:`AheadCalls.claim` may answer with the result of a step already run ahead for exactly
  this call, and the call then runs nothing;
* when the saga ends: :meth:`AheadCalls.discard` before the committed record (``committed``)
  or before the terminal rollback. What was run ahead and never claimed is discarded then.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

from .spec import ToolSpec


class Claimed(NamedTuple):
    """The result a call gets from a step run ahead for it."""

    result: Any


class AheadCalls(Protocol):
    """Steps a saga ran ahead of confirmation (implemented in ``speculation``)."""

    def claim(
        self, spec: ToolSpec, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Claimed | None:
        """The result of a step run ahead for this exact call, or ``None``: run it normally."""
        ...

    def discard(self, *, committed: bool) -> None:
        """The saga ends: give up what was not claimed (undone now when ``committed``; a
        terminal rollback undoes it otherwise)."""
        ...
