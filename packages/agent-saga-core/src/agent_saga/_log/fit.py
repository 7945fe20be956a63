"""Making an entry fit in one record: no accepted record is lost because one value is too large.

A record's line is at most :data:`~agent_saga._log.chain.MAX_RECORD_BYTES`. Records buffered on
the fast path are encoded only when they are written, together with the next durable one; if
one of them cannot be (a REVERSIBLE tool that returned 5 MB), :func:`shrink_to_fit` replaces its
largest values by placeholders that say so, so the batch, and every record already accepted,
is still written. A placeholder is a ``$repr`` value: it is never handed back to a compensator.
"""

from __future__ import annotations

from .chain import MAX_RECORD_BYTES, _line, _tails
from .codec import CodecError, JSONValue, canonical
from .commit import SALT_LEN, sealed_forms
from .records import Entry

_WIDEST_SEQ = 10**18
"""A sequence number and timestamp wider than any this log will reach: sizes are upper bounds."""
_SIZING_SALT = b"A" * SALT_LEN
"""Stands for each fresh salt when sizing: every salt has this length, so the size is exact."""


def problem(entry: Entry) -> str | None:
    """Why ``entry`` cannot be sealed into one record, or ``None`` when it can.

    The size is the stored line's, salts included (one per committed leaf): an entry this
    accepts is one the chain can seal.
    """
    try:
        forms = sealed_forms(entry.data, lambda: _SIZING_SALT)
        data, salts = (canonical(entry.data), None) if forms is None else forms[1:]
        tail = _tails(entry.kind, "0" * 64, entry.saga, _WIDEST_SEQ, _WIDEST_SEQ, salts)[1]
    except CodecError as exc:
        return str(exc)
    size = len(_line(data, "0" * 64, tail))
    if size >= MAX_RECORD_BYTES:
        return f"record of {size} bytes exceeds {MAX_RECORD_BYTES}"
    return None


def shrink_to_fit(entry: Entry) -> Entry:
    """``entry`` with its largest values replaced by placeholders until it can be sealed.

    Values are replaced largest first; a step's ``result`` that is replaced makes the record
    say ``result_restorable: false``. An entry that fits is returned unchanged.
    """
    if problem(entry) is None:
        return entry
    data: dict[str, JSONValue] = dict(entry.data)
    sizes = sorted(((_size(value), key) for key, value in data.items()), reverse=True)
    for size, key in sizes:
        data[key] = {
            "$repr": f"<{size} bytes: too large for the log (a record is at most "
            f"{MAX_RECORD_BYTES} bytes)>",
            "$type": "too_large",
        }
        if key == "result" and "result_restorable" in data:
            data["result_restorable"] = False
        shrunk = Entry(entry.kind, entry.saga, data, entry.ts)
        if problem(shrunk) is None:
            return shrunk
    return Entry(entry.kind, entry.saga, data, entry.ts)


def _size(value: JSONValue) -> int:
    try:
        return len(canonical(value))
    except CodecError:
        return MAX_RECORD_BYTES  # no canonical form: replace it first
