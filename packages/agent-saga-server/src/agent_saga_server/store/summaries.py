"""What the saga list shows, folded from records as they arrive.

A saga's row in ``sagas`` (and its tools in ``saga_tools``) is kept up to date batch by batch,
with the reading :func:`agent_saga.build_history` gives these fields, in a fraction of its
cost (ingest runs this on every record):

* ``name``: the ``saga.begin`` record's ``name`` (``?`` when it has none);
* ``status``: ``running`` until a ``saga.end``, then its ``status``, or ``needs_human`` when
  that is not a status this reader knows;
* ``started`` and ``ended``: the first record's and the ``saga.end`` record's times;
* ``tools``: the ``tool`` named by the first record of each step (by ``ordinal``; ``?`` when
  that record names none).

``tests/test_crash_shipping.py`` holds the list the server builds against ``build_history``
over the agent's own log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from agent_saga import Kind, Record, SagaStatus

_STATUSES = frozenset(status.value for status in SagaStatus)


@dataclass
class SagaSummary:
    """One saga as a batch of records shows it (fields a batch does not show are empty)."""

    saga: str
    first_seq: int
    started: int
    last_seq: int
    name: str = ""
    """Empty when the batch holds no ``saga.begin`` (the stored name stands)."""
    status: str = "running"
    ended: int | None = None
    tools: dict[int, str] = field(default_factory=dict)
    """The tool of each step the batch shows, by ordinal."""


def summarise(records: Iterable[Record]) -> list[SagaSummary]:
    """The sagas ``records`` (consecutive records of one log) touch, in order of appearance."""
    found: dict[str, SagaSummary] = {}
    for record in records:
        if record.saga is None:
            continue
        summary = found.get(record.saga)
        if summary is None:
            summary = SagaSummary(record.saga, record.seq, record.ts, record.seq)
            found[record.saga] = summary
        summary.last_seq = record.seq
        data = record.data
        if record.kind == Kind.SAGA_BEGIN:
            name = data.get("name")
            summary.name = name if isinstance(name, str) and name else summary.name or "?"
        elif record.kind == Kind.SAGA_END:
            status = data.get("status")
            summary.status = status if status in _STATUSES else SagaStatus.NEEDS_HUMAN.value
            summary.ended = record.ts
        ordinal = data.get("ordinal")
        step = isinstance(ordinal, int) and not isinstance(ordinal, bool)
        if step and isinstance(ordinal, int) and ordinal not in summary.tools:
            tool = data.get("tool")
            summary.tools[ordinal] = tool if isinstance(tool, str) and tool else "?"
    return list(found.values())


__all__ = ["SagaSummary", "summarise"]
