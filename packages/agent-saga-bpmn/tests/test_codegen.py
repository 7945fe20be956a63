"""Generated code: clean under ruff and mypy --strict as written, and it runs: bound to real
bodies, a failure in the last task compensates the earlier ones, newest first."""

from __future__ import annotations

import ast
import itertools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import quoteattr

import pytest
from agent_saga_bpmn import NAMESPACE, BpmnError, Flow, Task, codegen, parse_flow

if TYPE_CHECKING:
    from conftest import Run

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TRIP = EXAMPLES / "trip.bpmn"
SUPPLIER = EXAMPLES / "supplier-payment.bpmn"

ROOT = Path(__file__).resolve().parents[3]
"""The repository: its pyproject.toml holds the ruff configuration every module meets."""


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found is not None, f"{name} is a dev dependency of agent-saga-bpmn"
    return found


def _nasty_flow() -> Flow:
    """Names that would break naive code: quotes, a keyword, digits first, non-ASCII, a long
    label, two tools reducing to one identifier, a tool used twice, an approval."""
    tasks = (
        Task("t1", 'Charge "the" card \\ now', "service", "pay.charge", "COMPENSABLE",
             "pay.refund", ("card.number", "items.*.cvv")),
        Task("t2", "Ünïcode résumé \u2013 " + "x" * 300, "service", "class", "REVERSIBLE"),
        Task("t3", "", "service", "_9lives", "REVERSIBLE"),
        Task("t4", "", "service", "pay-charge", "REVERSIBLE"),
        Task("ok", "Sign-off", "user"),
        Task("t5", "", "service", "tool", "IRREVERSIBLE"),
        Task("t6", "again", "service", "class", "REVERSIBLE"),
        Task("c1", "Refund", "compensation", "pay.refund"),
    )  # fmt: skip
    order = ["s", "t1", "t2", "t3", "t4", "ok", "t5", "t6", "e"]
    return Flow(
        id="Process_ß",
        name='A "quoted" flow ' + "y" * 200,
        tasks=tasks,
        edges=tuple(itertools.pairwise(order)),
        compensations={"t1": "c1"},
        starts=("s",),
        ends=("e",),
    )


HOSTILE_NAME = '"""); __import__("os").system("id")  # \u2028 \\N{BULLET} \u0444\uff4c\u200b'
"""Text a diagram may hold in any name: quotes that close a literal, a call, an escape, a
comment, a line separator, confusable and invisible characters."""


def _service(task_id: str, tool: str, redact: str = "") -> str:
    attrs = f"name={quoteattr(tool)} semantics='REVERSIBLE'"
    if redact:
        attrs += f" redact={quoteattr(redact)}"
    return (
        f"<bpmn:serviceTask id={quoteattr(task_id)} name={quoteattr(HOSTILE_NAME)}>"
        f"<bpmn:extensionElements><saga:tool {attrs}/></bpmn:extensionElements>"
        "</bpmn:serviceTask>"
    )


def _hostile_document(tools: list[tuple[str, str]], process_id: str) -> str:
    """A diagram whose every name is hostile, its tasks in one sequence from a start event."""
    ids = [f'T{i}"""\\' + "x" * 40 for i in range(len(tools))]
    tasks = "".join(_service(i, tool, redact) for i, (tool, redact) in zip(ids, tools, strict=True))
    order = ["S", *ids, "E"]
    flows = "".join(
        f"<bpmn:sequenceFlow id='F{n}' sourceRef={quoteattr(a)} targetRef={quoteattr(b)}/>"
        for n, (a, b) in enumerate(itertools.pairwise(order))
    )
    return (
        "<bpmn:definitions xmlns:bpmn='http://www.omg.org/spec/BPMN/20100524/MODEL' "
        f"xmlns:saga='{NAMESPACE}'><bpmn:process id={quoteattr(process_id)} "
        f"name={quoteattr(HOSTILE_NAME * 3)}><bpmn:startEvent id='S'/>{tasks}"
        f"<bpmn:endEvent id='E'/>{flows}</bpmn:process></bpmn:definitions>"
    )


HOSTILE_TOOLS = [  # (tool name, redacted paths): keywords, builtins, dunders, our own names
    ("class", "match.secret, type"),
    ("__import__", "__import__"),
    ("Any", "Any"),
    ("saga_scope", "tool.x, compensator"),
    ("exec", "eval.code"),
    ("_" * 64, ""),
]


def test_generated_code_passes_ruff_and_mypy_strict_as_written(tmp_path: Path) -> None:
    hostile = _hostile_document(HOSTILE_TOOLS, 'Process"""\\' + "p" * 180)
    flows = {
        "trip_flow": parse_flow(TRIP.read_bytes()),
        "supplier_flow": parse_flow(SUPPLIER.read_text(encoding="utf-8")),
        "nasty_flow": _nasty_flow(),
        "hostile_flow": parse_flow(hostile),
    }
    paths = []
    for module, flow in flows.items():
        source = codegen(flow, module=module)
        assert max(len(line) for line in source.splitlines()) <= 100
        assert source.isascii()
        paths.append(tmp_path / f"{module}.py")
        paths[-1].write_text(source, encoding="utf-8")
    config = str(ROOT / "pyproject.toml")
    files = [str(p) for p in paths]
    for command in (  # one run of each tool over the three modules: mypy costs seconds per run
        [_tool("ruff"), "check", "--config", config, "--no-cache", *files],
        [_tool("ruff"), "format", "--config", config, "--no-cache", "--check", *files],
        [_tool("mypy"), "--strict", "--cache-dir", str(tmp_path / "mypy-cache"), *files],
    ):
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
        assert done.returncode == 0, f"{command[1]}: {done.stdout}{done.stderr}"


def test_the_trip_declares_each_tool_with_its_semantics_and_compensation() -> None:
    source = codegen(parse_flow(TRIP.read_bytes()), "trip")
    tree = ast.parse(source)
    decorators = {
        node.name: [ast.unparse(d) for d in node.decorator_list]
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }
    assert decorators["flights_book"] == [
        "tool(name='flights.book', semantics=COMPENSABLE, compensate='flights.cancel')"
    ]
    assert decorators["payments_charge"] == [
        "tool(name='payments.charge', semantics=COMPENSABLE, compensate='payments.refund', "
        "redact=['card.number'])"
    ]
    assert decorators["hotels_cancel"] == ["compensator('hotels.cancel')"]
    assert decorators["run_book_a_trip"] == ["saga_scope('Book a trip')"]
    scope = next(
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("run")
    )
    calls = [
        ast.unparse(s.value.func)
        for s in scope.body[1:]
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
    ]
    assert calls == ["flights_book", "hotels_book", "payments_charge"]


def test_an_approval_is_a_comment_and_a_redacted_argument_an_input() -> None:
    source = codegen(parse_flow(SUPPLIER.read_bytes()), "pay")
    body = source[source.index("def run_pay_a_supplier") :].splitlines()
    assert [line.strip() for line in body[2:]] == [
        'ledger_hold()  # "HoldFunds"',
        '# approval "Approve": the kit\'s approvers decide',
        'bank_wire(beneficiary=beneficiary)  # "SendWire"',
    ]
    assert "semantics=IRREVERSIBLE" in source
    assert "def run_pay_a_supplier(*, beneficiary: Any) -> None:" in source
    assert "def bank_wire(beneficiary: Any) -> Any:" in source


def _tool_names(tree: ast.Module) -> set[str]:
    """The ``name=`` literals of the module's calls (the ``@tool`` declarations)."""
    return {
        ast.literal_eval(kw.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for kw in node.keywords
        if kw.arg == "name"
    }


def test_the_nasty_names_become_distinct_identifiers_and_exact_literals() -> None:
    source = codegen(_nasty_flow(), "nasty")
    tree = ast.parse(source)
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(functions) == len(set(functions))
    assert {"pay_refund", "pay_charge", "class_", "tool_9lives", "pay_charge_2", "tool_2"} <= set(
        functions
    )
    assert _tool_names(tree) == {"pay.charge", "class", "_9lives", "pay-charge", "tool"}
    assert source.isascii()


def test_hostile_names_reach_the_code_only_as_literals_and_confusables_are_refused() -> None:
    source = codegen(parse_flow(_hostile_document(HOSTILE_TOOLS, "P")), "hostile")
    tree = ast.parse(source)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert called <= {"tool", "saga_scope", "NotImplementedError"} | defined
    assert _tool_names(tree) == {tool for tool, _ in HOSTILE_TOOLS}
    for confusable in ("\u0440ay.charge", "pay.charge\u200b", "pay charge", "pay\n.charge"):
        document = _hostile_document([(confusable, "")], "P")
        with pytest.raises(BpmnError, match="is not a letter or _ then up to 63") as caught:
            codegen(parse_flow(document))
        assert "\n" not in str(caught.value)


def test_a_flow_with_problems_is_not_written() -> None:
    flow = parse_flow(TRIP.read_bytes())
    broken = Flow(flow.id, flow.name, flow.tasks, flow.edges, {}, flow.starts, flow.ends)
    with pytest.raises(BpmnError, match=r"cannot become code: BookFlight: COMPENSABLE without"):
        codegen(broken)
    with pytest.raises(BpmnError, match="module name"):
        codegen(flow, module="not-a-module")


def test_bound_bodies_run_and_a_failing_last_task_compensates_newest_first(trip_run: Run) -> None:
    assert trip_run.stdout == "rolled back: card declined\n"
    assert trip_run.ledger == [
        "book flight",
        "book hotel",
        "charge card 4242",
        "cancel HT-2",
        "cancel FL-1",
    ]
    records = trip_run.records()
    undone = [r["data"].get("tool") for r in records if r["kind"] == "compensation.done"]
    assert undone == ["hotels.book", "flights.book"]
    intents = [r["data"]["tool"] for r in records if r["kind"] == "step.intent"]
    assert intents == ["flights.book", "hotels.book", "payments.charge"]
    [end] = [r for r in records if r["kind"] == "saga.end"]
    assert end["data"]["status"] == "rolled_back"
    assert "4242 4242" not in (trip_run.home / "log.jsonl").read_text(encoding="utf-8")
