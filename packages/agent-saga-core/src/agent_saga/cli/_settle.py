"""``agent-saga settle``: a human marks a ``needs_human`` saga as handled.

A saga that needs a human stands in the log (and makes every ``recover`` exit 3) until someone
takes it on. ``settle`` appends a durable ``saga.settled`` record naming who (this OS account)
and why (``--note``, required); the saga's status stays ``needs_human``, so the log keeps what
happened, and ``recover`` stops listing it while ``certify`` reports its findings as warnings
that say who settled it.
"""

from __future__ import annotations

import time

import click

from .._history.build import SagaLookupError
from .._history.lookup import find_saga
from .._log.codec import JSONValue
from .._log.records import Entry, Kind, SagaStatus
from ._approvals import cli_identity
from ._errors import BadInputError, one_line
from ._logfile import read_history, require_log
from ._settings import current_settings

MAX_NOTE = 2000


@click.command()
@click.argument("saga_id")
@click.option("--note", required=True, help="What was done about it (kept in the log).")
def settle(saga_id: str, note: str) -> None:
    """Mark a needs_human saga as handled by you, with a note; recover stops listing it."""
    settings = current_settings()
    require_log(settings.home)
    if not note.strip():
        raise BadInputError("--note must say what was done")
    history, _ = read_history(settings)
    try:
        view = find_saga(history.sagas, saga_id)
    except SagaLookupError as exc:
        raise BadInputError(str(exc)) from exc
    if view.status is not SagaStatus.NEEDS_HUMAN:
        raise BadInputError(f"saga {view.id} is {view.status.value}, not needs_human")
    if view.settled is not None:
        raise BadInputError(f"saga {view.id} was settled already by {view.settled}")
    by = cli_identity()
    data: dict[str, JSONValue] = {"saga": view.id, "by": by, "note": note[:MAX_NOTE]}
    with settings.open_kit(checkpoints=False) as kit:
        kit.store.append([Entry(Kind.SETTLED, None, data, int(time.time() * 1000))], sync=True)
    settings.console.print(f"settled {view.id} as {by}: {one_line(note)}", markup=False)
