"""The package's surface, what it imports, and its entry point."""

from __future__ import annotations

from importlib.metadata import entry_points

import agent_saga_bpmn
from agent_saga.testing import modules_after_import
from agent_saga_bpmn import BpmnError, Problem, Task

PUBLIC = [
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


def test_the_public_surface_is_pinned() -> None:
    assert agent_saga_bpmn.__all__ == PUBLIC
    assert agent_saga_bpmn.NAMESPACE == "https://agent-saga.dev/schema/bpmn/1"
    assert issubclass(BpmnError, ValueError)
    assert str(BpmnError("two\n  lines")) == "two lines"
    assert str(Problem("Task_1", "why")) == "Task_1: why"
    assert Task("t", "", "user").tool is None


def test_importing_the_package_loads_no_framework_and_no_command_line() -> None:
    loaded = modules_after_import("agent_saga_bpmn")
    assert {"agent_saga", "defusedxml"} <= loaded
    others = {"langchain_core", "llama_index", "agents", "opentelemetry", "starlette", "click"}
    assert loaded & others == set()


def test_the_command_is_an_agent_saga_entry_point() -> None:
    [point] = [p for p in entry_points(group="agent_saga.commands") if p.name == "bpmn"]
    assert point.value == "agent_saga_bpmn.cli:bpmn"
    assert point.dist is not None
    assert point.dist.name == "agent-saga-bpmn"


def test_the_moddle_descriptor_declares_what_the_parser_reads() -> None:
    import json
    from importlib.resources import files

    from agent_saga_bpmn._parse import TOOL_ATTRIBUTES

    descriptor = json.loads((files("agent_saga_bpmn") / "moddle.json").read_text("utf-8"))
    assert (descriptor["uri"], descriptor["prefix"]) == (agent_saga_bpmn.NAMESPACE, "saga")
    types = {t["name"]: [p["name"] for p in t["properties"]] for t in descriptor["types"]}
    assert tuple(types["Tool"]) == TOOL_ATTRIBUTES
    assert types["Step"] == ["ordinal", "outcome", "compensation"]
