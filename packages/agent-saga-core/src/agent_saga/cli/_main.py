"""The ``agent-saga`` command group and its commands.

Invariants:

* Reading commands (``sagas``, ``replay``, ``verify``, ``status``, ``guarantees``) never create
  the home or the log; ``sagas``, ``replay`` and ``verify`` never open the log for writing.
* Every command reads the log the configuration names (the home's file log, or the fleet log
  on PostgreSQL) with the chain key from ``--chain-key-file``, ``$AGENT_SAGA_CHAIN_KEY_FILE``
  or ``chain_key_file``; a wrong or missing key is one line that says so.
* ``replay`` runs no tool and no compensator: it renders :mod:`agent_saga._history.build` views.
* ``halt`` engages the kill switch before anything else and reports success once the ``HALT``
  file is durable, even when the log (and so the ``control.halt`` record) cannot be written.
* Every expected failure ends as one ``Error: ...`` line on stderr with a documented exit code.
"""

from __future__ import annotations

import importlib
import json
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from .._config import resolve_home
from .._errors import AgentSagaError, CorruptLogError, LogError
from .._kit.version import __version__
from .._log.records import SagaStatus
from ._console import make_console
from ._errors import EXIT_FAILED, BadInputError, CliError, one_line
from ._plugins import load_plugin_command, plugin_commands
from ._settings import Settings, pass_settings

if TYPE_CHECKING:
    from .._gate.killswitch import KillSwitch

LAZY_COMMANDS = {
    **dict.fromkeys(("archive",), "._archive"),
    **dict.fromkeys(("approvals", "approve", "deny", "keys"), "._approvals"),
    **dict.fromkeys(("merge", "sync"), "._mesh"),
    **dict.fromkeys(("checkpoint", "prove", "verify-proof", "certify", "redact"), "._proofs"),
    **dict.fromkeys(("recover",), "._recover"),
    **dict.fromkeys(("settle",), "._settle"),
    **dict.fromkeys(("verify",), "._verify"),
}
"""The built-in commands defined in other modules, each imported when it is run or its help is
shown (a module's ``COMMANDS``, or its attribute of the command's name): starting the command
line imports only what the command called needs."""


def load_lazy_command(name: str) -> click.Command:
    """The built-in command ``name`` of :data:`LAZY_COMMANDS`, importing its module."""
    module = importlib.import_module(LAZY_COMMANDS[name], __package__)
    for command in getattr(module, "COMMANDS", ()):
        if command.name == name:
            return cast(click.Command, command)
    return cast(click.Command, getattr(module, name))


EPILOG = """\b
Exit codes:
  0  success; verify: the log (and its saga index) is intact; status: ready
  1  the answer is no or the action failed: the log does not verify or is
     corrupt, its saga index differs from it (rebuilt), status is not ready,
     the demo or a write failed
  2  bad input: a bad or missing option, an unknown or ambiguous saga id,
     no agent-saga home or no log at the given path
  3  recover: at least one saga needs a human

\b
The log: the file store in the home, or the fleet log on PostgreSQL named by
'store' (and 'store_schema') in agent-saga.toml / [tool.agent-saga], or by
$AGENT_SAGA_STORE (and $AGENT_SAGA_STORE_SCHEMA). A keyed chain's key is read
from --chain-key-file, $AGENT_SAGA_CHAIN_KEY_FILE or 'chain_key_file'.
"""


class _OneLineUsageError(click.UsageError):
    """A usage error shown as one line (click's default adds the usage and a hint)."""

    def show(self, file: Any = None) -> None:
        hint = f" Try '{self.ctx.command_path} --help'." if self.ctx is not None else ""
        click.echo(f"Error: {one_line(self.format_message())}{hint}", err=True)


def _one_line_usage(exc: click.UsageError) -> click.UsageError:
    help_error: type[Exception] | None = getattr(click.exceptions, "NoArgsIsHelpError", None)
    if help_error is not None and isinstance(exc, help_error):
        return exc  # `agent-saga` alone prints the help, as it should
    return _OneLineUsageError(exc.format_message(), exc.ctx)


class _Group(click.Group):
    """Turns library and OS errors into one-line errors and usage errors into one line."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from exc

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS, *plugin_commands()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in LAZY_COMMANDS:
            command = load_lazy_command(cmd_name)
        elif command is None and cmd_name in plugin_commands():
            command = load_plugin_command(cmd_name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand:  # suggest the lazy and plugin ones too
            possible = self.list_commands(ctx)
            raise click.exceptions.NoSuchCommand(
                str(args[0]), possibilities=possible, ctx=ctx
            ) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from exc
        except CorruptLogError as exc:
            from ._logfile import key_problem

            explained = key_problem(ctx.obj, exc) if isinstance(ctx.obj, Settings) else None
            raise CliError(explained or f"{type(exc).__name__}: {exc}") from exc
        except (AgentSagaError, OSError) as exc:
            raise CliError(f"{type(exc).__name__}: {exc}") from exc


@click.group(cls=_Group, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=(
        "The agent-saga home (log, kill switch). Default: $AGENT_SAGA_HOME, then 'home' in "
        "agent-saga.toml or [tool.agent-saga], else ./.agent-saga."
    ),
)
@click.option(
    "--chain-key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=(
        "A file holding the key of a keyed hash chain (AgentKit(chain_key=...)). Default: "
        "$AGENT_SAGA_CHAIN_KEY_FILE, then 'chain_key_file' in agent-saga.toml."
    ),
)
@click.option("--no-color", is_flag=True, help="Plain text output (NO_COLOR is honoured too).")
@click.version_option(__version__, prog_name="agent-saga")
@click.pass_context
def main(
    ctx: click.Context, home: Path | None, chain_key_file: Path | None, no_color: bool
) -> None:
    """agent-saga: inspect and control the transaction log of AI agents' tool calls.

    Reading commands (sagas, replay, verify, status, guarantees) never create the home or a
    log, and never run a tool or a compensator.
    """
    ctx.obj = Settings(
        home=resolve_home(home),
        home_given=home is not None,
        console=make_console(no_color=no_color),
        err=make_console(no_color=no_color, stderr=True),
        chain_key_file=chain_key_file,
    )


def kill_switch_for(settings: Settings) -> KillSwitch:
    """The switch agents read: a row beside a PostgreSQL log (fleet mode), else the HALT file."""
    from .._gate.killswitch import FileKillSwitch
    from ._logfile import is_fleet, require_home

    if is_fleet(settings):
        from .._gate.killswitch_pg import PostgresKillSwitch
        from .._postgres.connection import DEFAULT_SCHEMA

        schema = settings.store_schema() or DEFAULT_SCHEMA
        return PostgresKillSwitch(str(settings.store()), schema=schema)
    require_home(settings.home)
    return FileKillSwitch(settings.home)


@main.command()
@pass_settings
def demo(settings: Settings) -> None:
    """Book a trip with a scripted agent (offline): a gate refusal, a failure, a rollback.

    Writes to the durable file store in the home (created if needed); running it again appends
    another saga. Ends with the commands that inspect what happened.
    """
    from ._demo import run_demo

    hint = f"--home {shlex.quote(str(settings.home))} " if settings.home_given else ""
    code = run_demo(
        settings.console,
        settings.home,
        command_prefix=f"agent-saga {hint}",
        chain_key=settings.chain_key(),
    )
    if code:
        raise SystemExit(code)


@main.command()
@click.option(
    "--status",
    "wanted",
    type=click.Choice([s.value for s in SagaStatus]),
    default=None,
    help="Only sagas with this status.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help="At most this many sagas, newest first (read through the saga index).",
)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    help="Only sagas begun since WHEN: an ISO date or time (UTC unless it says), or an age "
    "such as 90m, 12h, 7d. Lists newest first.",
)
@pass_settings
def sagas(settings: Settings, wanted: str | None, limit: int | None, since: str | None) -> None:
    """List the sagas in the log, oldest first (newest last); with --limit or --since, newest
    first, reading only the sagas shown through the saga index."""
    from ._logfile import read_history
    from ._render import render_sagas
    from ._since import newest_sagas, parse_since

    status = None if wanted is None else SagaStatus(wanted)
    if limit is None and since is None:
        history, where = read_history(settings)
        views = [v for v in history.sagas if status is None or v.status is status]
        events = history.events if status is None else ()
        render_sagas(settings.console, views, events, where)
        return
    after = None if since is None else parse_since(since, time.time())
    views, where = newest_sagas(settings, limit, after, status)
    render_sagas(settings.console, views, (), where)


@main.command()
@click.argument("saga_id")
@pass_settings
def replay(settings: Settings, saga_id: str) -> None:
    """Show what one saga did, step by step, from the log (SAGA_ID or a unique prefix).

    Read-only: arguments, outcomes, refusals, compensations and the cause are read from the
    log; no tool and no compensator is run.
    """
    from .._history.build import SagaLookupError
    from .._history.indexed import find_indexed
    from .._history.lookup import find_saga
    from ._logfile import read_history, through_index
    from ._render import render_replay

    try:
        view = through_index(settings, lambda index: find_indexed(index, saga_id))
        if view is None:
            history, _ = read_history(settings)
            view = find_saga(history.sagas, saga_id)
    except SagaLookupError as exc:
        raise BadInputError(str(exc)) from exc
    render_replay(settings.console, view)


@main.command()
@click.option("--reason", required=True, help="Why effects must stop (shown to every agent).")
@pass_settings
def halt(settings: Settings, reason: str) -> None:
    """Engage the kill switch: every agent on this home refuses its next effect.

    The HALT file is written (and fsynced) first, then a control.halt record is appended to the
    log when the log can be written; exit 0 means the switch is engaged, and a warning on stderr
    says when the record could not be written (a corrupt log does not stop a halt).
    """
    from ._logfile import key_problem

    if not reason.strip():
        raise click.BadParameter("must not be empty", param_hint="'--reason'")
    switch = kill_switch_for(settings)
    switch.halt(reason, at=time.time())
    settings.console.print(f"halted: {one_line(reason)}", markup=False)
    try:
        with settings.open_kit() as kit:
            kit.halt(reason)
    except (AgentSagaError, OSError) as exc:
        explained = key_problem(settings, exc) if isinstance(exc, CorruptLogError) else None
        settings.err.print(
            f"warning: the kill switch is engaged, but the control.halt record could not be "
            f"written: {one_line(explained or str(exc))}",
            markup=False,
        )


@main.command()
@pass_settings
def resume(settings: Settings) -> None:
    """Release the kill switch and record it (refused while the log cannot be written)."""
    from ._logfile import key_problem

    state = kill_switch_for(settings).state()
    if not state.halted:
        settings.console.print("not halted; nothing to resume")
        return
    try:
        kit = settings.open_kit()
    except CorruptLogError as exc:
        explained = key_problem(settings, exc)
        raise CliError(f"not resumed, the kill switch stays engaged: {explained or exc}") from exc
    except (LogError, OSError) as exc:
        raise CliError(
            f"not resumed, the kill switch stays engaged: cannot open the log: {exc}"
        ) from exc
    with kit:
        kit.resume()
    settings.console.print("resumed: agents may run effects again")


@main.command()
@pass_settings
def status(settings: Settings) -> None:
    """Readiness of this home: the log store, the kill switch (exit 1 when not ready).

    Compensators are checked only for tools declared in this process (none, from the shell).
    """
    from .._kit.manifest import Status
    from ._logfile import key_problem, require_store
    from ._render import render_status

    require_store(settings)
    try:
        kit = settings.open_kit()
    except (LogError, OSError) as exc:
        explained = key_problem(settings, exc) if isinstance(exc, CorruptLogError) else None
        if explained is not None:
            raise CliError(explained) from exc
        halt = kill_switch_for(settings).state()
        switch = f"halted: {halt.reason}" if halt.halted else "not halted"
        report = Status(
            False,
            (f"log store cannot be opened: {exc}",),
            {"log_store": "cannot be opened", "kill_switch": switch},
        )
    else:
        with kit:
            report = kit.status()
    render_status(settings.console, report, settings.home)
    if not report.ready:
        raise SystemExit(EXIT_FAILED)


@main.command()
@click.option("--json", "raw", is_flag=True, help="Compact JSON on one line, nothing else.")
@pass_settings
def guarantees(settings: Settings, raw: bool) -> None:
    """Print the guarantees manifest (JSON; indented unless --json).

    It describes the kit this command opens on the home: the file store there, no gate rules,
    and no tools declared. An agent's own kit adds its rules and tools: ask it for
    kit.guarantees() to see those.
    """
    from ._logfile import require_store

    require_store(settings)
    with settings.open_kit() as kit:
        manifest = kit.guarantees()
    if raw:
        click.echo(json.dumps(manifest, sort_keys=True, ensure_ascii=False))
    else:
        settings.console.print_json(data=manifest, sort_keys=True)
