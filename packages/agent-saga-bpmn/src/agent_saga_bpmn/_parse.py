"""Reading a BPMN 2.0 document into a :class:`~agent_saga_bpmn.Flow` (skeleton)."""

from __future__ import annotations

from ._model import BpmnError, Flow


def parse_flow(xml: str | bytes) -> Flow:
    """Read one BPMN process (hardened parser, size cap). Not built yet."""
    raise BpmnError("parse_flow is not built yet")
