"""Python source from a valid :class:`~agent_saga_bpmn.Flow`.

The module holds, in this order: ``@compensator`` stubs (one per compensator name), ``@tool``
declarations (one per tool name, with its semantics, ``compensate=`` name and ``redact=``
paths), and one ``@saga_scope`` function calling the service tasks in flow order, with a
comment where an approval (user task) stands. Every stub body raises ``NotImplementedError``
naming what to write.

Invariants: the output passes ``ruff check`` and ``ruff format --check`` (the repository's
configuration) and ``mypy --strict`` as it is; names from the diagram reach the code only as
escaped ASCII string literals (``json.dumps``), in docstrings and comments only escaped and
shortened, and as identifiers only after being reduced to ``[a-z0-9_]``; identifiers never
collide with each other, with the imports or with Python keywords. The same flow always gives
the same text.
"""

from __future__ import annotations

import json
import keyword
import re

from ._model import BpmnError, Flow, Task
from ._validate import validate

LINE = 100
"""The longest line written (the repository's ruff line length)."""
_RESERVED = frozenset(
    {"Any", "COMPENSABLE", "IRREVERSIBLE", "REVERSIBLE", "compensator", "saga_scope", "tool"}
)


def _literal(text: str) -> str:
    """An ASCII Python string literal of ``text``, quoted as ruff format quotes it: double
    quotes, unless the text holds more double than single quotes."""
    if text.count('"') > text.count("'"):
        inner = json.dumps(text)[1:-1].replace('\\"', '"').replace("'", "\\'")
        return f"'{inner}'"
    return json.dumps(text)


def _short_literal(text: str, room: int) -> str:
    """:func:`_literal` of ``text``, shortened (``...``) so the literal is at most ``room``."""
    if len(_literal(text)) <= room:
        return _literal(text)
    while text and len(_literal(text + "...")) > room:
        text = text[:-1]
    return _literal(text + "...")


def _quoted(text: str, room: int = 30) -> str:
    """``text`` escaped (ASCII, one line, no backslash-quote) and shortened to ``room``
    characters, in double quotes: for a docstring or a comment."""
    escaped = json.dumps(text)[1:-1].replace('\\"', "'").replace("\\\\", "/")
    if len(escaped) > room:
        cut = escaped[: room - 3]
        slash = cut.rfind("\\")
        if slash >= len(cut) - 5:  # do not cut an escape sequence in two
            cut = cut[:slash]
        escaped = cut + "..."
    return f'"{escaped}"'


class _Names:
    """Unique Python identifiers for diagram names. Each base remembers the next suffix to
    try, so many names reducing to one base cost linear time, not quadratic."""

    def __init__(self) -> None:
        self.taken = set(_RESERVED)
        self.suffixes: dict[str, int] = {}

    def claim(self, text: str, prefix: str) -> str:
        base = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:48] or prefix
        if base[0].isdigit():
            base = f"{prefix}_{base}"
        if keyword.iskeyword(base) or keyword.issoftkeyword(base):
            base += "_"
        name, suffix = base, self.suffixes.get(base, 2)
        while name in self.taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        self.suffixes[base] = suffix
        self.taken.add(name)
        return name


def _compensator(name: str, function: str, undoes: list[Task]) -> list[str]:
    more = f" and {len(undoes) - 1} more" if len(undoes) > 1 else ""
    return [
        f"@compensator({_literal(name)})",
        f"def {function}(result: Any, idempotency_key: str) -> None:",
        f'    """Undoes task {_quoted(undoes[0].id)}{more}."""',
        f"    raise NotImplementedError({_literal(name)})",
    ]


def _redact(paths: tuple[str, ...]) -> list[str]:
    one_line = f"    redact=[{', '.join(_literal(p) for p in paths)}],"
    if len(one_line) <= LINE:
        return [one_line]
    return ["    redact=[", *(f"        {_literal(p)}," for p in paths), "    ],"]


def parameters(task: Task) -> list[str]:
    """The tool's parameters: the first name of each redact path (the core requires a redacted
    path to name a parameter), in order, once each."""
    return list(dict.fromkeys(path.split(".", maxsplit=1)[0] for path in task.redact))


def _def(
    function: str, params: list[str], returns: str, *, keyword_only: bool = False
) -> list[str]:
    items = (["*"] if keyword_only and params else []) + [f"{p}: Any" for p in params]
    one = f"def {function}({', '.join(items)}) -> {returns}:"
    if len(one) <= LINE:
        return [one]
    return [f"def {function}(", *(f"    {item}," for item in items), f") -> {returns}:"]


def _call(target: str, params: list[str], task_id: str) -> list[str]:
    one = f"    {target}({', '.join(f'{p}={p}' for p in params)})  # {_quoted(task_id)}"
    if len(one) <= LINE:
        return [one]
    exploded = [f"    {target}(", *(f"        {p}={p}," for p in params), "    )"]
    return [f"    # {_quoted(task_id)}", *exploded]


def _tool(task: Task, function: str) -> list[str]:
    args = [f"    name={_literal(task.tool or '')},", f"    semantics={task.semantics},"]
    if task.compensator is not None:
        args.append(f"    compensate={_literal(task.compensator)},")
    if task.redact:
        args += _redact(task.redact)
    label = f" {_quoted(task.name, 40)}" if task.name else ""
    return [
        "@tool(",
        *args,
        ")",
        *_def(function, parameters(task), "Any"),
        f'    """Task {_quoted(task.id)}{label}."""',
        f"    raise NotImplementedError({_literal(task.tool or '')})",
    ]


def _scope(flow: Flow, function: str, calls: list[tuple[Task, str]]) -> list[str]:
    inputs = list(dict.fromkeys(p for task, _ in calls for p in parameters(task)))
    lines = [
        f"@saga_scope({_short_literal(flow.name, 80)})",
        *_def(function, inputs, "None", keyword_only=True),
        f'    """Process {_quoted(flow.id)}: its tasks in flow order, in one saga."""',
    ]
    for task, target in calls:
        if task.kind == "user":
            lines.append(f"    # approval {_quoted(task.id)}: the kit's approvers decide")
        else:
            lines += _call(target, parameters(task), task.id)
    return lines


def codegen(flow: Flow, module: str = "flow") -> str:
    """The flow as a Python module (source text) named ``module`` in its docstring.

    Raises:
        BpmnError: ``module`` is not a Python identifier, or the flow has problems
            (:func:`~agent_saga_bpmn.validate`, without known tools); the message names the
            first and how many there are.
    """
    if (
        not module.isidentifier()
        or not module.isascii()
        or keyword.iskeyword(module)
        or len(module) > 40
    ):
        raise BpmnError(
            f"module name {module!r} is not a Python identifier of 40 characters or less"
        )
    problems = validate(flow)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BpmnError(f"the flow cannot become code: {problems[0]}{more}")
    names = _Names()
    service = [t for t in flow.tasks if t.kind == "service"]
    names.taken.update(p for task in service for p in parameters(task))
    compensators: dict[str, list[Task]] = {}
    for task in service:
        if task.compensator is not None:
            compensators.setdefault(task.compensator, []).append(task)
    tools: dict[str, str] = {}
    for task in service:
        if task.tool is not None and task.tool not in tools:
            tools[task.tool] = names.claim(task.tool, "tool")
    body: list[list[str]] = []
    for name, undoes in compensators.items():
        body.append(_compensator(name, names.claim(name, "compensate"), undoes))
    declared = set()
    for task in service:
        if task.tool is not None and task.tool not in declared:
            declared.add(task.tool)
            body.append(_tool(task, tools[task.tool]))
    calls = [(t, tools.get(t.tool or "", "")) for t in flow.tasks if t.kind in ("service", "user")]
    body.append(_scope(flow, names.claim(f"run_{flow.name}", "run"), calls))
    semantics = sorted({t.semantics or "" for t in service})
    imported = ", ".join(
        [*semantics, *(["compensator"] if compensators else []), "saga_scope"]
        + (["tool"] if service else [])
    )
    header = [
        f'"""{module}: a saga generated from a BPMN diagram by agent-saga bpmn codegen.',
        "",
        f"Process {_quoted(flow.id)}.",
        "Write each stub's body where it raises NotImplementedError; the order of the calls, the",
        "semantics and the compensations are the diagram's.",
        '"""',
        "",
        *(["from typing import Any", ""] if service else []),
        f"from agent_saga import {imported}",
    ]
    sections = ["\n".join(header)] + ["\n".join(block) for block in body]
    return "\n\n\n".join(sections) + "\n"
