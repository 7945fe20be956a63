"""Judging a :class:`~agent_saga_bpmn.Flow`: what keeps it from becoming one saga.

Invariants: :func:`validate` never raises on a parsed flow and reports every problem it finds
(cycles: the first :data:`MAX_CYCLES`), each naming one element in a line of bounded length, in
a stable order (the flow's structure first, then task by task in flow order). It runs in time
linear in the flow's nodes and edges (plus the cycles it reports), so a hostile diagram within
the parser's size cap costs no more than a second or so. An empty list means
:func:`~agent_saga_bpmn.codegen` will write the flow.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Collection

from ._graph import cycles, reachable, successors
from ._model import SEMANTICS, Flow, Problem, Task

TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}")
"""A tool or compensator name code can carry on one line: a letter or ``_``, then letters,
digits and ``_ . : / -``, at most 64 characters."""
REDACT_PATH = re.compile(r"[A-Za-z0-9_*-]+(\.[A-Za-z0-9_*-]+)*")
MAX_CYCLES = 20
"""At most this many cycles are reported (the first found): a hostile diagram can hold a
number of cycles quadratic in its size."""
SHOWN = 8
"""A cycle or a list of targets longer than this is shown by its ends (``a -> b -> ... ->
y -> z``), so every problem is a line of bounded length."""


def validate(flow: Flow, known_tools: Collection[str] | None = None) -> list[Problem]:
    """Every problem of ``flow``, each a :class:`Problem` naming its element.

    Reported: no start event, or more than one; a gateway, sub-process or other node a saga
    cannot express; a cycle; a node with several outgoing sequence flows; a service or user
    task the start event does not reach; a service task without a tool name, with an unknown
    semantics, a COMPENSABLE one without a compensation handler, an IRREVERSIBLE one with one
    or without an approval (user task) on every path to it from the start; a compensator
    named on the task that differs from its handler's; one tool declared two ways; a tool name
    not in ``known_tools`` (when given: the names of service tasks' tools are checked, not
    compensators'); a compensation task without a name or compensating nothing; a malformed
    redact path.
    """
    problems = _structure(flow)
    declared: dict[str, Task] = {}
    handled = set(flow.compensations.values())
    context = _Context(flow)
    for task in flow.tasks:
        if task.kind == "service":
            problems += _service(context, task, known_tools, declared)
        elif task.kind == "compensation":
            problems += _compensation(task, handled)
        elif task.id in flow.compensations:
            problems.append(
                Problem(
                    task.id,
                    "an approval cannot be compensated; only a "
                    "service task has a compensation handler",
                )
            )
        problems += [_redact_problem(task, path) for path in task.redact if _bad_path(path)]
    return problems


class _Context:
    """What judging each task needs from the whole flow, computed once (not once per task)."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.by_id = {t.id: t for t in flow.tasks}
        approvals = {t.id for t in flow.tasks if t.kind == "user"}
        if flow.starts:
            self.unguarded = reachable(flow.starts, flow.edges, blocked=approvals)
        else:  # judged without a start: a task after no approval is unguarded
            self.unguarded = {t.id for t in flow.tasks} - reachable(approvals, flow.edges)
            self.unguarded |= approvals


def _shown(items: list[str], joiner: str) -> str:
    """``items`` joined, or only their ends when there are more than :data:`SHOWN`."""
    if len(items) <= SHOWN:
        return joiner.join(items)
    return joiner.join([*items[: SHOWN // 2], "...", *items[-(SHOWN // 2) :]])


def _bad_path(path: str) -> bool:
    head = path.split(".", maxsplit=1)[0]
    return (
        len(path) > 64
        or not REDACT_PATH.fullmatch(path)
        or not (head.isidentifier() and head.isascii())
        or keyword.iskeyword(head)
        or head == "idempotency_key"
    )


def _redact_problem(task: Task, path: str) -> Problem:
    return Problem(
        task.id,
        f"redact path {path!r} is not a parameter name then dotted names, "
        "at most 64 characters (card.number, items.*.cvv)",
    )


def _structure(flow: Flow) -> list[Problem]:
    problems: list[Problem] = []
    if not flow.starts:
        problems.append(Problem(flow.id, "no start event: a saga begins at exactly one"))
    problems += [
        Problem(
            extra,
            f"a second start event (the first is {flow.starts[0]}): a saga begins at exactly one",
        )
        for extra in flow.starts[1:]
    ]
    problems += [
        Problem(
            node,
            f"a {element} is not supported: a saga runs its tasks one after another "
            "(no gateways, sub-processes or intermediate events)",
        )
        for node, element in flow.unsupported
    ]
    nodes = [
        *flow.starts,
        *(t.id for t in flow.tasks),
        *flow.ends,
        *(n for n, _ in flow.unsupported),
    ]
    for loop in cycles(nodes, flow.edges, limit=MAX_CYCLES):
        path = _shown([*loop, loop[0]], " -> ")
        size = f" of {len(loop)} nodes" if len(loop) + 1 > SHOWN else ""
        problems.append(
            Problem(loop[0], f"a cycle{size} ({path}): a saga runs each task once, in order")
        )
    for node, targets in successors(flow.edges).items():
        if len(targets) > 1:
            problems.append(
                Problem(
                    node,
                    f"{len(targets)} outgoing sequence flows (to "
                    f"{_shown(targets, ', ')}): a saga's tasks run in one sequence",
                )
            )
    connected = reachable(flow.starts, flow.edges)
    touched = {n for edge in flow.edges for n in edge}
    for task in flow.tasks:
        if task.kind == "compensation":
            continue
        if (flow.starts and task.id not in connected) or (
            not flow.starts and task.id not in touched
        ):
            problems.append(Problem(task.id, "not connected to the start event by sequence flows"))
    return problems


def _service(
    context: _Context, task: Task, known_tools: Collection[str] | None, declared: dict[str, Task]
) -> list[Problem]:
    problems: list[Problem] = []
    flow = context.flow
    handler = flow.compensations.get(task.id)
    if task.tool is None:
        problems.append(Problem(task.id, 'no tool name: give it <saga:tool name="..."/>'))
    elif not TOOL_NAME.fullmatch(task.tool):
        problems.append(
            Problem(
                task.id,
                f"tool name {task.tool!r} is not a letter or _ then up "
                "to 63 letters, digits or _ . : / -",
            )
        )
    elif known_tools is not None and task.tool not in known_tools:
        problems.append(
            Problem(
                task.id, f"unknown tool {task.tool!r}: not among the {len(known_tools)} known tools"
            )
        )
    if task.semantics not in SEMANTICS:
        problems.append(
            Problem(
                task.id,
                f"semantics {task.semantics!r} is not REVERSIBLE, COMPENSABLE or IRREVERSIBLE",
            )
        )
    if task.semantics == "COMPENSABLE" and handler is None:
        problems.append(
            Problem(
                task.id,
                "COMPENSABLE without a compensation handler: attach a "
                "compensation boundary event associated with a compensation task",
            )
        )
    if task.semantics == "IRREVERSIBLE":
        problems += _irreversible(context, task, handler)
    if handler is not None:
        drawn = context.by_id.get(handler)
        if drawn is not None and drawn.tool and task.compensator != drawn.tool:
            problems.append(
                Problem(
                    task.id,
                    f"compensator {task.compensator!r} differs from "
                    f"{drawn.tool!r}, the name of its handler {handler}",
                )
            )
    if task.compensator is not None and not TOOL_NAME.fullmatch(task.compensator):
        problems.append(
            Problem(
                task.id,
                f"compensator name {task.compensator!r} is not a letter "
                "or _ then up to 63 letters, digits or _ . : / -",
            )
        )
    if task.tool is not None:
        first = declared.setdefault(task.tool, task)
        if first is not task and (first.semantics, first.compensator, first.redact) != (
            task.semantics,
            task.compensator,
            task.redact,
        ):
            problems.append(
                Problem(
                    task.id,
                    f"tool {task.tool!r} is declared differently by "
                    f"{first.id} (semantics, compensator or redact)",
                )
            )
    return problems


def _irreversible(context: _Context, task: Task, handler: str | None) -> list[Problem]:
    problems: list[Problem] = []
    if handler is not None:
        problems.append(
            Problem(
                task.id,
                "IRREVERSIBLE yet it has a compensation handler: "
                "declare it COMPENSABLE, or remove the handler",
            )
        )
    if task.id in context.unguarded:
        problems.append(
            Problem(
                task.id,
                "IRREVERSIBLE without an approval before it: put a "
                "user task on every path from the start to it",
            )
        )
    return problems


def _compensation(task: Task, handled: set[str]) -> list[Problem]:
    problems: list[Problem] = []
    if task.tool is None:
        problems.append(
            Problem(
                task.id,
                'a compensation task without a compensator name: give it <saga:tool name="..."/>',
            )
        )
    elif not TOOL_NAME.fullmatch(task.tool):
        problems.append(
            Problem(
                task.id,
                f"compensator name {task.tool!r} is not a letter or _ "
                "then up to 63 letters, digits or _ . : / -",
            )
        )
    if task.id not in handled:
        problems.append(
            Problem(
                task.id,
                "compensates nothing: associate it with a compensation "
                "boundary event on a service task",
            )
        )
    return problems
