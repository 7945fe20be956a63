"""One saga's records from the configured log, for commands that draw or export a saga.

Invariants:

* The saga is named as ``agent-saga replay`` names it: an exact id, else the only id that
  starts with the text (dashes and case aside); an unknown or ambiguous id is a
  :class:`~agent_saga.cli._errors.BadInputError` (one line, exit 2).
* The answer is the saga's own records (``record.saga`` is its id), in log order, each checked
  as the read that finds it checks it: through the saga index beside a file log (verified
  against the log, rebuilt once when it does not describe it), through the ``saga`` column of
  a fleet log on PostgreSQL (each row against its own hash and saga), else from a full read
  (a merged log, a home the index cannot be written in, old fleet rows without the column).
* Nothing is written but the file log's saga index (derived data); the log is never opened
  for writing.
"""

from __future__ import annotations

from .._history.build import SagaLookupError
from .._history.indexed import resolve_indexed, with_rebuild
from .._history.lookup import resolve_saga_id
from .._log.records import Record
from .._log.sagaindex import IndexMismatch, SagaIndex
from .._log.source import LogSource
from ._errors import BadInputError
from ._logfile import reading, through_index
from ._settings import Settings


def saga_records(settings: Settings, saga_id: str) -> list[Record]:
    """The records of the saga ``saga_id`` names (an id or a unique prefix), in log order.

    Read in time proportional to the saga where the log allows it (see the module docstring);
    on PostgreSQL an exact id is one index probe, and a prefix is matched over the ``saga``
    column without reading a record's line.

    Args:
        settings: the running command's settings (:func:`agent_saga.cli.current_settings`):
            the home, the configured store and schema, the chain key.
        saga_id: an id, or a prefix of one that no other id shares.

    Raises:
        BadInputError: no log there, an empty, unknown or ambiguous id (one line, exit 2).
        AgentSagaError: the log is corrupt where it was read
            (:class:`~agent_saga.CorruptLogError`, a wrong chain key among them), the store
            cannot be read, or the chain key file cannot be; the ``agent-saga`` group reports
            each in one line (exit 1).
    """
    wanted = saga_id.strip()
    if not wanted:
        raise BadInputError("empty saga id")
    try:
        found = through_index(settings, lambda index: _through(index, wanted))
        if found is not None:
            return found
        with reading(settings) as source:
            return _from_source(source, wanted)
    except SagaLookupError as exc:
        raise BadInputError(str(exc)) from exc


def _through(index: SagaIndex, wanted: str) -> list[Record]:
    def answer() -> list[Record]:
        chosen = resolve_indexed(index, wanted)
        own = [record for record in index.saga_records(chosen) if record.saga == chosen]
        if not own:
            raise IndexMismatch(f"the index names saga {chosen} but holds none of its records")
        return own

    return with_rebuild(index, answer)


def _from_source(source: LogSource, wanted: str) -> list[Record]:
    from .._postgres.source import PostgresLogSource  # psycopg is imported by its methods only

    if isinstance(source, PostgresLogSource):
        matched = source.saga_ids(wanted)
        if matched is not None:
            ids, total = matched
            chosen = resolve_saga_id(ids, wanted, total=total)
            return source.saga_records(chosen)
    return _full_read(source, wanted)


def _full_read(source: LogSource, wanted: str) -> list[Record]:
    """One pass over the whole log keeping only the records of the sagas ``wanted`` may name."""
    key = wanted.replace("-", "").lower()
    every: dict[str, None] = {}
    kept: list[Record] = []
    for record in source.records():
        if record.saga is None:
            continue
        every[record.saga] = None
        if record.saga.replace("-", "").lower().startswith(key):
            kept.append(record)
    candidates = list(dict.fromkeys(record.saga for record in kept if record.saga is not None))
    chosen = resolve_saga_id(candidates, wanted, total=len(every))
    return [record for record in kept if record.saga == chosen]
