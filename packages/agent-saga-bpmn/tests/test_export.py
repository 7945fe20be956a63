"""A recorded saga drawn as BPMN: what happened (steps, a refusal, an approval, compensations
newest first), with diagram interchange a BPMN tool can import: unique ids, every reference
resolved, a shape for every flow node and an edge for every connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree.ElementTree import Element

import defusedxml.ElementTree as safe_tree
import pytest
from agent_saga import AgentKit, read_log
from agent_saga_bpmn import BpmnError, parse_flow, saga_to_bpmn, validate

MODEL = "{http://www.omg.org/spec/BPMN/20100524/MODEL}"
DI = "{http://www.omg.org/spec/BPMN/20100524/DI}"
NODES = ("startEvent", "endEvent", "serviceTask", "userTask", "boundaryEvent")


def _tree(xml: str) -> Element:
    return safe_tree.fromstring(xml.encode(), forbid_dtd=True)


def test_the_diagram_is_valid_for_a_bpmn_tool(recorded: list[dict[str, Any]]) -> None:
    root = _tree(saga_to_bpmn(recorded))
    ids = [e.get("id") for e in root.iter() if e.get("id") is not None]
    assert len(ids) == len(set(ids))
    process = root.find(f"{MODEL}process")
    assert process is not None
    nodes = {e.get("id") for e in process if e.tag.removeprefix(MODEL) in NODES}
    for flow in process.iter(f"{MODEL}sequenceFlow"):
        assert flow.get("sourceRef") in nodes
        assert flow.get("targetRef") in nodes
    for link in process.iter(f"{MODEL}association"):
        assert link.get("sourceRef") in nodes
        assert link.get("targetRef") in nodes
    for boundary in process.iter(f"{MODEL}boundaryEvent"):
        assert boundary.get("attachedToRef") in nodes
    plane = root.find(f"{DI}BPMNDiagram/{DI}BPMNPlane")
    assert plane is not None
    assert plane.get("bpmnElement") == process.get("id")
    shapes = {s.get("bpmnElement"): s for s in plane.iter(f"{DI}BPMNShape")}
    edges = {e.get("bpmnElement"): e for e in plane.iter(f"{DI}BPMNEdge")}
    assert set(shapes) == nodes
    connections = {
        e.get("id") for e in process if e.tag in (f"{MODEL}sequenceFlow", f"{MODEL}association")
    }
    assert set(edges) == connections
    assert all(len(edge) >= 2 for edge in edges.values())  # waypoints
    xs = [
        float(s[0].get("x", "0"))
        for s in shapes.values()
        if s.get("bpmnElement", "").startswith("step_")
        and not s.get("bpmnElement", "").endswith(("_compensation", "_undo_task"))
    ]
    assert xs == sorted(xs)  # left to right


def test_the_diagram_tells_what_happened(recorded: list[dict[str, Any]]) -> None:
    root = _tree(saga_to_bpmn(recorded))
    process = root.find(f"{MODEL}process")
    assert process is not None
    labels = [(e.tag.removeprefix(MODEL), e.get("name")) for e in process if e.get("name")]
    assert labels == [
        ("startEvent", "checkout"),
        ("serviceTask", "1. stock.reserve"),
        ("serviceTask", "undo 1: stock.release (compensated)"),
        ("serviceTask", "2. pay.charge (refused)"),
        ("serviceTask", "undo 2: pay.refund (not needed)"),
        ("serviceTask", "3. pay.charge"),
        ("serviceTask", "undo 3: pay.refund (compensated)"),
        ("userTask", "approval of 4"),
        ("serviceTask", "4. bank.wire"),
        ("endEvent", "needs a human: RuntimeError: courier <lost> & \\x07 gone"),
    ]
    docs = {e.get("id"): e.findtext(f"{MODEL}documentation") for e in process}
    assert docs["step_2"] == "refused by max_value: amount=10000 exceeds the cap of 100"
    assert "approved by alice" in str(docs["step_4_approval"])
    end = process.find(f"{MODEL}endEvent")
    assert end is not None
    assert end.find(f"{MODEL}compensateEventDefinition") is not None


def test_parse_flow_reads_the_drawing_back_as_the_flow_that_ran(
    recorded: list[dict[str, Any]],
) -> None:
    flow = parse_flow(saga_to_bpmn(recorded))
    service = [(t.tool, t.semantics, t.compensator) for t in flow.tasks if t.kind == "service"]
    assert service == [
        ("stock.reserve", "COMPENSABLE", "stock.release"),
        ("pay.charge", "COMPENSABLE", "pay.refund"),  # refused: as its refusal declares it
        ("pay.charge", "COMPENSABLE", "pay.refund"),
        ("bank.wire", "IRREVERSIBLE", None),
    ]
    problems = [p.element_id for p in validate(flow)]
    assert "step_4" not in problems  # the approval stands before the wire
    assert "step_2" not in problems  # the refused call drawn as declared, not as IRREVERSIBLE


def test_records_of_no_saga_are_skipped_and_two_sagas_are_refused(
    recorded: list[dict[str, Any]],
) -> None:
    halt = {"seq": 0, "ts": 0, "kind": "control.halt", "saga": None, "data": {}}
    assert saga_to_bpmn([halt, *recorded]) == saga_to_bpmn(recorded)
    other = [{**r, "saga": "other"} for r in recorded]
    with pytest.raises(BpmnError, match=r"^the records hold 2 sagas \("):
        saga_to_bpmn([*recorded, *other])
    with pytest.raises(BpmnError, match=r"^the records hold 0 sagas; give the records of one"):
        saga_to_bpmn([halt])


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ([1], "record 0: a record is a JSON object, not list"),
        ({"kind": 3, "saga": "s"}, "record 0: 'kind' must be text and 'saga' text or null"),
        ({"kind": "saga.begin", "saga": "s", "data": []}, "record 0: 'data' must be a JSON object"),
        (
            {"kind": "saga.begin", "saga": "s", "seq": "1"},
            "record 0: 'seq' and 'ts' must be integers",
        ),
    ],
)
def test_a_record_not_shaped_like_one_is_one_line(record: Any, expected: str) -> None:
    with pytest.raises(BpmnError) as caught:
        saga_to_bpmn([record])
    assert str(caught.value) == expected


def test_a_running_saga_has_no_end_drawn(tmp_path: Path) -> None:
    kit = AgentKit(home=tmp_path / "running")

    @kit.compensator("notes.delete")
    def delete(result: Any) -> None:
        pass

    @kit.tool(name="notes.write", compensate="notes.delete")  # its intent is durable at once
    def write(text: str) -> str:
        return text

    transaction = kit.transaction("open")
    transaction.__enter__()
    write("draft")
    records = [r.to_json() for r in read_log(tmp_path / "running")]
    transaction.__exit__(None, None, None)
    kit.close()
    flow = parse_flow(saga_to_bpmn(records))
    assert flow.ends == ()
    assert [(t.kind, t.tool) for t in flow.tasks] == [
        ("service", "notes.write"),
        ("compensation", "notes.delete"),
    ]
    assert "pending" in saga_to_bpmn(records)  # the undo has not run (the saga is open)


def test_a_saga_with_refused_calls_exports_a_diagram_that_passes_its_check(
    tmp_path: Path,
) -> None:
    """A call the gate refused has no intent record; its refusal carries the tool's declared
    semantics and compensation, so the drawing shows the design that was called (a refused
    REVERSIBLE tool is not read back as IRREVERSIBLE without an approval)."""
    from agent_saga import REVERSIBLE, DenyTools, GateRefused

    kit = AgentKit(home=tmp_path / "home", rules=[DenyTools(frozenset({"wire", "hold"}))])

    @kit.compensator("unbook")
    def unbook(result: Any) -> None:
        pass

    @kit.tool(name="book", compensate="unbook")
    def book(x: int) -> int:
        return x

    @kit.tool(name="wire", semantics=REVERSIBLE)
    def wire(x: int) -> int:
        return x

    @kit.tool(name="hold", compensate="unbook")
    def hold(x: int) -> int:
        return x

    with kit.transaction("refusals"):
        book(1)
        for refused, value in ((hold, 2), (wire, 3)):
            with pytest.raises(GateRefused):
                refused(value)
    kit.close()
    records = [r.to_json() for r in read_log(tmp_path / "home")]
    flow = parse_flow(saga_to_bpmn(records))
    assert {t.tool: t.semantics for t in flow.tasks if t.kind == "service"} == {
        "book": "COMPENSABLE",
        "hold": "COMPENSABLE",
        "wire": "REVERSIBLE",
    }
    assert validate(flow) == []
