"""``agent-saga recover``: finish the rollback of sagas whose process died.

The user's compensators and probes are found by importing the modules that declare them
(``--import``, repeatable, and ``imports`` in the project configuration). A module that cannot
be imported is an error: recovering without it would escalate every saga that needs it.

Exit 3 says a human is needed: for a saga escalated in this run, and for any saga an earlier
run (or the process itself) left ``needs_human``, which stands until a human settles it; each
is listed, so a second run never reports "nothing to recover" over one.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Sequence

import click

from .._config import find_config
from .._history.build import build_history
from .._history.recovery import RecoveryReport
from .._kit.agentkit import AgentKit
from .._log.records import SagaStatus
from ._errors import CliError, one_line
from ._logfile import require_store
from ._settings import Settings

EXIT_NEEDS_HUMAN = 3
"""``recover``: at least one saga needs a human (listed on stdout)."""


def import_user_modules(names: list[str]) -> list[str]:
    """Import each module (the working directory is on the path, as for ``python -m``)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            raise CliError(f"cannot import {name!r} (needed for its compensators): {exc}") from exc
    return names


def standing_needs_human(kit: AgentKit, report: RecoveryReport) -> list[tuple[str, str]]:
    """``(saga id, name)`` of every saga whose status in the log is ``needs_human``, that this
    pass did not escalate itself and that no human has settled (``agent-saga settle``)."""
    escalated = {saga.saga_id for saga in report.needs_human}
    views = build_history(kit.store.records()).sagas
    return [
        (view.id, view.name)
        for view in views
        if view.status is SagaStatus.NEEDS_HUMAN
        and view.id not in escalated
        and view.settled is None
    ]


def report_lines(report: RecoveryReport, standing: Sequence[tuple[str, str]] = ()) -> list[str]:
    """A plain account of one pass: each recovered saga and what happened to each step, then
    the sagas that still need a human from before (log values as they are: the command shows
    each line through :func:`._errors.one_line`)."""
    lines: list[str] = []
    for saga in report.recovered:
        lines.append(f"{saga.saga_id}  {saga.name}  -> {saga.status.value}")
        for step in saga.steps:
            detail = f": {one_line(step.detail)}" if step.detail else ""
            lines.append(f"    #{step.ordinal} {step.tool}  {step.action}{detail}")
    for saga_id in report.live:
        lines.append(f"{saga_id}  still running (its process is alive): left alone")
    for saga_id in report.claimed_elsewhere:
        lines.append(f"{saga_id}  being recovered by another worker")
    for saga_id, name in standing:
        lines.append(f"{saga_id}  {one_line(name)}  still needs a human (needs_human)")
    return lines


def as_json(report: RecoveryReport, standing: list[tuple[str, str]]) -> dict[str, object]:
    return {
        "recovered": [
            {
                "saga": s.saga_id,
                "name": s.name,
                "status": s.status.value,
                "steps": [
                    {"ordinal": t.ordinal, "tool": t.tool, "action": t.action, "detail": t.detail}
                    for t in s.steps
                ],
            }
            for s in report.recovered
        ],
        "live": list(report.live),
        "claimed_elsewhere": list(report.claimed_elsewhere),
        "needs_human": [s.saga_id for s in report.needs_human],
        "still_needs_human": [saga_id for saga_id, _ in standing],
    }


@click.command()
@click.option(
    "--import",
    "modules",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE first so its compensators and probes register (repeatable).",
)
@click.option("--watch", is_flag=True, help="Keep running: a recovery pass every --interval.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between passes with --watch.",
)
@click.option("--json", "raw", is_flag=True, help="One JSON object per pass.")
@click.pass_context
def recover(
    ctx: click.Context, modules: tuple[str, ...], watch: bool, interval: float, raw: bool
) -> None:
    """Finish the rollback of every saga whose process died (exit 3 if any needs a human).

    A saga is recovered when it has no end record and its owner's lock is released. Committed
    steps are compensated newest first with their original idempotency keys; a step whose
    outcome was not logged is compensated only if the tool's probe says it landed, and is
    escalated otherwise. Each recovered saga gets a terminal record, so a second run does
    nothing. Compensators must be importable: pass --import or set 'imports' in
    agent-saga.toml / [tool.agent-saga]. A saga left needs_human by an earlier run is listed
    again (exit 3) until a human settles it.
    """
    settings: Settings = ctx.obj
    require_store(settings)
    import_user_modules([*find_config().imports, *modules])
    with settings.open_kit() as kit:
        while True:
            report = kit.recover()
            standing = standing_needs_human(kit, report)
            if raw:
                click.echo(json.dumps(as_json(report, standing), sort_keys=True))
            elif report.recovered or not watch:
                for line in report_lines(report, standing) or ["nothing to recover"]:
                    settings.console.print(one_line(line), markup=False, highlight=False)
            if not watch:
                break
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return
    waiting = [s.saga_id for s in report.needs_human] + [saga_id for saga_id, _ in standing]
    if waiting:
        settings.err.print(one_line(f"needs a human: {', '.join(waiting)}"), markup=False)
        raise SystemExit(EXIT_NEEDS_HUMAN)
