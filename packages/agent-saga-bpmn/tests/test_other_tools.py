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

SpiffWorkflow is an engine that implements a subset of BPMN: it builds no executable spec of a
process that holds a compensation boundary event (its parser has no compensation events) or is
marked ``isExecutable="false"``, so it is asked to read and validate, not to run.
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


@pytest.fixture(
    params=["designer-export", "trip", "supplier-payment", "trip-run", "approved-and-rolled-back"]
)
def document(request: pytest.FixtureRequest) -> bytes:
    """One document of each kind we read or write (see the module docstring)."""
    name = request.param
    if name == "designer-export":
        return (HERE / "data" / "designer-export.bpmn").read_bytes()
    if name in ("trip", "supplier-payment"):
        return (EXAMPLES / f"{name}.bpmn").read_bytes()
    if name == "trip-run":
        run: Run = request.getfixturevalue("trip_run")
        return saga_to_bpmn(run.records()).encode()
    recorded: list[dict[str, Any]] = request.getfixturevalue("recorded")
    return saga_to_bpmn(recorded).encode()


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
