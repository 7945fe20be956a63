"""Redaction: values that must never be on disk in plaintext, and masking a stored value later.

Paths are dotted (``card.cvv``, ``items.0.cvv``); ``*`` matches every key of an object or every
element of a list (``items.*.cvv``). A masked value is replaced by ``{"$redacted": how}``:

- ``"write"``: masked before the record was written (a tool's ``redact=[...]``). The marker is
  part of the record's hashed content; nothing else changes.
- ``"later"``: masked in a stored record by :func:`agent_saga.redact_path`. The record keeps its
  original chain hash (so the chain, the Merkle tree and every checkpoint stay valid) and a
  ``log.redaction`` record appended at the same time names it, the paths, and the SHA-256 of its
  masked bytes. Verification accepts a record whose hash no longer matches its bytes only with
  such a record; see :class:`RedactionLedger`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from .codec import JSONValue

__all__ = ["REDACTION_KIND", "RedactionLedger", "mask", "parse_path", "redaction_digest"]

MARKER = "$redacted"
MARKER_BYTES = b'{"$redacted":'
AT_WRITE: dict[str, JSONValue] = {MARKER: "write"}
LATER: dict[str, JSONValue] = {MARKER: "later"}
REDACTION_KIND = "log.redaction"
_DIGEST_PREFIX = b"agent-saga redacted record v1\n"


def parse_path(path: str) -> tuple[str, ...]:
    """Split a dotted path; empty segments are refused."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"a redaction path is a non-empty dotted string, got {path!r}")
    parts = tuple(path.split("."))
    if any(not part for part in parts):
        raise ValueError(f"empty segment in redaction path {path!r}")
    return parts


def _mask(value: Any, parts: tuple[str, ...], marker: JSONValue, hits: list[str], at: str) -> Any:
    head, rest = parts[0], parts[1:]
    if isinstance(value, Mapping):
        keys = list(value) if head == "*" else [head] if head in value else []
        if not keys:
            return value
        out = dict(value)
        for key in keys:
            where = f"{at}.{key}" if at else str(key)
            if rest:
                out[key] = _mask(value[key], rest, marker, hits, where)
            elif value[key] != marker:
                out[key] = marker
                hits.append(where)
        return out
    if isinstance(value, list):
        if head == "*":
            indexes = range(len(value))
        elif head.isdigit() and int(head) < len(value):
            indexes = range(int(head), int(head) + 1)
        else:
            return value
        items = list(value)
        for index in indexes:
            where = f"{at}.{index}" if at else str(index)
            if rest:
                items[index] = _mask(value[index], rest, marker, hits, where)
            elif value[index] != marker:
                items[index] = marker
                hits.append(where)
        return items
    return value


def mask(
    value: Any, paths: Iterable[tuple[str, ...]], marker: JSONValue = AT_WRITE
) -> tuple[Any, list[str]]:
    """``value`` with every match of ``paths`` replaced by ``marker`` (copied where changed),
    and the concrete paths that were masked."""
    hits: list[str] = []
    for parts in paths:
        value = _mask(value, parts, marker, hits, "")
    return value, hits


def redaction_digest(line: bytes) -> str:
    """What a ``log.redaction`` record commits to: the masked record's stored bytes."""
    return hashlib.sha256(_DIGEST_PREFIX + line).hexdigest()


class RedactionLedger:
    """Tracks records masked after they were written while a log is verified in order.

    A record whose hash does not match its bytes but that holds a marker is *pending* until a
    later ``log.redaction`` record names its ``seq`` with the digest of exactly those bytes. A
    log that ends with a record still pending does not verify.
    """

    def __init__(self) -> None:
        self.pending: dict[int, tuple[int, str]] = {}
        """seq -> (byte offset, digest of its stored bytes)."""
        self.redacted: dict[int, list[str]] = {}
        """seq -> masked paths, for records justified so far."""

    @staticmethod
    def may_be_redacted(line: bytes) -> bool:
        return MARKER_BYTES in line

    def hold(self, seq: int, offset: int, line: bytes) -> None:
        self.pending[seq] = (offset, redaction_digest(line))

    def justify(self, data: Mapping[str, Any]) -> str | None:
        """Apply one ``log.redaction`` record; returns why it is invalid, or ``None``."""
        entries = data.get("records")
        if not isinstance(entries, list) or not entries:
            return "a redaction record must list the records it masked"
        for entry in entries:
            if not isinstance(entry, dict):
                return "malformed redaction entry"
            seq, digest, paths = entry.get("seq"), entry.get("digest"), entry.get("paths")
            if type(seq) is not int or not isinstance(digest, str) or not isinstance(paths, list):
                return "malformed redaction entry"
            held = self.pending.get(seq)
            # An entry for an earlier version of a record masked twice no longer matches; only
            # the masked bytes that are actually stored need a matching entry.
            if held is not None and held[1] == digest:
                del self.pending[seq]
                self.redacted[seq] = [str(p) for p in paths]
        return None

    def first_unjustified(self) -> tuple[int, int] | None:
        """``(seq, offset)`` of the first masked record no redaction record accounts for."""
        if not self.pending:
            return None
        seq = min(self.pending)
        return seq, self.pending[seq][0]
