"""Reading diagrams: the examples, BPMN's compensation constructs, the saga:tool element, and
documents that are BPMN but not one readable process."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_saga_bpmn import NAMESPACE, BpmnError, Task, parse_flow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HEAD = (
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    f'xmlns:saga="{NAMESPACE}" id="D" targetNamespace="x">'
)


def doc(body: str) -> str:
    return f"{HEAD}<bpmn:process id='P'>{body}</bpmn:process></bpmn:definitions>"


def tool(**attrs: str) -> str:
    text = " ".join(f'{k}="{v}"' for k, v in attrs.items())
    return f"<bpmn:extensionElements><saga:tool {text}/></bpmn:extensionElements>"


def test_the_trip_example_reads_as_three_compensable_tasks_in_order() -> None:
    flow = parse_flow((EXAMPLES / "trip.bpmn").read_bytes())
    assert (flow.id, flow.name, flow.starts, flow.ends) == (
        "BookTrip",
        "Book a trip",
        ("Start",),
        ("End",),
    )
    assert [(t.id, t.kind, t.tool) for t in flow.tasks] == [
        ("BookFlight", "service", "flights.book"),
        ("BookHotel", "service", "hotels.book"),
        ("ChargeCard", "service", "payments.charge"),
        ("BookFlight_undo_task", "compensation", "flights.cancel"),
        ("BookHotel_undo_task", "compensation", "hotels.cancel"),
        ("ChargeCard_undo_task", "compensation", "payments.refund"),
    ]
    assert dict(flow.compensations) == {
        "BookFlight": "BookFlight_undo_task",
        "BookHotel": "BookHotel_undo_task",
        "ChargeCard": "ChargeCard_undo_task",
    }
    assert flow.task("ChargeCard") == Task(
        "ChargeCard", "Charge the card", "service", "payments.charge", "COMPENSABLE",
        "payments.refund", ("card.number",),
    )  # fmt: skip
    assert flow.edges[0] == ("Start", "BookFlight")


def test_flow_order_follows_the_sequence_flows_not_the_document() -> None:
    flow = parse_flow(doc(
        "<bpmn:userTask id='B'/><bpmn:task id='A'/><bpmn:endEvent id='E'/><bpmn:startEvent id='S'/>"
        "<bpmn:sequenceFlow id='f3' sourceRef='B' targetRef='E'/>"
        "<bpmn:sequenceFlow id='f1' sourceRef='S' targetRef='A'/>"
        "<bpmn:sequenceFlow id='f2' sourceRef='A' targetRef='B'/>"
    ))  # fmt: skip
    assert [(t.id, t.kind) for t in flow.tasks] == [("A", "service"), ("B", "user")]


def test_semantics_default_as_the_core_declares_them() -> None:
    flow = parse_flow(doc(
        f"<bpmn:serviceTask id='a'>{tool(name='x', semantics='reversible')}</bpmn:serviceTask>"
        f"<bpmn:serviceTask id='b'>{tool(name='y')}</bpmn:serviceTask>"
        f"<bpmn:serviceTask id='c'>{tool(name='z', compensator='undo.z')}</bpmn:serviceTask>"
        f"<bpmn:sendTask id='d'>{tool(name='w', redact='a.b, c.*.d ,')}</bpmn:sendTask>"
        "<bpmn:serviceTask id='e'/>"
    ))  # fmt: skip
    got = {t.id: (t.tool, t.semantics, t.compensator, t.redact) for t in flow.tasks}
    assert got == {
        "a": ("x", "REVERSIBLE", None, ()),
        "b": ("y", "IRREVERSIBLE", None, ()),
        "c": ("z", "COMPENSABLE", "undo.z", ()),
        "d": ("w", "IRREVERSIBLE", None, ("a.b", "c.*.d")),
        "e": (None, "IRREVERSIBLE", None, ()),
    }


def test_a_drawn_handler_names_the_compensator_either_association_direction() -> None:
    flow = parse_flow(doc(
        f"<bpmn:task id='t'>{tool(name='pay')}</bpmn:task>"
        "<bpmn:boundaryEvent id='b' attachedToRef='t'>"
        "<bpmn:compensateEventDefinition/></bpmn:boundaryEvent>"
        f"<bpmn:task id='h' isForCompensation='true'>{tool(name='refund')}</bpmn:task>"
        "<bpmn:association id='a' sourceRef='h' targetRef='b'/>"
        "<bpmn:textAnnotation id='note'/><bpmn:association id='a2' sourceRef='t' targetRef='note'/>"
    ))  # fmt: skip
    assert dict(flow.compensations) == {"t": "h"}
    assert flow.tasks[0].compensator == "refund"
    assert flow.tasks[0].semantics == "COMPENSABLE"


def test_unsupported_nodes_are_kept_for_validation() -> None:
    flow = parse_flow(doc(
        "<bpmn:exclusiveGateway id='g'/><bpmn:subProcess id='s'/>"
        "<bpmn:boundaryEvent id='timer' attachedToRef='s'>"
        "<bpmn:timerEventDefinition/></bpmn:boundaryEvent>"
        "<bpmn:dataObjectReference id='d'/>"
    ))  # fmt: skip
    assert flow.unsupported == (
        ("g", "exclusiveGateway"),
        ("s", "subProcess"),
        ("timer", "boundaryEvent"),
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("<bpmn:task id='a'/><bpmn:task id='a'/>", "a: the id is used by more than one element"),
        ("<bpmn:task id='a'/><bpmn:sequenceFlow id='f' sourceRef='a' targetRef='zz'/>",
         "f: targetRef 'zz' names no flow node of the process"),
        ("<bpmn:sequenceFlow id='f' targetRef='a'/><bpmn:task id='a'/>",
         "f: sourceRef None names no flow node of the process"),
        ("<bpmn:task/>", "a bpmn:task has no id"),
        ("<bpmn:boundaryEvent id='b' attachedToRef='x'><bpmn:compensateEventDefinition/>"
         "</bpmn:boundaryEvent>", "b: attachedToRef 'x' names no task"),
        ("<bpmn:task id='t'><bpmn:extensionElements><saga:tool name='a'/><saga:tool name='b'/>"
         "</bpmn:extensionElements></bpmn:task>", "t: 2 saga:tool elements, at most one is read"),
        (f"<bpmn:task id='t'>{tool(name='a', semantic='REVERSIBLE')}</bpmn:task>",
         "t: saga:tool has an unknown attribute 'semantic' (known: name, semantics, "
         "compensator, redact)"),
        (f"<bpmn:task id='t' name='{'n' * 1001}'/>", "t: name is 1,001 characters, over 1,000"),
        ("<bpmn:task id='t'/><bpmn:boundaryEvent id='b1' attachedToRef='t'>"
         "<bpmn:compensateEventDefinition/></bpmn:boundaryEvent>"
         "<bpmn:task id='h1' isForCompensation='true'/>"
         "<bpmn:task id='h2' isForCompensation='true'/>"
         "<bpmn:association id='a1' sourceRef='b1' targetRef='h1'/>"
         "<bpmn:association id='a2' sourceRef='b1' targetRef='h2'/>",
         "t: two compensation handlers (h1 and h2); one undoes it"),
    ],
)  # fmt: skip
def test_unreadable_processes_are_one_line_naming_the_element(body: str, expected: str) -> None:
    with pytest.raises(BpmnError) as caught:
        parse_flow(doc(body))
    assert str(caught.value) == expected


def test_one_drawn_process_is_read_and_two_are_refused() -> None:
    empty_and_drawn = (
        f"{HEAD}<bpmn:process id='empty'/><bpmn:process id='P' name='Drawn'>"
        "<bpmn:startEvent id='s'/></bpmn:process></bpmn:definitions>"
    )
    assert parse_flow(empty_and_drawn).name == "Drawn"
    two = (
        f"{HEAD}<bpmn:process id='P1'><bpmn:startEvent id='s'/></bpmn:process>"
        "<bpmn:process id='P2'><bpmn:startEvent id='t'/></bpmn:process></bpmn:definitions>"
    )
    with pytest.raises(
        BpmnError, match=r"^the document holds 2 processes with flow nodes \(P1, P2\)"
    ):
        parse_flow(two)


def test_a_diagram_as_bpmn_js_writes_it_is_read() -> None:
    """A pool (collaboration), incoming/outgoing children, DI, another tool's extensions."""
    xml = f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
  xmlns:bpmndi="http://www.omg.org/spec/BPMN/20100524/DI"
  xmlns:dc="http://www.omg.org/spec/DD/20100524/DC" xmlns:saga="{NAMESPACE}"
  xmlns:other="https://example.com/other" id="Definitions_1" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:collaboration id="Collaboration_1">
    <bpmn:participant id="Participant_1" name="Agent" processRef="Process_1" />
  </bpmn:collaboration>
  <bpmn:process id="Process_1" isExecutable="false">
    <bpmn:startEvent id="StartEvent_1"><bpmn:outgoing>Flow_1</bpmn:outgoing></bpmn:startEvent>
    <bpmn:task id="Activity_1" name="Charge">
      <bpmn:extensionElements>
        <other:note text="kept by another tool" />
        <saga:tool name="pay.charge" semantics="REVERSIBLE" />
      </bpmn:extensionElements>
      <bpmn:incoming>Flow_1</bpmn:incoming>
    </bpmn:task>
    <bpmn:sequenceFlow id="Flow_1" sourceRef="StartEvent_1" targetRef="Activity_1" />
  </bpmn:process>
  <bpmndi:BPMNDiagram id="BPMNDiagram_1">
    <bpmndi:BPMNPlane id="BPMNPlane_1" bpmnElement="Collaboration_1">
      <bpmndi:BPMNShape id="Activity_1_di" bpmnElement="Activity_1">
        <dc:Bounds x="270" y="80" width="100" height="80" />
      </bpmndi:BPMNShape>
    </bpmndi:BPMNPlane>
  </bpmndi:BPMNDiagram>
</bpmn:definitions>
"""
    flow = parse_flow(xml)
    assert (flow.id, flow.name) == ("Process_1", "Process_1")
    assert flow.tasks == (Task("Activity_1", "Charge", "service", "pay.charge", "REVERSIBLE"),)
    assert flow.edges == (("StartEvent_1", "Activity_1"),)
