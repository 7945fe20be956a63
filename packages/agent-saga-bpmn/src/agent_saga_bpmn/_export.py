"""A recorded saga drawn as BPMN (skeleton)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def saga_to_bpmn(records: Sequence[Mapping[str, Any]]) -> str:
    """One saga's records as BPMN 2.0 XML with diagram interchange. Not built yet."""
    raise NotImplementedError("saga_to_bpmn is not built yet")
