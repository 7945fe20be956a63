"""The process-wide default kit behind the module-level API: ``saga_scope``, ``use_kit``.

``default_kit()`` is the innermost :func:`use_kit` block's kit, else one ``AgentKit`` for the
process on the durable file store in the home, created on first use (a forked child makes its
own).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, overload

from .._engine.runtime import Runtime
from .._engine.tool import DEFAULT_TOOLS
from .._engine.transaction import Transaction
from .agentkit import AgentKit, _resumer

F = TypeVar("F", bound=Callable[..., Any])


class _Defaults:
    """The process-wide default kit, made on first use, and the lock that guards making it."""

    lock = threading.Lock()
    kits: dict[str, AgentKit] = {}  # noqa: RUF012 - one mapping for the process, on purpose


def _forget_defaults_in_child() -> None:
    """A forked child builds its own default kit: the parent's store never writes there."""
    _Defaults.lock = threading.Lock()  # another thread may have held it at the fork
    _Defaults.kits = {}


os.register_at_fork(after_in_child=_forget_defaults_in_child)
_override: ContextVar[AgentKit | None] = ContextVar("agent_saga_kit", default=None)


def default_kit() -> AgentKit:
    """The kit behind ``saga_scope``: the innermost :func:`use_kit` one, else a process-wide kit
    on the durable file store, created on first use."""
    kit = _override.get()
    if kit is not None:
        return kit
    with _Defaults.lock:
        kit = _Defaults.kits.get("kit")
        if kit is None:
            kit = _Defaults.kits["kit"] = AgentKit(tools=DEFAULT_TOOLS)
        return kit


@contextmanager
def use_kit(kit: AgentKit) -> Iterator[AgentKit]:
    """Route the module-level API (``saga_scope``) to ``kit`` within this block."""
    token = _override.set(kit)
    try:
        yield kit
    finally:
        _override.reset(token)


@overload
def saga_scope(name: F, /) -> F: ...
@overload
def saga_scope(name: str | None = None, /, *, resume: str | None = None) -> Transaction: ...


def saga_scope(name: str | F | None = None, /, *, resume: str | None = None) -> Transaction | F:
    """A transaction on the default kit.

    ``with saga_scope("book-trip"):``, ``async with saga_scope():``, ``@saga_scope`` or
    ``@saga_scope("book-trip")``. The kit is looked up when the transaction starts.
    ``resume=saga_id`` continues a suspended saga (see :meth:`AgentKit.transaction`).
    """
    if callable(name):
        return Transaction(_default_runtime)(name)
    return Transaction(_default_runtime, name, resume=_resumer(resume))


def _default_runtime() -> Runtime:
    return default_kit().runtime


__all__ = ["default_kit", "saga_scope", "use_kit"]
