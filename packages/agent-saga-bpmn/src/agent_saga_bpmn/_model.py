"""What a BPMN compensation flow means to agent-saga: its tasks, their order and compensations.

:class:`Flow`, :class:`Task` and :class:`Problem` are frozen values; nothing here reads XML or
writes code. A :class:`Flow` is what :func:`~agent_saga_bpmn.parse_flow` read from a document,
before :func:`~agent_saga_bpmn.validate` has judged it: it may hold a cycle, a task without a
tool name or a semantics the core does not know, so that every such problem can be reported at
once, each naming its element.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

NAMESPACE = "https://agent-saga.dev/schema/bpmn/1"
"""The namespace of agent-saga's extension element (``<saga:tool .../>``)."""

BPMN_MODEL = "http://www.omg.org/spec/BPMN/20100524/MODEL"
BPMN_DI = "http://www.omg.org/spec/BPMN/20100524/DI"
OMG_DC = "http://www.omg.org/spec/DD/20100524/DC"
OMG_DI = "http://www.omg.org/spec/DD/20100524/DI"

SEMANTICS = ("REVERSIBLE", "COMPENSABLE", "IRREVERSIBLE")
"""The values of ``semantics``, as written in a diagram (upper case, as the core's constants)."""

TaskKind = Literal["service", "user", "compensation"]


class BpmnError(ValueError):
    """A document that cannot be read as a BPMN flow, or a flow that cannot become code.

    ``str(error)`` is one line: what is wrong and where (an element id or a line number).
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True, slots=True)
class Task:
    """One task of the flow.

    Attributes:
        id: the BPMN element id.
        name: the label drawn on the task ("" when it has none).
        kind: ``"service"`` (a tool call), ``"user"`` (a human approval) or ``"compensation"``
            (``isForCompensation="true"``: the undo of a service task).
        tool: the tool's registered name (for a compensation task: the compensator's name);
            ``None`` when the task carries no ``saga:tool`` name.
        semantics: for a service task, ``REVERSIBLE``, ``COMPENSABLE`` or ``IRREVERSIBLE`` as
            declared (upper-cased), else the core's default: ``COMPENSABLE`` when a compensator
            is named or drawn, ``IRREVERSIBLE`` otherwise. A value the core does not know is
            kept as written (``validate`` reports it). ``None`` for user and compensation tasks.
        compensator: the compensator's name declared on a service task (``compensator=``), or
            else the ``saga:tool`` name of its drawn compensation task; ``None`` when neither.
        redact: argument paths whose values never reach the log (``card.number``).
    """

    id: str
    name: str
    kind: TaskKind
    tool: str | None = None
    semantics: str | None = None
    compensator: str | None = None
    redact: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Flow:
    """One BPMN process, as agent-saga reads it.

    Attributes:
        id: the process's element id.
        name: the process's name, else its id.
        tasks: every task; service and user tasks in flow order (sequence flows from the start
            event, ties in document order), then compensation tasks in the order of the tasks
            they compensate (one not attached to any task comes last, in document order).
        edges: every sequence flow as ``(sourceRef, targetRef)``, in document order, between
            any flow nodes (events and unsupported nodes included).
        compensations: service task id -> the id of the compensation task its compensation
            boundary event is associated with.
        starts: the ids of the start events.
        ends: the ids of the end events.
        unsupported: ``(id, element name)`` of flow nodes a saga cannot express (gateways,
            sub-processes, intermediate events, ...); ``validate`` reports each.
    """

    id: str
    name: str
    tasks: tuple[Task, ...]
    edges: tuple[tuple[str, str], ...]
    compensations: Mapping[str, str] = field(default_factory=dict, hash=False)
    starts: tuple[str, ...] = ()
    ends: tuple[str, ...] = ()
    unsupported: tuple[tuple[str, str], ...] = ()

    def task(self, task_id: str) -> Task | None:
        """The task with id ``task_id``, or ``None``."""
        return next((t for t in self.tasks if t.id == task_id), None)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something that keeps a flow from becoming a saga: the element, and one line on why."""

    element_id: str
    message: str

    def __str__(self) -> str:
        return f"{self.element_id}: {self.message}"
