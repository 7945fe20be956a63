"""Judging a :class:`~agent_saga_bpmn.Flow` (skeleton)."""

from __future__ import annotations

from collections.abc import Collection

from ._model import Flow, Problem


def validate(flow: Flow, known_tools: Collection[str] | None = None) -> list[Problem]:
    """Every problem of ``flow``. Not built yet."""
    raise NotImplementedError("validate is not built yet")
