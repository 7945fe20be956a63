"""``agent-saga bpmn``: diagrams to code and recorded sagas to diagrams, added by entry point.

* ``agent-saga bpmn codegen flow.bpmn -o flow.py`` reads a diagram, reports every problem of
  it (one line each, on stderr) or writes its ``@saga_scope`` module;
* ``agent-saga bpmn check flow.bpmn`` reports the problems only;
* ``agent-saga bpmn <saga-id> -o saga.bpmn`` (or ``agent-saga bpmn export <saga-id>``) draws
  a recorded saga of the configured log, the home's file log or the fleet's on PostgreSQL (an
  id or a unique prefix, as ``agent-saga replay`` takes it; read through
  :func:`agent_saga.cli.saga_records`). A first argument that names no command is a saga id.

Exit codes, as the core's commands: 0 done; 1 the diagram cannot be read or has problems, or
the log cannot be read; 2 bad input (no such file, saga or log). Every error is one line.
Nothing here runs a tool or a compensator, and ``export`` never writes to the log or the home.
"""

from __future__ import annotations

from pathlib import Path

import click
from agent_saga.cli import current_settings, saga_records

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


_SHORT_FORM = "agent_saga_bpmn.short_form"


class _SagaOrCommand(click.Group):
    """A group whose first argument is a command's name or, when it names no command, a saga
    id: ``bpmn <saga-id> [-o FILE]`` runs ``bpmn export <saga-id> [-o FILE]``. A command's
    name wins over a saga id spelt the same (``bpmn export <id>`` always draws a saga)."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            ctx.meta[_SHORT_FORM] = True
            return "export", export, args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] SAGA_ID [-o FILE]")
        formatter.write_usage(ctx.command_path, "[OPTIONS] COMMAND [ARGS]...", prefix="   or: ")


@click.group(cls=_SagaOrCommand)
def bpmn() -> None:
    """BPMN 2.0: a drawn compensation flow to @saga_scope code, a recorded saga to a diagram.

    \b
    agent-saga bpmn SAGA_ID -o saga.bpmn      draw a recorded saga (as 'export')
    agent-saga bpmn codegen flow.bpmn -o flow.py
    agent-saga bpmn check flow.bpmn

    SAGA_ID is an id or a unique prefix of one; a command's name wins over a saga id spelt
    the same ('bpmn export SAGA_ID' always draws a saga).
    """


_OUTPUT = click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write here (default: standard output).",
)


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
@_OUTPUT
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


@bpmn.command()
@click.argument("saga_id")
@_OUTPUT
@click.pass_context
def export(ctx: click.Context, saga_id: str, output: Path | None) -> None:
    """Draw the recorded saga SAGA_ID (or a unique prefix) as BPMN 2.0 with its layout:
    steps, refusals, approvals and compensations. Read-only; the log may be the home's file
    log or the fleet's on PostgreSQL."""
    try:
        records = saga_records(current_settings(), saga_id)
    except click.ClickException as exc:
        if not (ctx.meta.get(_SHORT_FORM) and exc.message.startswith("no saga matches")):
            raise
        commands = ", ".join(sorted(bpmn.commands))
        raise _BadInput(f"{exc.message}; nor is it a command ({commands})") from None
    chosen = str(records[0].saga)
    try:
        text = saga_to_bpmn([record.to_json() for record in records])
    except BpmnError as exc:
        raise click.ClickException(_one_line(str(exc))) from None
    _write(text, output)
    if output is not None:
        click.echo(f"wrote {output} (saga {chosen})", err=True)
