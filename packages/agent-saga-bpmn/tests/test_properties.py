"""On any input, reading a diagram ends in a Flow or one BpmnError; a Flow that validates
becomes code that compiles; a drawing of any parsed flow's tasks is well-formed."""

from __future__ import annotations

import ast
from pathlib import Path

from agent_saga_bpmn import BpmnError, codegen, parse_flow, validate
from hypothesis import given, settings
from hypothesis import strategies as st

TRIP = (Path(__file__).resolve().parents[1] / "examples" / "trip.bpmn").read_bytes()


def _outcome(document: bytes | str) -> str:
    message: str | None = None
    try:
        flow = parse_flow(document)
    except BpmnError as exc:
        message = str(exc)
    if message is not None:
        assert "\n" not in message
        return "refused"
    problems = validate(flow)
    assert all("\n" not in str(p) for p in problems)
    if problems:
        return "problems"
    ast.parse(codegen(flow))
    return "code"


@settings(max_examples=40)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_refused_with_one_line(data: bytes) -> None:
    assert _outcome(data) in ("refused", "problems", "code")


@settings(max_examples=40)
@given(
    st.lists(
        st.tuples(st.integers(0, len(TRIP) - 1), st.integers(0, 40), st.binary(max_size=8)),
        min_size=1,
        max_size=4,
    )
)
def test_edited_diagrams_are_a_flow_or_one_line(edits: list[tuple[int, int, bytes]]) -> None:
    """Cut and splice the trip example at random: ids, attributes and tags break in every way."""
    document = TRIP
    for at, cut, insert in edits:
        document = document[:at] + insert + document[at + cut :]
    assert _outcome(document) in ("refused", "problems", "code")


def _attribute(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")


@settings(max_examples=20)
@given(st.text(max_size=40), st.text(max_size=40))
def test_any_names_and_labels_become_code_that_compiles(label: str, process: str) -> None:
    document = (
        TRIP.decode()
        .replace('name="Book the flight"', f'name="{_attribute(label)}"')
        .replace('name="Book a trip"', f'name="{_attribute(process)}"')
    )
    assert _outcome(document) in ("refused", "code")
