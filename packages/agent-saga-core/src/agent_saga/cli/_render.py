"""How the commands show things: rich output that degrades to plain text.

Invariant: every value that comes from the log (tool names, arguments, reasons, error messages)
goes through :func:`plain` or JSON encoding before it is printed, so log contents can neither
inject rich markup nor terminal control sequences.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from .._clock import format_ts
from .._history.build import (
    CompensationState,
    LogEvent,
    RollbackView,
    SagaView,
    StepOutcome,
    StepView,
)
from .._log.codec import JSONValue
from .._log.records import SagaStatus
from .._log.store import VerifyReport
from ._errors import one_line

if TYPE_CHECKING:  # the manifest imports the engine, which showing a saga does not need
    from .._kit.manifest import Status

VALUE_LIMIT = 400
"""Characters of an argument or result shown before it is cut (the log keeps all of it)."""

STATUS_STYLE = {
    SagaStatus.COMMITTED: "green",
    SagaStatus.ROLLED_BACK: "yellow",
    SagaStatus.NEEDS_HUMAN: "bold red",
    SagaStatus.RUNNING: "cyan",
}


def plain(value: object) -> str:
    """A log-supplied value as one safe line of text."""
    return one_line(str(value))


def json_value(value: JSONValue, limit: int = VALUE_LIMIT) -> str:
    """Compact JSON of a logged value, cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
    text = one_line(text)
    if len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


def when(ts_ms: int | None) -> str:
    """A record timestamp (milliseconds since the epoch) for people."""
    return "-" if ts_ms is None else format_ts(ts_ms / 1000)


def status_text(status: SagaStatus) -> Text:
    return Text(status.value, style=STATUS_STYLE.get(status, ""))


# -- sagas ----------------------------------------------------------------------------------------


def render_sagas(
    console: Console, views: Sequence[SagaView], events: Sequence[LogEvent], path: Path | str
) -> None:
    """The sagas, oldest first, one per line, then a one-line count of saga-less events.

    Columns are padded to their content and the free-form name comes last, so a narrow terminal
    wraps the line instead of cutting an id someone needs to copy.
    """
    if not views:
        console.print(Text(f"no sagas in {plain(path)}"))
    else:
        rows: list[tuple[str, SagaStatus, str, str, str]] = []
        for view in views:
            refused = len(view.refusals)
            steps = str(len(view.steps) - refused) + (f" (+{refused} refused)" if refused else "")
            started = when(view.started)[:19] + "Z" if view.started else "-"
            rows.append((plain(view.id), view.status, steps, started, plain(view.name)))
        widths = [
            max(len("id"), *(len(r[0]) for r in rows)),
            max(len("status"), *(len(r[1].value) for r in rows)),
            max(len("steps"), *(len(r[2]) for r in rows)),
            max(len("started"), *(len(r[3]) for r in rows)),
        ]
        header = ("id", "status", "steps", "started", "name")
        console.print(
            Text(
                "  ".join(h.ljust(w) for h, w in zip(header, [*widths, 0], strict=True)).rstrip(),
                style="bold",
            )
        )
        for saga_id, status, steps, started, name in rows:
            line = Text(saga_id.ljust(widths[0]) + "  ")
            line.append(status.value.ljust(widths[1]), style=STATUS_STYLE.get(status, ""))
            line.append(f"  {steps.rjust(widths[2])}  {started.ljust(widths[3])}  {name}")
            console.print(line)
    if events:
        counts: dict[str, int] = {}
        for event in events:
            counts[event.kind] = counts.get(event.kind, 0) + 1
        summary = ", ".join(f"{n} {plain(kind)}" for kind, n in counts.items())
        console.print(Text(f"outside any saga: {summary}", style="dim"))


# -- replay ---------------------------------------------------------------------------------------


def _field(console: Console, label: str, value: Text | str, indent: int = 2) -> None:
    line = Text(" " * indent + f"{label:<13} ", style="dim")
    line.append(value if isinstance(value, Text) else Text(value))
    console.print(line)


def _outcome(step: StepView) -> Text:
    if step.outcome is StepOutcome.DONE:
        return Text("done -> ", style="green").append(json_value(step.result), style="")
    if step.outcome is StepOutcome.FAILED:
        return Text("failed: ", style="red").append(plain(step.error or "?"), style="")
    if step.outcome is StepOutcome.REFUSED:
        refusal = step.refusal
        rule, reason = (refusal.rule, refusal.reason) if refusal else ("?", "")
        return Text(f"refused by {plain(rule)}: ", style="magenta").append(plain(reason), style="")
    return Text("unknown: intent logged, no outcome (the process may have stopped)", style="red")


def _compensation_text(step: StepView, status: SagaStatus) -> Text | None:
    state = step.compensation_state
    declared = plain(step.compensation) if step.compensation else None
    if declared and step.compensation_recoverable is True:
        declared += " (by name)"
    elif declared and step.compensation_recoverable is False:
        declared += " (in-process callable)"
    head = Text(f"{declared} -> " if declared else "")
    if state is CompensationState.COMPENSATED:
        return head.append("compensated", style="green")
    if state is CompensationState.FAILED:
        error = plain(step.compensation_error or "?")
        return head.append("FAILED: ", style="bold red").append(error)
    if state is CompensationState.STARTED:
        return head.append("started; its outcome was not logged", style="red")
    if state is CompensationState.PENDING:
        return head.append("pending: not run", style="yellow")
    if state is CompensationState.NONE_DECLARED:
        return head.append("none declared: nothing can undo this effect", style="red")
    if step.outcome is StepOutcome.REFUSED:
        return None
    if step.outcome is StepOutcome.FAILED:
        return head.append("not needed: the tool raised, so no effect is assumed")
    if status is SagaStatus.COMMITTED:
        return head.append("not needed: the saga committed")
    return head.append("not needed (reversible, nothing declared)")


def _step(console: Console, step: StepView, status: SagaStatus) -> None:
    title = Text(f"step {step.ordinal}  ", style="bold").append(plain(step.tool), style="bold")
    if step.semantics:
        title.append(f"  {plain(step.semantics)}", style="dim")
    console.print(title)
    _field(console, "args", json_value(step.args))
    if step.idempotency_key:
        _field(console, "key", plain(step.idempotency_key))
    if step.approval:
        _field(console, "approval", plain(step.approval))
    if step.speculation:
        _field(console, "ahead", plain(step.speculation))
    _field(console, "outcome", _outcome(step))
    compensation = _compensation_text(step, status)
    if compensation is not None:
        _field(console, "compensation", compensation)


def _rollback(console: Console, rollback: RollbackView) -> None:
    if rollback.terminal:
        scope = "rollback of the saga"
    elif rollback.finished:
        scope = "savepoint rollback"
    else:
        scope = "rollback (unfinished: no closing record)"
    line = Text(f"{scope} from step {rollback.from_ordinal}", style="bold")
    if rollback.cause is not None:
        line.append(f", cause {plain(rollback.cause)}", style="")
    console.print(line)
    done = ", ".join(f"#{n}" for n in rollback.compensated) or "nothing"
    _field(console, "compensated", f"{done} (in this order)")
    if rollback.failed:
        failed = ", ".join(f"#{n}" for n in rollback.failed)
        _field(console, "failed", Text(failed, style="bold red"))


def render_replay(console: Console, view: SagaView) -> None:
    """A step-by-step account of one saga, read from the log. Calls nothing."""
    console.print(
        Text("saga ", style="bold").append(plain(view.id)).append(f"  {plain(view.name)}")
    )
    _field(console, "status", status_text(view.status), indent=0)
    origin = f"   pid {view.pid} on {plain(view.host)}" if view.pid is not None else ""
    _field(console, "started", when(view.started) + origin, indent=0)
    if view.ended is not None:
        _field(console, "ended", when(view.ended), indent=0)
    if view.cause is not None:
        _field(console, "cause", Text(plain(view.cause), style="red"), indent=0)
    _field(console, "records", f"seq {view.first_seq}..{view.last_seq} ({view.record_count})", 0)
    console.print(Text("read from the log; replay runs no tool and no compensator", style="dim"))
    console.print()
    for step in view.steps:
        _step(console, step, view.status)
    for rollback in view.rollbacks:
        _rollback(console, rollback)
    if view.unknown_kinds:
        kinds = ", ".join(plain(k) for k in view.unknown_kinds)
        console.print(Text(f"records of kinds not interpreted here: {kinds}", style="yellow"))
    console.print(Text("final status  ", style="bold").append_text(status_text(view.status)))
    if view.status is SagaStatus.RUNNING:
        console.print(
            Text("no saga.end record: the saga is still running or its process died", style="dim")
        )


# -- verify, status --------------------------------------------------------------------------------


def render_verify(
    console: Console, report: VerifyReport, path: Path | str, unit: str = "byte"
) -> None:
    """The verdict on the whole chain; the first break's offset, seq and reason when broken.

    ``unit`` is what the error's offset counts: bytes in a file log; a PostgreSQL log's break
    is named by its ``seq`` alone.
    """
    if report.ok:
        console.print(
            Text("log intact: ", style="green").append(
                f"{report.records} records, last hash {report.last_hash}", style=""
            )
        )
        console.print(Text(plain(path), style="dim"))
        return
    error = report.error
    offset = error.offset if error is not None else "?"
    seq = error.seq if error is not None and error.seq is not None else "?"
    reason = plain(error.reason) if error is not None else "unknown"
    where = f"at byte offset {offset} (seq {seq})" if unit == "byte" else f"at seq {seq}"
    if error is not None and unit == "byte" and error.path != str(path):
        where = f"in {plain(error.path)} {where}"  # a later segment of a file log
    console.print(Text("log BROKEN ", style="bold red").append(f"{where}: {reason}", style=""))
    console.print(
        Text(
            f"{report.records} records verified before it; last good hash {report.last_hash}",
            style="dim",
        )
    )
    console.print(Text(plain(path), style="dim"))


def render_status(console: Console, status: Status, home: Path) -> None:
    """Readiness and each check; the reasons when not ready."""
    verdict = Text("ready", style="green") if status.ready else Text("NOT READY", style="bold red")
    console.print(Text("home  ", style="dim").append(plain(home), style=""))
    console.print(verdict)
    for name, value in status.checks.items():
        _field(console, plain(name), plain(value))
    for reason in status.reasons:
        console.print(Text(f"  - {plain(reason)}", style="red"))
