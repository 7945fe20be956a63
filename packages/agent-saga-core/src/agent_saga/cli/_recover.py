"""``agent-saga recover``: finish the rollback of sagas whose process died.

The user's compensators and probes are found by importing the modules that declare them
(``--import``, repeatable, and ``imports`` in the project configuration). A module that cannot
be imported is an error: recovering without it would escalate every saga that needs it.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

import click

from .._config import find_config
from .._history.recovery import RecoveryReport
from .._kit.agentkit import AgentKit
from ._errors import CliError, one_line
from ._logfile import require_log

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


def report_lines(report: RecoveryReport) -> list[str]:
    """A plain account of one pass: each recovered saga and what happened to each step."""
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
    return lines


def as_json(report: RecoveryReport) -> dict[str, object]:
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
    agent-saga.toml / [tool.agent-saga].
    """
    settings = ctx.obj
    require_log(settings.home)
    import_user_modules([*find_config().imports, *modules])
    with AgentKit(home=settings.home) as kit:
        while True:
            report = kit.recover()
            if raw:
                click.echo(json.dumps(as_json(report), sort_keys=True))
            elif report.recovered or not watch:
                for line in report_lines(report) or ["nothing to recover"]:
                    settings.console.print(line, markup=False, highlight=False)
            if not watch:
                break
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return
    if report.needs_human:
        names = ", ".join(s.saga_id for s in report.needs_human)
        settings.err.print(f"needs a human: {names}", markup=False)
        raise SystemExit(EXIT_NEEDS_HUMAN)
