"""Masking one stored record, and the signed statement that accounts for it.

Shared by the file and PostgreSQL redactions (``_redact``, ``_redact_pg``). A version 2 record
keeps its chain hash: each masked value becomes ``{"$redacted": <its commitment>}`` and its salt
is dropped (see :mod:`agent_saga._log.commit`). A version 1 record (written before) is masked
in place with ``{"$redacted": "later"}``; its bytes no longer match its hash, so the statement
carries their digest and its remaining content rests on the administrator's signature.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

from .._errors import LogError
from .._log.chain import stored_line
from .._log.codec import CodecError, JSONValue
from .._log.commit import (
    COMMITTED,
    MARKER,
    MASKED_SALT,
    SALT_LEN,
    commitment,
    is_marker,
    open_forms,
)
from .._log.ledger import redaction_digest, statement_message
from .._log.records import Record
from .._log.redaction import LATER, mask, parse_path
from ._admin import AdminSigner

__all__ = ["Masking", "mask_record", "parse_masked_path", "signed_statement"]

Masking = tuple[bytes, dict[str, JSONValue]]
"""A masked record's new stored line (without ``\\n``) and its statement entry."""


def parse_masked_path(path: str) -> tuple[str, ...]:
    """Split ``path``; it must lie under a value that can be masked.

    Raises:
        LogError: an invalid path, or one outside ``args``, ``cause``, ``error``, ``result``.
    """
    try:
        parts = parse_path(path)
    except ValueError as exc:
        raise LogError(str(exc)) from None
    if parts[0] not in COMMITTED:
        raise LogError(
            f"cannot mask {path!r}: only values under {', '.join(COMMITTED)} can be masked "
            "(kind, tool, ordinal, status and the other engine fields never are)"
        )
    return parts


class Leaf:
    """One committed value of a stored record, with its concrete path."""

    __slots__ = ("index", "path", "salt", "value")

    def __init__(self, index: int, path: tuple[str, ...], salt: str, value: Any) -> None:
        self.index = index
        self.path = path
        self.salt = salt
        self.value = value

    @property
    def masked(self) -> bool:
        return self.salt == MASKED_SALT

    def commitment(self) -> str:
        return str(self.value[MARKER]) if self.masked else commitment(self.salt, self.value)


def leaves_of(data: dict[str, Any], salts: str) -> list[Leaf]:
    """Every committed value of stored ``data``, in leaf order (see ``_log.commit``).

    Raises:
        CodecError: the salts do not match the values.
    """
    open_forms(data, salts)  # checks the salts against the values
    found: list[Leaf] = []

    def visit(value: Any, path: tuple[str, ...]) -> None:
        at = len(found) * SALT_LEN
        salt = salts[at : at + SALT_LEN]
        if salt == MASKED_SALT and is_marker(value):
            found.append(Leaf(len(found), path, salt, value))
        elif type(value) is dict and value:
            for key in sorted(value):
                visit(value[key], (*path, key))
        elif type(value) is list and value:
            for index, item in enumerate(value):
                visit(item, (*path, str(index)))
        else:
            found.append(Leaf(len(found), path, salt, value))

    for key in COMMITTED:
        if key in data:
            visit(data[key], (key,))
    return found


def rebuild(data: dict[str, Any], replace: dict[tuple[str, ...], Any]) -> dict[str, Any]:
    """``data`` with the committed value at each path of ``replace`` replaced by the value it
    maps to (containers copied where changed)."""

    def visit(value: Any, path: tuple[str, ...]) -> Any:
        if path in replace:
            return replace[path]
        if type(value) is dict and value:
            return {key: visit(item, (*path, key)) for key, item in value.items()}
        if type(value) is list and value:
            return [visit(item, (*path, str(i))) for i, item in enumerate(value)]
        return value

    out = dict(data)
    for key in COMMITTED:
        if key in data:
            out[key] = visit(data[key], (key,))
    return out


def _matches(parts: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(parts) <= len(path) and all(p in ("*", q) for p, q in zip(parts, path, strict=False))


def mask_record(record: Record, parts: tuple[str, ...]) -> Masking | None:
    """``record`` with its unmasked values under ``parts`` masked; ``None`` when none is.

    Raises:
        LogError: the record cannot be re-encoded (it was read from a verified log, so this
            means a bug, not bad input).
    """
    obj: dict[str, Any] = record.to_json()
    try:
        if record.v == 1:
            data, hits = mask(record.data, [parts], LATER)
            if not hits:
                return None
            line = stored_line({**obj, "data": data})
            return line, {"seq": record.seq, "paths": list(hits), "digest": redaction_digest(line)}
        if record.salts is None:
            return None
        chosen = [
            leaf
            for leaf in leaves_of(record.data, record.salts)
            if not leaf.masked and _matches(parts, leaf.path)
        ]
        if not chosen:
            return None
        markers = {leaf.path: {MARKER: leaf.commitment()} for leaf in chosen}
        data = rebuild(record.data, markers)
        salts = record.salts
        for leaf in chosen:
            at = leaf.index * SALT_LEN
            salts = salts[:at] + MASKED_SALT + salts[at + SALT_LEN :]
        line = stored_line({**obj, "data": data, "salts": salts})
    except (CodecError, TypeError, ValueError) as exc:
        raise LogError(f"record {record.seq} cannot be masked: {exc}") from exc
    entry: dict[str, JSONValue] = {
        "seq": record.seq,
        "paths": [".".join(leaf.path) for leaf in chosen],
        "leaves": [leaf.index for leaf in chosen],
    }
    return line, entry


def signed_statement(
    signer: AdminSigner,
    seq: int,
    prev: str,
    entries: list[dict[str, JSONValue]],
    *,
    path: str = "",
    reason: str = "",
    confirms: Iterable[int] = (),
) -> dict[str, JSONValue]:
    """The data of the ``log.redaction`` record ``seq`` after ``prev``, signed by ``signer``."""
    statement: dict[str, JSONValue] = {"records": list[JSONValue](entries), "admin": signer.id}
    if path:
        statement["path"] = path
    if reason:
        statement["reason"] = reason
    confirmed = sorted(confirms)
    if confirmed:
        statement["confirms"] = list[JSONValue](confirmed)
    signature = signer.sign(statement_message(seq, prev, statement))
    statement["signature"] = base64.b64encode(signature).decode("ascii")
    return statement
