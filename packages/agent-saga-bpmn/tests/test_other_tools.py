"""Our BPMN is importable by BPMN 2.0 tools other than bpmn-js, offline.

Two implementations that share no code with ours or with each other judge every kind of
document we read or write, against the OMG BPMN 2.0 XSD (``BPMN20.xsd`` with its DI, DC and
Semantic parts) as SpiffWorkflow ships it:

* SpiffWorkflow's own reader (``BpmnParser`` with its ``BpmnValidator``: libxml2 through lxml)
  validates each document and indexes its processes and diagram positions;
* ``xmlschema`` (a pure-Python XSD 1.0 validator) validates it again and decodes it.

The documents: a flow drawn in the designer tab and exported by bpmn-js
(``data/designer-export.bpmn``: the three-task flow of ``test_designer_page``, saved from its
Export button), the two example flows (codegen input), and two recorded sagas drawn by
``saga_to_bpmn`` (the trip run by its generated code; a saga with a refusal, an approval and a
rollback that needs a human).

SpiffWorkflow is an engine that implements a subset of BPMN: it builds no runnable spec of a
process that holds a compensation boundary event (its parser has no compensation events) or is
marked ``isExecutable="false"``. So the whole document is read and validated, and the spec is
built from a copy without the compensation constructs, marked executable: SpiffWorkflow then
sees the same service and user tasks, in the same flow order, as :func:`parse_flow`. (The
examples name their events ``Start`` and ``End``, which SpiffWorkflow reserves for its own
specs, so their spec is not built.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import xmlschema
from agent_saga_bpmn import parse_flow, saga_to_bpmn
from lxml import etree  # type: ignore[import-untyped]
from SpiffWorkflow.bpmn.parser.BpmnParser import (  # type: ignore[import-untyped]
    XSD_PATH,
    BpmnParser,
    BpmnValidator,
)
from SpiffWorkflow.bpmn.parser.ValidationException import (  # type: ignore[import-untyped]
    ValidationException,
)

if TYPE_CHECKING:
    from conftest import Run

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"
XSD = Path(XSD_PATH)
FLOW_NODES = ("startEvent", "endEvent", "serviceTask", "userTask", "boundaryEvent")
MODEL = "http://www.omg.org/spec/BPMN/20100524/MODEL"


@pytest.fixture(scope="module")
def omg_xsd() -> xmlschema.XMLSchema:
    """The OMG BPMN 2.0 schema (with its imports) read by xmlschema, once."""
    return xmlschema.XMLSchema(str(XSD))


DOCUMENTS = ["designer-export", "trip", "supplier-payment", "trip-run", "approved-and-rolled-back"]


def _document(request: pytest.FixtureRequest, name: str) -> bytes:
    """The document ``name`` (see the module docstring)."""
    if name == "designer-export":
        return (HERE / "data" / "designer-export.bpmn").read_bytes()
    if name in ("trip", "supplier-payment"):
        return (EXAMPLES / f"{name}.bpmn").read_bytes()
    if name == "trip-run":
        run: Run = request.getfixturevalue("trip_run")
        return saga_to_bpmn(run.records()).encode()
    recorded: list[dict[str, Any]] = request.getfixturevalue("recorded")
    return saga_to_bpmn(recorded).encode()


@pytest.fixture(params=DOCUMENTS)
def document(request: pytest.FixtureRequest) -> bytes:
    """One document of each kind we read or write."""
    return _document(request, request.param)


def test_the_omg_xsd_accepts_it_in_two_validators(
    document: bytes, omg_xsd: xmlschema.XMLSchema
) -> None:
    root = etree.fromstring(document, etree.XMLParser(resolve_entities=False, no_network=True))
    BpmnValidator(XSD).validate(root)  # raises ValidationException naming the line
    errors = [str(error).splitlines()[0] for error in omg_xsd.iter_errors(document.decode())]
    assert errors == []
    decoded = omg_xsd.to_dict(document.decode())
    assert isinstance(decoded, dict)
    assert "bpmn:process" in decoded


def test_spiffworkflow_reads_its_processes_and_diagram(document: bytes) -> None:
    root = etree.fromstring(document, etree.XMLParser(resolve_entities=False, no_network=True))
    parser = BpmnParser(validator=BpmnValidator())
    parser.add_bpmn_xml(root, "document.bpmn")
    process = root.find(f"{{{MODEL}}}process")
    assert process is not None
    assert parser.get_process_parser(process.get("id")) is not None
    nodes = {e.get("id") for e in process if etree.QName(e).localname in FLOW_NODES}
    positions = parser.get_document_positions(root)
    assert nodes
    assert nodes <= set(positions)  # every flow node has a shape with bounds
    flow = parse_flow(document)  # and our reader agrees on the tasks
    assert {t.id for t in flow.tasks} <= nodes


@pytest.mark.parametrize("name", ["designer-export", "trip-run", "approved-and-rolled-back"])
def test_spiffworkflow_builds_the_flow_without_its_compensations(
    name: str, request: pytest.FixtureRequest
) -> None:
    document = _document(request, name)
    root = etree.fromstring(document, etree.XMLParser(resolve_entities=False, no_network=True))
    process = root.find(f"{{{MODEL}}}process")
    assert process is not None
    process.set("isExecutable", "true")
    for element in list(process):
        compensation = element.find(f"{{{MODEL}}}compensateEventDefinition")
        if element.get("isForCompensation") == "true" or etree.QName(element).localname in (
            "association",
            "boundaryEvent",
        ):
            process.remove(element)
        elif compensation is not None:  # a compensation end event: a plain end event
            element.remove(compensation)
    parser = BpmnParser(validator=BpmnValidator())
    parser.add_bpmn_xml(root, f"{name}.bpmn")
    spec = parser.get_spec(process.get("id"))
    kinds = {"ServiceTask": "service", "UserTask": "user"}
    built = [
        (task_id, kinds[type(task).__name__])
        for task_id, task in spec.task_specs.items()
        if type(task).__name__ in kinds
    ]
    ours = [(t.id, t.kind) for t in parse_flow(document).tasks if t.kind != "compensation"]
    assert [kind for _, kind in built].count("service") >= 3
    assert built == ours


def test_a_document_the_xsd_refuses_is_refused_by_both(omg_xsd: xmlschema.XMLSchema) -> None:
    """The validators are not lenient: a task with an attribute BPMN does not define fails."""
    bad = (EXAMPLES / "trip.bpmn").read_text(encoding="utf-8")
    bad = bad.replace(
        '<bpmn:serviceTask id="BookHotel"', '<bpmn:serviceTask bogus="1" id="BookHotel"', 1
    )
    root = etree.fromstring(bad.encode())
    with pytest.raises(ValidationException, match="bogus"):
        BpmnValidator(XSD).validate(root)
    assert any("bogus" in str(error) for error in omg_xsd.iter_errors(bad))
