"""Validation: every problem named by its element, the examples clean."""

from __future__ import annotations

import itertools
from pathlib import Path

from agent_saga_bpmn import NAMESPACE, Problem, parse_flow, validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HEAD = (
    '<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
    f'xmlns:saga="{NAMESPACE}" id="D" targetNamespace="x">'
)


def problems(body: str, known: set[str] | None = None) -> list[str]:
    flow = parse_flow(f"{HEAD}<bpmn:process id='P'>{body}</bpmn:process></bpmn:definitions>")
    return [str(p) for p in validate(flow, known_tools=known)]


def task(task_id: str, tool: str, semantics: str = "REVERSIBLE", extra: str = "") -> str:
    return (
        f"<bpmn:serviceTask id='{task_id}'><bpmn:extensionElements>"
        f"<saga:tool name='{tool}' semantics='{semantics}' {extra}/>"
        "</bpmn:extensionElements></bpmn:serviceTask>"
    )


def chain(*ids: str) -> str:
    return "".join(
        f"<bpmn:sequenceFlow id='f_{a}_{b}' sourceRef='{a}' targetRef='{b}'/>"
        for a, b in itertools.pairwise(ids)
    )


def handler(task_id: str, name: str) -> str:
    return (
        f"<bpmn:boundaryEvent id='{task_id}_b' attachedToRef='{task_id}'>"
        "<bpmn:compensateEventDefinition/></bpmn:boundaryEvent>"
        f"<bpmn:serviceTask id='{task_id}_h' isForCompensation='true'><bpmn:extensionElements>"
        f"<saga:tool name='{name}'/></bpmn:extensionElements></bpmn:serviceTask>"
        f"<bpmn:association id='{task_id}_a' sourceRef='{task_id}_b' targetRef='{task_id}_h'/>"
    )


START, END = "<bpmn:startEvent id='s'/>", "<bpmn:endEvent id='e'/>"


def test_the_examples_have_no_problem() -> None:
    for path in EXAMPLES.glob("*.bpmn"):
        assert validate(parse_flow(path.read_bytes())) == [], path.name


def test_a_compensable_task_without_a_handler() -> None:
    assert problems(START + task("a", "pay", "COMPENSABLE") + chain("s", "a")) == [
        "a: COMPENSABLE without a compensation handler: attach a compensation boundary event "
        "associated with a compensation task"
    ]


def test_an_irreversible_task_without_an_approval_on_every_path() -> None:
    approved = START + "<bpmn:userTask id='ok'/>" + task("w", "wire", "IRREVERSIBLE")
    assert problems(approved + chain("s", "ok", "w")) == []
    assert problems(approved + chain("s", "w", "ok")) == [
        "w: IRREVERSIBLE without an approval before it: put a user task on every path from the "
        "start to it",
    ]
    compensated = START + task("w", "wire", "IRREVERSIBLE") + handler("w", "unwire")
    assert (
        "w: IRREVERSIBLE yet it has a compensation handler"
        in problems(compensated + "<bpmn:userTask id='ok'/>" + chain("s", "ok", "w"))[0]
    )


def test_unknown_tools_only_when_known_tools_are_given() -> None:
    body = START + task("a", "pay") + chain("s", "a")
    assert problems(body) == []
    assert problems(body, {"pay"}) == []
    assert problems(body, {"other", "more"}) == [
        "a: unknown tool 'pay': not among the 2 known tools"
    ]


def test_a_cycle_and_a_branch() -> None:
    body = START + task("a", "x") + task("b", "y") + task("c", "z")
    found = problems(body + chain("s", "a", "b", "a") + chain("b", "c"))
    assert found == [
        "a: a cycle (a -> b -> a): a saga runs each task once, in order",
        "b: 2 outgoing sequence flows (to a, c): a saga's tasks run in one sequence",
    ]


def test_starts_and_disconnected_tasks() -> None:
    assert problems(task("a", "x")) == [
        "P: no start event: a saga begins at exactly one",
        "a: not connected to the start event by sequence flows",
    ]
    two = START + "<bpmn:startEvent id='s2'/>" + task("a", "x") + task("b", "y")
    assert problems(two + chain("s", "a") + chain("s2", "a")) == [
        "s2: a second start event (the first is s): a saga begins at exactly one",
        "b: not connected to the start event by sequence flows",
    ]


def test_unsupported_nodes() -> None:
    body = START + "<bpmn:parallelGateway id='g'/>" + task("a", "x") + chain("s", "g", "a")
    assert problems(body) == [
        "g: a parallelGateway is not supported: a saga runs its tasks one after another (no "
        "gateways, sub-processes or intermediate events)"
    ]


def test_task_declarations() -> None:
    body = (
        START
        + "<bpmn:serviceTask id='none'/>"
        + task("bad", "has space")
        + task("sem", "x", "MAYBE")
        + task("dup", "x", "IRREVERSIBLE")
        + task("red", "r", extra="redact='class.x, card..number'")
        + "<bpmn:task id='loose' isForCompensation='true'/>"
        + chain("s", "none", "bad", "sem", "dup", "red")
        + "<bpmn:userTask id='u'/>"
        + chain("red", "u")
    )
    found = problems(body)
    assert found == [
        'none: no tool name: give it <saga:tool name="..."/>',
        "none: IRREVERSIBLE without an approval before it: put a user task on every path from "
        "the start to it",
        "bad: tool name 'has space' is not a letter or _ then up to 63 letters, digits or "
        "_ . : / -",
        "sem: semantics 'MAYBE' is not REVERSIBLE, COMPENSABLE or IRREVERSIBLE",
        "dup: IRREVERSIBLE without an approval before it: put a user task on every path from "
        "the start to it",
        "dup: tool 'x' is declared differently by sem (semantics, compensator or redact)",
        "red: redact path 'class.x' is not a parameter name then dotted names, at most 64 "
        "characters (card.number, items.*.cvv)",
        "red: redact path 'card..number' is not a parameter name then dotted names, at most 64 "
        "characters (card.number, items.*.cvv)",
        'loose: a compensation task without a compensator name: give it <saga:tool name="..."/>',
        "loose: compensates nothing: associate it with a compensation boundary event on a "
        "service task",
    ]


def test_a_declared_compensator_must_match_the_drawn_one() -> None:
    body = START + task("a", "pay", "COMPENSABLE", "compensator='refund'") + handler("a", "void")
    assert problems(body + chain("s", "a")) == [
        "a: compensator 'refund' differs from 'void', the name of its handler a_h"
    ]


def test_problems_are_values_naming_the_element() -> None:
    [problem] = validate(parse_flow(f"{HEAD}<bpmn:process id='P'/></bpmn:definitions>"))
    assert problem == Problem("P", "no start event: a saga begins at exactly one")
