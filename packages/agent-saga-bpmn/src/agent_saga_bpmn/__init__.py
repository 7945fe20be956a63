"""BPMN 2.0 for agent-saga.

A compensation flow drawn in BPMN (service tasks with compensation boundary events and
compensation tasks, user tasks for approvals, agent-saga's ``saga:tool`` extension element) is
read by :func:`parse_flow`, judged by :func:`validate` and turned into typed ``@saga_scope`` code
by :func:`codegen`; a recorded saga is drawn back as BPMN with diagram interchange by
:func:`saga_to_bpmn`. ``agent-saga bpmn codegen`` and ``agent-saga bpmn export`` do the same
from a shell.
"""

from ._codegen import codegen
from ._export import saga_to_bpmn
from ._model import NAMESPACE, BpmnError, Flow, Problem, Task
from ._parse import parse_flow
from ._validate import validate

__all__ = [
    "NAMESPACE",
    "BpmnError",
    "Flow",
    "Problem",
    "Task",
    "codegen",
    "parse_flow",
    "saga_to_bpmn",
    "validate",
]
