"""Which tools a pack's rule applies to, and how that reads in the guarantees manifest."""

from __future__ import annotations

import math
from collections.abc import Iterable


def tool_scope(tools: Iterable[str] | str | None) -> frozenset[str] | None:
    """The set of tool names a rule applies to (``None``: every tool; a string: one tool)."""
    if tools is None:
        return None
    if isinstance(tools, str):
        return frozenset({tools})
    scope = frozenset(tools)
    if not all(isinstance(name, str) for name in scope):
        raise TypeError(f"tools must be names (str), got {sorted(map(repr, scope))}")
    return scope


def describe_scope(tools: frozenset[str] | None) -> str:
    return ", ".join(sorted(tools)) if tools is not None else "every tool"


def in_scope(tools: frozenset[str] | None, tool: str) -> bool:
    return tools is None or tool in tools


def finite_number(value: object) -> bool:
    """A real, finite number; ``bool`` is not a number here."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)
