"""A left-to-right BPMN 2.0 diagram with diagram interchange, from a list of steps.

The picture: a start event, then each :class:`Shape` of the main line in order, joined by
sequence flows; a shape with a :class:`Handler` gets a compensation boundary event on its
lower edge, associated with a compensation task drawn below it. Every flow node has a
``BPMNShape`` with bounds, every sequence flow and association a ``BPMNEdge`` with waypoints.

Invariants: ids are the given ones plus derived suffixes (``_di``, ``_boundary``, ...), checked
unique before anything is written (:class:`~agent_saga_bpmn.BpmnError` otherwise); every
sequence flow's ``sourceRef``/``targetRef`` and every association's ends name elements of the
process; the output is well-formed whatever text the shapes carry (see :mod:`._xmlwrite`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._model import BPMN_DI, BPMN_MODEL, NAMESPACE, OMG_DC, OMG_DI, BpmnError
from ._xmlwrite import Node, document

TASK_W, TASK_H = 100, 80
EVENT = 36
GAP = 60
ROW_Y = 80
"""Top of the main line's tasks; events are centred on the same line."""
HANDLER_Y = ROW_Y + TASK_H + 100


@dataclass(frozen=True)
class Handler:
    """A compensation task (``isForCompensation="true"``) undoing the shape it hangs from."""

    id: str
    name: str
    tool: Mapping[str, str] = field(default_factory=dict)
    """``saga:tool`` attributes (``name`` is the compensator's)."""
    step: Mapping[str, str] = field(default_factory=dict)
    """``saga:step`` attributes (what happened; empty: none written)."""
    documentation: str | None = None


@dataclass(frozen=True)
class Shape:
    """A node of the main line: ``element`` is ``serviceTask``, ``userTask``, ``startEvent``,
    ``endEvent``; ``compensate_event`` draws an end event as a compensation throw."""

    id: str
    element: str
    name: str
    tool: Mapping[str, str] = field(default_factory=dict)
    step: Mapping[str, str] = field(default_factory=dict)
    documentation: str | None = None
    handler: Handler | None = None
    compensate_event: bool = False


def _extensions(tool: Mapping[str, str], step: Mapping[str, str]) -> list[Node]:
    inner = []
    if tool:
        inner.append(Node("saga:tool", dict(tool)))
    if step:
        inner.append(Node("saga:step", dict(step)))
    return [Node("bpmn:extensionElements", children=inner)] if inner else []


def _doc(text: str | None) -> list[Node]:
    return [] if text is None else [Node("bpmn:documentation", text=text)]


def _bounds(x: float, y: float, w: float, h: float) -> Node:
    return Node("dc:Bounds", {"x": x, "y": y, "width": w, "height": h})


def _shape(element_id: str, x: float, y: float, w: float, h: float) -> Node:
    return Node(
        "bpmndi:BPMNShape",
        {"id": f"{element_id}_di", "bpmnElement": element_id},
        [_bounds(x, y, w, h)],
    )


def _edge(element_id: str, points: list[tuple[float, float]]) -> Node:
    waypoints = [Node("di:waypoint", {"x": x, "y": y}) for x, y in points]
    return Node("bpmndi:BPMNEdge", {"id": f"{element_id}_di", "bpmnElement": element_id}, waypoints)


def _size(shape: Shape) -> tuple[int, int]:
    return (EVENT, EVENT) if shape.element.endswith("Event") else (TASK_W, TASK_H)


class _Canvas:
    """Collects the process's elements and their DI while shapes are placed left to right."""

    def __init__(self) -> None:
        self.elements: list[Node] = []
        self.artifacts: list[Node] = []
        self.di: list[Node] = []
        self.ids: set[str] = set()
        self.x = 150.0

    def claim(self, element_id: str) -> str:
        for candidate in (element_id, f"{element_id}_di"):
            if candidate in self.ids:
                raise BpmnError(f"{candidate}: the diagram would use this id twice")
            self.ids.add(candidate)
        return element_id

    def place(self, shape: Shape) -> tuple[float, float, float, float]:
        self.claim(shape.id)
        w, h = _size(shape)
        x, y = self.x, ROW_Y + (TASK_H - h) / 2
        self.x += w + GAP
        attrs = {"id": shape.id, "name": shape.name} if shape.name else {"id": shape.id}
        children = _doc(shape.documentation) + _extensions(shape.tool, shape.step)
        if shape.compensate_event:
            children.append(Node("bpmn:compensateEventDefinition", {"id": f"{shape.id}_def"}))
            self.claim(f"{shape.id}_def")
        self.elements.append(Node(f"bpmn:{shape.element}", attrs, children))
        self.di.append(_shape(shape.id, x, y, w, h))
        if shape.handler is not None:
            self.hang(shape.id, shape.handler, x)
        return x, y, w, h

    def hang(self, task_id: str, handler: Handler, x: float) -> None:
        boundary = self.claim(f"{task_id}_compensation")
        definition = self.claim(f"{task_id}_compensation_def")
        association = self.claim(f"{task_id}_undo")
        self.claim(handler.id)
        bx, by = x + (TASK_W - EVENT) / 2, ROW_Y + TASK_H - EVENT / 2
        self.elements.append(
            Node(
                "bpmn:boundaryEvent",
                {"id": boundary, "attachedToRef": task_id},
                [Node("bpmn:compensateEventDefinition", {"id": definition})],
            )
        )
        attrs = {"id": handler.id, "name": handler.name, "isForCompensation": "true"}
        children = _doc(handler.documentation) + _extensions(handler.tool, handler.step)
        self.elements.append(Node("bpmn:serviceTask", attrs, children))
        self.artifacts.append(
            Node(
                "bpmn:association",
                {
                    "id": association,
                    "associationDirection": "One",
                    "sourceRef": boundary,
                    "targetRef": handler.id,
                },
            )
        )
        self.di.append(_shape(boundary, bx, by, EVENT, EVENT))
        self.di.append(_shape(handler.id, x, HANDLER_Y, TASK_W, TASK_H))
        self.di.append(
            _edge(association, [(bx + EVENT / 2, by + EVENT), (x + TASK_W / 2, HANDLER_Y)])
        )

    def connect(
        self, source: tuple[str, tuple[float, ...]], target: tuple[str, tuple[float, ...]]
    ) -> None:
        (src, (sx, sy, sw, sh)), (dst, (tx, ty, _, th)) = source, target
        flow_id = self.claim(f"{src}_to_{dst}")
        self.elements.append(
            Node("bpmn:sequenceFlow", {"id": flow_id, "sourceRef": src, "targetRef": dst})
        )
        self.di.append(_edge(flow_id, [(sx + sw, sy + sh / 2), (tx, ty + th / 2)]))


def render(process_id: str, name: str, shapes: list[Shape]) -> str:
    """The document: ``bpmn:definitions`` holding one process of ``shapes`` (in order, the
    first usually a start event) joined by sequence flows, and its diagram."""
    canvas = _Canvas()
    canvas.claim(process_id)
    placed: list[tuple[str, tuple[float, ...]]] = []
    for shape in shapes:
        placed.append((shape.id, canvas.place(shape)))
    for source, target in itertools.pairwise(placed):
        canvas.connect(source, target)
    plane = Node(
        "bpmndi:BPMNPlane", {"id": f"{process_id}_plane", "bpmnElement": process_id}, canvas.di
    )
    canvas.claim(f"{process_id}_plane")
    canvas.claim(f"{process_id}_diagram")
    root = Node(
        "bpmn:definitions",
        {
            "xmlns:bpmn": BPMN_MODEL,
            "xmlns:bpmndi": BPMN_DI,
            "xmlns:dc": OMG_DC,
            "xmlns:di": OMG_DI,
            "xmlns:saga": NAMESPACE,
            "id": f"{process_id}_definitions",
            "targetNamespace": NAMESPACE,
            "exporter": "agent-saga-bpmn",
            "exporterVersion": "0.1.0",
        },
        [
            Node(
                "bpmn:process",
                {"id": process_id, "name": name, "isExecutable": "false"},
                [*canvas.elements, *canvas.artifacts],
            ),
            Node("bpmndi:BPMNDiagram", {"id": f"{process_id}_diagram"}, [plane]),
        ],
    )
    return document(root)
