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
from .._log.commit import COMMITTED, MARKER, MASKED_SALT, SALT_LEN, leaves_of, rebuild
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
