"""Redaction paths, and the values that must never be on disk in plaintext.

Paths are dotted (``card.cvv``, ``items.0.cvv``); ``*`` matches every key of an object or every
element of a list (``items.*.cvv``). A value masked before the record was written (a tool's
``redact=[...]``) is replaced by ``{"$redacted": "write"}``, which is then part of the record's
hashed content like any other value.

Masking a stored value later (:func:`agent_saga.redact_path`) keeps the record's chain hash: see
:mod:`.commit` for how a record commits to its values, and :mod:`.ledger` for the signed
``log.redaction`` record that must account for every masked value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .codec import JSONValue

__all__ = ["AT_WRITE", "REDACTION_KIND", "mask", "parse_path"]

MARKER = "$redacted"
MARKER_BYTES = b'{"$redacted":'
AT_WRITE: dict[str, JSONValue] = {MARKER: "write"}
LATER: dict[str, JSONValue] = {MARKER: "later"}
"""The marker of a version 1 record masked in place (those records no longer match their hash)."""
REDACTION_KIND = "log.redaction"


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
