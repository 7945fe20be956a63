"""Python source from a :class:`~agent_saga_bpmn.Flow` (skeleton)."""

from __future__ import annotations

from ._model import Flow


def codegen(flow: Flow, module: str = "flow") -> str:
    """The flow as a Python module. Not built yet."""
    raise NotImplementedError("codegen is not built yet")
