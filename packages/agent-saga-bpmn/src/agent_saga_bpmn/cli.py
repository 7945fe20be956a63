"""``agent-saga bpmn``: diagrams to code and recorded sagas to diagrams, added by entry point.

* ``agent-saga bpmn codegen flow.bpmn -o flow.py`` reads a diagram, reports every problem of
  it (one line each, on stderr) or writes its ``@saga_scope`` module;
* ``agent-saga bpmn check flow.bpmn`` reports the problems only;
* ``agent-saga bpmn export <saga-id> -o saga.bpmn`` draws a recorded saga of the home's log
  (an id or a unique prefix, as ``agent-saga replay`` takes it).

Exit codes, as the core's commands: 0 done; 1 the diagram cannot be read or has problems, or
the log cannot be read; 2 bad input (no such file, saga or log). Every error is one line.
Nothing here runs a tool or a compensator, and ``export`` never writes to the log or the home.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from agent_saga.cli import current_settings

from ._codegen import codegen as write_code
from ._export import saga_to_bpmn
from ._model import BpmnError, Flow
from ._parse import parse_flow
from ._validate import validate
from ._xmlread import MAX_DOCUMENT_BYTES

EXIT_USAGE = 2


class _BadInput(click.ClickException):
    exit_code = EXIT_USAGE


def _one_line(text: str) -> str:
    """``text`` on one line, control characters shown as ``\\xNN`` (log contents are
    untrusted: they must not move a terminal's cursor)."""
    return "".join(
        f"\\x{ord(c):02x}" if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 else c
        for c in " ".join(text.split())
    )


def _read_flow(path: Path) -> Flow:
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:  # refused before a byte is read
            raise click.ClickException(
                f"{path}: {size:,} bytes, over the limit of {MAX_DOCUMENT_BYTES:,}; not read"
            )
        data = path.read_bytes()
    except FileNotFoundError:
        raise _BadInput(f"no file at {path}") from None
    except IsADirectoryError:
        raise _BadInput(f"{path} is a directory, not a BPMN file") from None
    except OSError as exc:
        raise click.ClickException(_one_line(f"cannot read {path}: {exc}")) from None
    try:
        return parse_flow(data)
    except BpmnError as exc:
        raise click.ClickException(_one_line(f"{path}: {exc}")) from None


def _report(path: Path, flow: Flow, known: tuple[str, ...]) -> None:
    problems = validate(flow, known_tools=set(known) if known else None)
    for problem in problems:
        click.echo(_one_line(f"{path}: {problem}"), err=True)
    if problems:
        raise click.ClickException(f"{path}: {len(problems)} problem(s), listed above")


def _write(text: str, output: Path | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(_one_line(f"cannot write {output}: {exc}")) from None


@click.group()
def bpmn() -> None:
    """BPMN 2.0: a drawn compensation flow to @saga_scope code, a recorded saga to a diagram."""


_KNOWN = click.option(
    "--known-tool",
    "known",
    multiple=True,
    metavar="NAME",
    help="A tool name the flow may use (repeat); when given, any other tool name is a problem.",
)


@bpmn.command()
@click.argument("flow_file", type=click.Path(path_type=Path))
@_KNOWN
def check(flow_file: Path, known: tuple[str, ...]) -> None:
    """Report every problem of the diagram FLOW_FILE (exit 1 when there is one)."""
    flow = _read_flow(flow_file)
    _report(flow_file, flow, known)
    click.echo(f"{flow_file}: {sum(t.kind == 'service' for t in flow.tasks)} task(s), no problem")


@bpmn.command()
@click.argument("flow_file", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the module here (default: standard output).",
)
@click.option(
    "--module",
    default=None,
    help="The module's name in its docstring (default: the output's stem, or 'flow').",
)
@_KNOWN
def codegen(
    flow_file: Path, output: Path | None, module: str | None, known: tuple[str, ...]
) -> None:
    """Write the diagram FLOW_FILE as Python: @tool declarations, @compensator stubs and one
    @saga_scope function calling the tasks in flow order."""
    flow = _read_flow(flow_file)
    _report(flow_file, flow, known)
    if module is None:
        stem = output.stem if output is not None else "flow"
        module = stem if stem.isidentifier() and stem.isascii() and len(stem) <= 40 else "flow"
    try:
        text = write_code(flow, module)
    except BpmnError as exc:
        raise click.ClickException(_one_line(f"{flow_file}: {exc}")) from None
    _write(text, output)
    if output is not None:
        click.echo(f"wrote {output}", err=True)


def _candidates(prefix: str) -> Iterator[dict[str, Any]]:
    """The records (JSON form) of the home's file log whose saga id may match ``prefix``."""
    from agent_saga import read_log

    settings = current_settings()
    store = settings.store()
    if store is not None and store not in ("file", "memory"):
        raise click.ClickException(
            "export reads the file log in the home; the configured store is not a file log"
        )
    if not (settings.home / "log.jsonl").is_file():
        raise _BadInput(
            f"no log at {settings.home / 'log.jsonl'} (check --home or AGENT_SAGA_HOME)"
        )
    key = prefix.replace("-", "").lower()
    for record in read_log(settings.home, key=settings.chain_key()):
        if record.saga is not None and record.saga.replace("-", "").lower().startswith(key):
            yield record.to_json()


def _resolve(saga_id: str, ids: list[str]) -> str:
    """The id ``saga_id`` names among ``ids`` (the sagas whose ids start with it, dashes and
    case aside): itself, else the only one; as ``agent-saga replay`` resolves it."""
    wanted = saga_id.strip()
    if wanted in ids:
        return wanted
    exact = [i for i in ids if i.replace("-", "").lower() == wanted.replace("-", "").lower()]
    matches = exact or ids
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise _BadInput(_one_line(f"no saga matches {wanted!r}"))
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise _BadInput(
        _one_line(f"saga id prefix {wanted!r} is ambiguous: {len(matches)} sagas match: {shown}")
    )


@bpmn.command()
@click.argument("saga_id")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the diagram here (default: standard output).",
)
def export(saga_id: str, output: Path | None) -> None:
    """Draw the recorded saga SAGA_ID (or a unique prefix) as BPMN 2.0 with its layout:
    steps, refusals, approvals and compensations. Read-only."""
    from agent_saga import AgentSagaError

    if not saga_id.strip():
        raise _BadInput("empty saga id")
    try:
        records = list(_candidates(saga_id.strip()))
    except (AgentSagaError, OSError) as exc:
        raise click.ClickException(_one_line(f"cannot read the log: {exc}")) from None
    chosen = _resolve(saga_id, list(dict.fromkeys(str(r["saga"]) for r in records)))
    try:
        text = saga_to_bpmn([r for r in records if r["saga"] == chosen])
    except BpmnError as exc:
        raise click.ClickException(_one_line(str(exc))) from None
    _write(text, output)
    if output is not None:
        click.echo(f"wrote {output} (saga {chosen})", err=True)
