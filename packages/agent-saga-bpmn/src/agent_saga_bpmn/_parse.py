"""Reading a BPMN 2.0 document into a :class:`~agent_saga_bpmn.Flow`.

What is read: the one ``bpmn:process`` that holds flow nodes; its start and end events, tasks
(``isForCompensation="true"`` makes a compensation task, ``userTask``/``manualTask`` an
approval, any other task a tool call), sequence flows, compensation boundary events
(``compensateEventDefinition``, ``attachedToRef``) and the associations from them to
compensation tasks; each task's ``saga:tool`` extension element (see ``docs/bpmn.md``). Any
other flow node (a gateway, a sub-process, an intermediate event) is kept in
:attr:`Flow.unsupported`; artefacts (annotations, data objects, groups, lanes) are ignored.

Invariants: the document is read through :func:`~agent_saga_bpmn._xmlread.read_tree` (size cap,
defusedxml, no DTD). A document that is not one readable process raises
:class:`~agent_saga_bpmn.BpmnError` naming the element; what a process may well hold but a saga
cannot express is left for :func:`~agent_saga_bpmn.validate` to report, all at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.etree.ElementTree import Element

from ._graph import flow_order
from ._model import BPMN_MODEL, NAMESPACE, BpmnError, Flow, Task, TaskKind
from ._xmlread import read_tree

SERVICE_TASKS = frozenset(
    {"task", "serviceTask", "sendTask", "scriptTask", "businessRuleTask", "receiveTask"}
)
USER_TASKS = frozenset({"userTask", "manualTask"})
IGNORED = frozenset(
    {
        "documentation",
        "extensionElements",
        "laneSet",
        "textAnnotation",
        "dataObject",
        "dataObjectReference",
        "dataStoreReference",
        "group",
        "property",
        "ioSpecification",
    }
)
TOOL_ATTRIBUTES = ("name", "semantics", "compensator", "redact")
MAX_TEXT = 1000
"""The longest name or attribute value read (characters)."""


def _q(local: str, namespace: str = BPMN_MODEL) -> str:
    return f"{{{namespace}}}{local}"


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _namespace(tag: str) -> str:
    return tag[1:].partition("}")[0] if tag.startswith("{") else ""


def _text(element: Element, attribute: str, where: str) -> str | None:
    value = element.get(attribute)
    if value is None:
        return None
    if len(value) > MAX_TEXT:
        raise BpmnError(f"{where}: {attribute} is {len(value):,} characters, over {MAX_TEXT:,}")
    return value


def _id(element: Element) -> str:
    value = element.get("id")
    if not value:
        raise BpmnError(f"a bpmn:{_local(element.tag)} has no id")
    if len(value) > 200:
        raise BpmnError(f"a bpmn:{_local(element.tag)} has an id of {len(value):,} characters")
    return value


def _unique_ids(root: Element) -> None:
    seen: set[str] = set()
    for element in root.iter():
        value = element.get("id")
        if value is None:
            continue
        if value in seen:
            raise BpmnError(f"{value}: the id is used by more than one element")
        seen.add(value)


def _the_process(root: Element) -> Element:
    if root.tag != _q("definitions"):
        raise BpmnError(
            f"not a BPMN 2.0 document: the root element is {_local(root.tag)!r} in namespace "
            f"{_namespace(root.tag) or 'none'!r}, not bpmn:definitions in {BPMN_MODEL}"
        )
    processes = root.findall(_q("process"))
    if not processes:
        raise BpmnError("the document has no bpmn:process")
    drawn = [p for p in processes if any(_local(c.tag) not in IGNORED for c in p)]
    if len(drawn) > 1:
        ids = ", ".join(_id(p) for p in drawn)
        raise BpmnError(
            f"the document holds {len(drawn)} processes with flow nodes ({ids}); "
            "a saga is drawn as one"
        )
    return (drawn or processes)[0]


def _tool_element(element: Element, where: str) -> Element | None:
    found = [
        child
        for extensions in element.findall(_q("extensionElements"))
        for child in extensions.findall(_q("tool", NAMESPACE))
    ]
    if len(found) > 1:
        raise BpmnError(f"{where}: {len(found)} saga:tool elements, at most one is read")
    if not found:
        return None
    tool = found[0]
    for attribute in tool.attrib:
        if not attribute.startswith("{") and attribute not in TOOL_ATTRIBUTES:
            raise BpmnError(
                f"{where}: saga:tool has an unknown attribute {attribute!r} "
                f"(known: {', '.join(TOOL_ATTRIBUTES)})"
            )
    return tool


def _redact(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(path.strip() for path in value.split(",") if path.strip())


class _Reader:
    """One pass over a process's children, then the links between them."""

    def __init__(self, process: Element) -> None:
        self.process = process
        self.nodes: list[str] = []
        self.tasks: dict[str, tuple[Element, TaskKind]] = {}
        self.starts: list[str] = []
        self.ends: list[str] = []
        self.boundaries: dict[str, str] = {}  # compensation boundary event -> its task
        self.unsupported: list[tuple[str, str]] = []
        self.flows: list[Element] = []
        self.associations: list[Element] = []

    def read(self) -> None:
        for child in self.process:
            if _namespace(child.tag) != BPMN_MODEL:
                continue  # another tool's extension at process level
            local = _local(child.tag)
            if local in IGNORED:
                continue
            if local == "sequenceFlow":
                self.flows.append(child)
            elif local == "association":
                self.associations.append(child)
            else:
                self._node(child, local)

    def _node(self, child: Element, local: str) -> None:
        node_id = _id(child)
        self.nodes.append(node_id)
        if local == "startEvent":
            self.starts.append(node_id)
        elif local == "endEvent":
            self.ends.append(node_id)
        elif local in SERVICE_TASKS or local in USER_TASKS:
            if child.get("isForCompensation", "false").strip().lower() == "true":
                kind: TaskKind = "compensation"
            else:
                kind = "user" if local in USER_TASKS else "service"
            self.tasks[node_id] = (child, kind)
        elif local == "boundaryEvent" and child.find(_q("compensateEventDefinition")) is not None:
            attached = child.get("attachedToRef")
            if not attached:
                raise BpmnError(f"{node_id}: a compensation boundary event without attachedToRef")
            self.boundaries[node_id] = attached
        else:
            self.unsupported.append((node_id, local))

    def edges(self) -> list[tuple[str, str]]:
        known = set(self.nodes)
        out: list[tuple[str, str]] = []
        for flow in self.flows:
            flow_id = _id(flow)
            ends = (flow.get("sourceRef"), flow.get("targetRef"))
            for role, ref in zip(("sourceRef", "targetRef"), ends, strict=True):
                if not ref or ref not in known:
                    raise BpmnError(f"{flow_id}: {role} {ref!r} names no flow node of the process")
            out.append((str(ends[0]), str(ends[1])))
        return out

    def compensations(self) -> dict[str, str]:
        for boundary_id, task_id in self.boundaries.items():
            if task_id not in self.tasks:
                raise BpmnError(f"{boundary_id}: attachedToRef {task_id!r} names no task")
        out: dict[str, str] = {}
        for association in self.associations:
            ends = (association.get("sourceRef"), association.get("targetRef"))
            boundary = next((e for e in ends if e is not None and e in self.boundaries), None)
            handler = next(
                (
                    e
                    for e in ends
                    if e is not None and e in self.tasks and self.tasks[e][1] == "compensation"
                ),
                None,
            )
            if boundary is None or handler is None:
                continue  # an annotation's association, or one a compensation does not use
            attached = self.boundaries[boundary]
            if attached in out and out[attached] != handler:
                raise BpmnError(
                    f"{attached}: two compensation handlers ({out[attached]} and {handler}); "
                    "one undoes it"
                )
            out[attached] = handler
        return out


def _task(element: Element, kind: TaskKind, handler: Element | None) -> Task:
    task_id = _id(element)
    name = _text(element, "name", task_id) or ""
    tool = _tool_element(element, task_id)
    attrs = {a: _text(tool, a, task_id) for a in TOOL_ATTRIBUTES} if tool is not None else {}
    tool_name = attrs.get("name") or None
    if kind != "service":
        return Task(task_id, name, kind, tool=tool_name, redact=_redact(attrs.get("redact")))
    compensator = attrs.get("compensator") or None
    if compensator is None and handler is not None:
        handler_tool = _tool_element(handler, _id(handler))
        compensator = handler_tool.get("name") or None if handler_tool is not None else None
    declared = (attrs.get("semantics") or "").strip().upper()
    drawn = compensator is not None or handler is not None
    semantics = declared or ("COMPENSABLE" if drawn else "IRREVERSIBLE")
    return Task(
        task_id, name, kind, tool_name, semantics, compensator, _redact(attrs.get("redact"))
    )


def _ordered(tasks: Iterable[Task], order: list[str], compensations: dict[str, str]) -> list[Task]:
    by_id = {t.id: t for t in tasks}
    flowing = [by_id[n] for n in order if n in by_id and by_id[n].kind != "compensation"]
    handlers = [by_id[compensations[t.id]] for t in flowing if t.id in compensations]
    seen = {t.id for t in handlers}
    loose = [t for t in by_id.values() if t.kind == "compensation" and t.id not in seen]
    return [*flowing, *dict.fromkeys(handlers), *loose]


def parse_flow(xml: str | bytes) -> Flow:
    """Read the process of a BPMN 2.0 document (str or bytes, at most 4 MiB).

    Raises:
        BpmnError: one line naming the element or line: the document is too large, malformed,
            declares a DTD or entities, is not ``bpmn:definitions``, has no process or several
            drawn ones, repeats an id, has a sequence flow to an element that is not there, or
            a ``saga:tool`` element that cannot be read.
    """
    root = read_tree(xml)
    _unique_ids(root)
    process = _the_process(root)
    reader = _Reader(process)
    reader.read()
    edges = reader.edges()
    compensations = reader.compensations()
    tasks = [
        _task(
            element,
            kind,
            reader.tasks[compensations[task_id]][0] if task_id in compensations else None,
        )
        for task_id, (element, kind) in reader.tasks.items()
    ]
    order = flow_order(reader.nodes, edges)
    process_id = _id(process)
    return Flow(
        id=process_id,
        name=_text(process, "name", process_id) or process_id,
        tasks=tuple(_ordered(tasks, order, compensations)),
        edges=tuple(edges),
        compensations=compensations,
        starts=tuple(reader.starts),
        ends=tuple(reader.ends),
        unsupported=tuple(reader.unsupported),
    )
