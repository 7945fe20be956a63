"""How a step run ahead of confirmation reads in a saga's history (``speculation.*`` records)."""

from __future__ import annotations

from .._log.records import Kind, Record

AHEAD_KINDS = frozenset(
    {
        Kind.SPECULATION_ISSUED,
        Kind.SPECULATION_REDEEMED,
        Kind.SPECULATION_REFUSED,
        Kind.SPECULATION_DISCARDED,
    }
)


def ahead_note(record: Record, before: str | None) -> str:
    """The step's speculation note after ``record`` (appended to ``before``)."""
    data = record.data
    lease, undo, reason = (data.get(k) for k in ("lease", "undo", "reason"))
    match record.kind:
        case Kind.SPECULATION_ISSUED:
            text = f"ran ahead of confirmation (lease {str(lease)[:8]})"
        case Kind.SPECULATION_REDEEMED:
            text = "redeemed by the confirmed call"
        case Kind.SPECULATION_DISCARDED:
            text = f"discarded ({undo})"
        case _:
            text = f"lease refused: {reason}"
    return text if before is None else f"{before}; {text}"
