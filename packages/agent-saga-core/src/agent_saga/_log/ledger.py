"""Accounting for masked values while a log is read in order: every one must be named by a
later ``log.redaction`` record that a trusted administrator signed.

A ``log.redaction`` record's data (the *statement*)::

    {"records": [{"seq": 7, "paths": ["args.card.cvv"], "leaves": [1]}, ...],
     "path": "args.card.cvv", "reason": "...", "admin": "<base64 public key>",
     "signature": "<base64 Ed25519 signature>"}

``leaves`` are the indexes of the masked committed values of a version 2 record (whose chain
hash still holds, see :mod:`.commit`); an entry for a version 1 record masked in place carries
instead ``digest``, the SHA-256 of its masked bytes, which then rest on the signature alone.
The signature covers :func:`statement_message`: the statement without ``signature``, bound to
the record's own ``seq`` and ``prev`` so it cannot be moved to another place or another log.
``admin`` must be one of the trusted administrator keys (:mod:`.admins`).

A version 1 record masked in place is accepted only before the log's first version 2 record:
writers of version 2 never write version 1 records, so one found after a version 2 record is a
version 2 record rewritten to escape its commitments, which no signature can excuse (the
administrator may mask values, not change the rest of a record).

A statement without a signature (version 1 logs had only those) counts only once a later
signed statement lists its ``seq`` under ``confirms``. A log verifies only when, at its end,
every masked value and every unsigned statement is accounted for; a statement with a bad
signature, or signed by a key that is not trusted, fails at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._errors import AgentSagaError, CorruptLogError
from .admins import b64decode, trusted_admin_keys, verify_signature
from .codec import canonical
from .commit import masked_leaves
from .records import Record
from .redaction import REDACTION_KIND

__all__ = [
    "UNJUSTIFIED",
    "RedactionLedger",
    "justified",
    "redaction_digest",
    "statement_message",
]

UNJUSTIFIED = "record changed after it was written (no redaction record accounts for it)"
UNJUSTIFIED_LEAVES = (
    "values masked after the record was written, and no signed redaction record accounts for them"
)
DOWNGRADED = (
    "version 1 record masked in place after version 2 records: only the values of a version 2 "
    "record can be masked, and its other fields must still match its hash"
)
UNSIGNED = (
    "redaction record not signed by an administrator key (an older version wrote it?): "
    "an administrator confirms it with 'agent-saga redact --confirm --sign KEY'"
)
_DIGEST_PREFIX = b"agent-saga redacted record v1\n"
_STATEMENT_PREFIX = b"agent-saga redaction v2\x00"


def redaction_digest(line: bytes) -> str:
    """What a statement commits to for a version 1 record masked in place: its stored bytes."""
    return hashlib.sha256(_DIGEST_PREFIX + line).hexdigest()


def statement_message(seq: int, prev: str, data: Mapping[str, Any]) -> bytes:
    """The bytes an administrator signs for the ``log.redaction`` record ``seq`` after ``prev``."""
    statement = {key: value for key, value in data.items() if key != "signature"}
    return _STATEMENT_PREFIX + canonical({"prev": prev, "seq": seq, "statement": statement})


class RedactionLedger:
    """Tracks masked records and redaction statements while a log is verified in order.

    Args:
        admins: returns the trusted administrator keys; called once, at the first signed
            statement (a log without one never reads the configuration).
    """

    def __init__(self, admins: Callable[[], frozenset[bytes]] = trusted_admin_keys) -> None:
        self._admins = admins
        self._trusted: frozenset[bytes] | None = None
        self.pending: dict[int, tuple[int, str]] = {}
        """Version 1 records masked in place: seq -> (byte offset, digest of stored bytes)."""
        self.pending_leaves: dict[int, tuple[int, set[int]]] = {}
        """Version 2 records: seq -> (byte offset, masked leaves not yet accounted for)."""
        self.unsigned: dict[int, tuple[int, list[Any]]] = {}
        """Unsigned statements not yet confirmed: seq -> (byte offset, their entries)."""
        self.redacted: dict[int, list[str]] = {}
        """seq -> masked paths, for records accounted for so far."""
        self.in_place: dict[int, int] = {}
        """Every version 1 record masked in place: seq -> byte offset."""
        self.first_v2: int | None = None
        """The ``seq`` of the first version 2 record seen (tell with :meth:`saw_version_2`)."""

    def saw_version_2(self, seq: int) -> None:
        """Record ``seq`` is a version 2 record (callers may stop telling after the first)."""
        if self.first_v2 is None or seq < self.first_v2:
            self.first_v2 = seq

    def hold(self, seq: int, offset: int, line: bytes) -> None:
        """A version 1 record whose stored ``line`` no longer matches its hash."""
        self.pending[seq] = (offset, redaction_digest(line))
        self.in_place[seq] = offset

    def hold_leaves(self, seq: int, offset: int, leaves: tuple[int, ...] | list[int]) -> None:
        """A version 2 record with these leaves masked (its hash holds)."""
        self.pending_leaves[seq] = (offset, set(leaves))

    def see(self, record: Record, offset: int) -> str | None:
        """Take one verified record in log order; returns why the log is invalid, or ``None``."""
        if record.v != 1 and self.first_v2 is None:
            self.saw_version_2(record.seq)
        if record.kind == REDACTION_KIND:
            return self.justify(record.seq, record.prev, record.data, offset)
        if record.salts is not None and "." in record.salts:
            self.hold_leaves(record.seq, offset, masked_leaves(record.salts))
        return None

    def _trusts(self, key: bytes) -> bool | str:
        if self._trusted is None:
            try:
                self._trusted = self._admins()
            except AgentSagaError as exc:
                return f"administrator keys cannot be read: {exc}"
        return key in self._trusted

    def justify(self, seq: int, prev: str, data: Mapping[str, Any], offset: int = 0) -> str | None:
        """Apply the ``log.redaction`` record ``seq`` (after ``prev``); returns why it is
        invalid, or ``None``."""
        entries, confirms = data.get("records"), data.get("confirms", [])
        if not isinstance(entries, list) or not isinstance(confirms, list):
            return f"redaction record {seq} is malformed"
        if not entries and not confirms:
            return "a redaction record must list the records it masked"
        if any(not isinstance(e, dict) for e in entries) or any(
            type(c) is not int for c in confirms
        ):
            return "malformed redaction entry"
        if "signature" not in data and "admin" not in data:
            self.unsigned[seq] = (offset, entries)
            return None
        admin, signature = b64decode(data.get("admin"), 32), b64decode(data.get("signature"), 64)
        if admin is None or signature is None:
            return f"redaction record {seq}: malformed administrator key or signature"
        trusted = self._trusts(admin)
        if isinstance(trusted, str):
            return trusted
        if not trusted:
            return (
                f"redaction record {seq} is signed by a key that is not a trusted administrator key"
            )
        if not verify_signature(admin, statement_message(seq, prev, data), signature):
            return f"redaction record {seq}: the administrator's signature does not verify"
        for confirmed in confirms:  # its entries are repeated in this statement's
            self.unsigned.pop(confirmed, None)
        return self._apply(entries)

    def _apply(self, entries: list[Any]) -> str | None:
        for entry in entries:
            seq, paths = entry.get("seq"), entry.get("paths")
            if type(seq) is not int or not isinstance(paths, list):
                return "malformed redaction entry"
            leaves, digest = entry.get("leaves"), entry.get("digest")
            if isinstance(leaves, list):
                held_leaves = self.pending_leaves.get(seq)
                if held_leaves is not None:
                    held_leaves[1].difference_update(x for x in leaves if type(x) is int)
                    if not held_leaves[1]:
                        del self.pending_leaves[seq]
                        self.redacted[seq] = [str(p) for p in paths]
                continue
            if not isinstance(digest, str):
                return "malformed redaction entry"
            held = self.pending.get(seq)
            # An entry for an earlier version of a record masked twice no longer matches; only
            # the masked bytes that are actually stored need a matching entry.
            if held is not None and held[1] == digest:
                del self.pending[seq]
                self.redacted[seq] = [str(p) for p in paths]
        return None

    def first_unjustified(self) -> tuple[int, int, str] | None:
        """``(seq, offset, why)`` of the first masked record or unsigned statement that no
        signed redaction record accounts for, or of a version 1 record masked in place after
        a version 2 record (accounted for or not)."""
        unsigned_names = {
            entry.get("seq"): statement
            for statement, (_, entries) in self.unsigned.items()
            for entry in entries
        }

        def why(seq: int, default: str) -> str:
            statement = unsigned_names.get(seq)
            return default if statement is None else f"named by redaction record {statement}: "

        found = [(seq, off, why(seq, UNJUSTIFIED)) for seq, (off, _) in self.pending.items()]
        found += [
            (seq, off, why(seq, UNJUSTIFIED_LEAVES))
            for seq, (off, _) in self.pending_leaves.items()
        ]
        found += [(seq, off, UNSIGNED) for seq, (off, _) in self.unsigned.items()]
        if self.first_v2 is not None:
            first_v2 = self.first_v2
            found += [(s, off, DOWNGRADED) for s, off in self.in_place.items() if s > first_v2]
        if not found:
            return None
        seq, offset, reason = min(found)
        return seq, offset, reason + UNSIGNED if reason.endswith(": ") else reason


def justified(records: Iterator[Record], where: str) -> Iterator[Record]:
    """``records`` (verified, in log order from the first), checked for redactions as they
    pass; offsets in errors are record indexes.

    Raises:
        CorruptLogError: a redaction statement is invalid (at it), or a masked value or an
            unsigned statement is not accounted for (at the end, after every record).
    """
    ledger = RedactionLedger()
    for record in records:
        problem = ledger.see(record, record.seq - 1)
        if problem is not None:
            raise CorruptLogError(where, record.seq - 1, problem, record.seq)
        yield record
    unjustified = ledger.first_unjustified()
    if unjustified is not None:
        seq, offset, why = unjustified
        raise CorruptLogError(where, offset, why, seq)
