"""The set of unfinished sagas at a point of the log, as a signed checkpoint commits to it.

A checkpoint of ``size`` records may carry the extension line
``agent-saga-unfinished <count> <digest>``: how many sagas have a record of their own and no
``saga.end`` among the first ``size`` records, and the SHA-256 of their ids, sorted and each
prefixed by its length (:func:`commitment`). Every checkpoint the product publishes computes it
from the log's records, never from the saga index; a reader that takes its unfinished sagas
from the index checks the index's set at ``size`` against it and reads what came after from
the log, so an index edited to leave out a whole unfinished saga is caught (:mod:`.indexsets`).

Invariants:

* :func:`fold` is the one definition of the set, the one recovery acts on (a saga whose
  history has no ``saga.end``): a saga joins it at its first record of its own (``saga`` set
  to its id; normally its ``saga.begin``, but a saga whose ``saga.begin`` is missing, in a log
  written by hand or damaged, counts too) and leaves it at a ``saga.end``. The index's
  definition (its ``first_seq`` and ``ended`` columns) gives the same set for every log whose
  sagas log nothing after their first ``saga.end`` (the engine never does); a log where that
  does not hold only makes readers fall back to a full read.
* The digest depends on the set only (not on the order its ids were met in).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import NamedTuple

from .records import Kind
from .sagarows import Indexed

EXTENSION = "agent-saga-unfinished"
_LINE = re.compile(EXTENSION + r" (0|[1-9][0-9]{0,18}) ([0-9a-f]{64})")


class Statement(NamedTuple):
    """What a signed checkpoint states of the unfinished sagas: after record ``size``,
    ``number`` of them, whose ids have the digest ``digest`` (hex)."""

    size: int
    number: int
    digest: str


def commitment(ids: Iterable[str]) -> tuple[int, str]:
    """``(count, digest)`` of a set of saga ids (see the module docstring)."""
    hasher = hashlib.sha256()
    unique = sorted(set(ids))
    for saga_id in unique:
        raw = saga_id.encode("utf-8", "surrogatepass")
        hasher.update(len(raw).to_bytes(4, "big"))
        hasher.update(raw)
    return len(unique), hasher.hexdigest()


def extension_line(ids: Iterable[str]) -> str:
    """The checkpoint extension line committing to the unfinished sagas ``ids``."""
    count, digest = commitment(ids)
    return f"{EXTENSION} {count} {digest}"


def statement_of(size: int, extensions: Iterable[str]) -> Statement | None:
    """The statement among a checkpoint's extension lines (of ``size`` records); ``None`` for
    a checkpoint without one (written by an earlier version) or with a malformed one."""
    for line in extensions:
        found = _LINE.fullmatch(line)
        if found is not None:
            return Statement(size, int(found.group(1)), found.group(2))
    return None


def fold(unfinished: dict[str, None], record: Indexed) -> None:
    """Take ``record`` into ``unfinished`` (ids, kept in the order the sagas began)."""
    fold_kind(unfinished, record.kind, record.saga)


def fold_kind(unfinished: dict[str, None], kind: str, saga: str | None) -> None:
    """:func:`fold` of a record of ``kind`` whose ``saga`` field is ``saga``."""
    if saga is None:
        return
    if kind == Kind.SAGA_END:
        unfinished.pop(saga, None)
    elif saga not in unfinished:
        unfinished[saga] = None
