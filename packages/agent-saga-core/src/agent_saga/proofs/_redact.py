"""Masking values already stored in a file log, so they are no longer on disk in plaintext.

The log is rewritten once, under the writers' exclusive lock, while no agent has it open: each
masked record keeps its chain hash (its other values are still checked against it, see
:mod:`agent_saga._log.commit`), and one ``log.redaction`` record appended at the end, signed by
an administrator key that readers trust, names every masked value. The chain, the Merkle tree
and every earlier checkpoint therefore stay valid, and ``verify`` shows what was masked and by
whom. Without a trusted administrator key nothing can be masked: see :mod:`.._log.ledger`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import CorruptLogError, LogError
from .._log.chain import Chain
from .._log.codec import JSONValue
from .._log.files import (
    LOCK_NAME,
    LOG_NAME,
    OS,
    OWNERS_DIR,
    WATERMARK_NAME,
    encode_watermark,
    write_atomic,
)
from .._log.ledger import UNSIGNED
from .._log.locks import owner_alive
from .._log.records import Entry, Record
from .._log.redaction import REDACTION_KIND
from .._log.sagaindex import discard_index
from .._log.scan import content_end, walk
from .._log.segments import read_layout
from .._log.solo import take_log_lock
from ._admin import AdminSigner
from ._masking import mask_record, parse_masked_path, signed_statement

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["RedactionReport", "confirm_redactions", "redact_path"]


@dataclass(frozen=True)
class RedactionReport:
    """What was masked: ``{seq: [concrete paths]}``, and the ``seq`` of the signed record that
    says so (``None`` when nothing matched and nothing was written)."""

    masked: dict[int, list[str]]
    record_seq: int | None


def _live_owners(home: Path) -> list[str]:
    owners = home / OWNERS_DIR
    if not owners.is_dir():
        return []
    names = [p.stem for p in owners.glob("*.lock")]
    return [name for name in names if owner_alive(OS, home, name)]


class _Log:
    """The log of a home, read and rewritten under the writers' exclusive lock."""

    def __init__(self, log: str | os.PathLike[str]) -> None:
        target = Path(log)
        self.home = target if target.is_dir() else target.parent
        self.path = self.home / LOG_NAME

    def __enter__(self) -> _Log:
        live = _live_owners(self.home)
        if live:
            raise LogError(f"the log is open in {len(live)} live process(es); stop them first")
        self._lock = os.open(self.home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        take_log_lock(self._lock, self.home)  # asks a solo writer to let go
        if _live_owners(self.home):  # one may have opened the log while we waited for the lock
            os.close(self._lock)
            raise LogError("an agent opened the log meanwhile; stop it first")
        if len(read_layout(OS, self.home).segments) > 1:
            os.close(self._lock)
            raise LogError(
                f"the log at {self.home} has sealed segments, which are never rewritten: "
                "masking stored values is supported only in a log of one segment"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._lock)

    def read(self, chain: Chain, *, unsigned: bool = False) -> list[tuple[bytes, Record]]:
        """Every ``(stored line, record)``, verified (iter_log would wait for a shared lock).

        Raises:
            CorruptLogError: the log does not verify (with ``unsigned``: except for what only
                unsigned redaction records fail to account for, found after the last record).
        """
        raw = self.path.read_bytes()
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        found: list[tuple[bytes, Record]] = []
        try:
            end = content_end(OS, fd, len(raw))
            for offset, length, record in walk(OS, fd, chain, str(self.path), end=end):
                found.append((raw[offset : offset + length], record))
        except CorruptLogError as exc:
            if not (unsigned and exc.reason.endswith(UNSIGNED)):
                raise
        finally:
            os.close(fd)
        return found

    def append(
        self, lines: list[bytes], chain: Chain, last: Record, statement: dict[str, JSONValue]
    ) -> int:
        """Rewrite the log as ``lines`` plus the signed ``statement``; returns its ``seq``."""
        entry = Entry(REDACTION_KIND, None, statement, int(time.time() * 1000))
        sealed, stored = chain.seal(entry, last.seq + 1, last.hash)
        content = b"".join(lines) + stored
        write_atomic(self.path, content)
        write_atomic(self.home / WATERMARK_NAME, encode_watermark(len(content)))
        discard_index(self.home)  # its places are the old bytes'; the next reader rebuilds it
        return sealed.seq


def redact_path(
    log: str | os.PathLike[str],
    path: str,
    *,
    admin_key: str | os.PathLike[str] | Ed25519PrivateKey,
    seqs: Iterable[int] | None = None,
    key: bytes | None = None,
    reason: str = "",
) -> RedactionReport:
    """Mask the values at ``path`` in every stored record (or in the records ``seqs``).

    ``path`` is dotted and relative to a record's data, under ``args``, ``result``, ``error``
    or ``cause``, with ``*`` for any key or element: ``"args.card.cvv"``,
    ``"args.items.*.cvv"``; a path to an object or list masks every value inside it (its keys
    and length stay visible). ``log`` is the log file or the home holding it. ``admin_key`` is
    the administrator's private key (a PEM file or the key), whose public key readers trust
    (``admin_keys``); it signs the ``log.redaction`` record. ``key`` is the chain's key, if any.

    Raises:
        ConfigurationError: the administrator key cannot be loaded or is not trusted.
        LogError: an agent still has the log open (stop it first), or the path is invalid.
        CorruptLogError: the log does not verify before the change (nothing is changed).
    """
    parts = parse_masked_path(path)
    signer = AdminSigner.load(admin_key)
    signer.require_trusted()
    wanted = None if seqs is None else set(seqs)
    chain = Chain(key)
    with _Log(log) as opened:
        found = opened.read(chain)
        lines, entries, masked = [], [], {}
        for line, record in found:
            done = mask_record(record, parts) if wanted is None or record.seq in wanted else None
            if done is None:
                lines.append(line)
                continue
            lines.append(done[0] + b"\n")
            entries.append(done[1])
            masked[record.seq] = _paths(done[1])
        if not masked:
            return RedactionReport({}, None)
        last = found[-1][1]
        statement = signed_statement(
            signer, last.seq + 1, last.hash, entries, path=path, reason=reason
        )
        return RedactionReport(masked, opened.append(lines, chain, last, statement))


def confirm_redactions(
    log: str | os.PathLike[str],
    *,
    admin_key: str | os.PathLike[str] | Ed25519PrivateKey,
    key: bytes | None = None,
) -> RedactionReport:
    """Sign, as an administrator, the unsigned redactions an older version wrote.

    Their records then verify again, with the limit that the content of a version 1 record
    masked in place rests on this signature, not on its chain hash. Review them first
    (``agent-saga verify`` names them).

    Raises:
        ConfigurationError, LogError, CorruptLogError: as :func:`redact_path`.
    """
    signer = AdminSigner.load(admin_key)
    signer.require_trusted()
    chain = Chain(key)
    with _Log(log) as opened:
        found = opened.read(chain, unsigned=True)
        unsigned = [
            record
            for _, record in found
            if record.kind == REDACTION_KIND and "signature" not in record.data
        ]
        confirmed = {c for _, r in found if r.kind == REDACTION_KIND for c in _confirms(r)}
        todo = [r for r in unsigned if r.seq not in confirmed]
        if not todo:
            return RedactionReport({}, None)
        entries = [e for r in todo for e in _entries(r)]
        last = found[-1][1]
        statement = signed_statement(
            signer, last.seq + 1, last.hash, entries, confirms=[r.seq for r in todo]
        )
        masked = {int(str(e["seq"])): _paths(e) for e in entries}
        lines = [line for line, _ in found]
        return RedactionReport(masked, opened.append(lines, chain, last, statement))


def _confirms(record: Record) -> list[int]:
    value = record.data.get("confirms")
    return [c for c in value if type(c) is int] if isinstance(value, list) else []


def _entries(record: Record) -> list[dict[str, JSONValue]]:
    value = record.data.get("records")
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def _paths(entry: dict[str, JSONValue]) -> list[str]:
    paths = entry.get("paths")
    return [str(p) for p in paths] if isinstance(paths, list) else []
