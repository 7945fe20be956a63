"""Masking values already stored in a file log, so they are no longer on disk in plaintext.

The log is rewritten once, under the writers' exclusive lock, while no agent has it open: each
masked record keeps its original chain hash, and one ``log.redaction`` record appended at the end
names every masked record, its paths and the SHA-256 of its new bytes. The chain, the Merkle tree
and every earlier checkpoint therefore stay valid, and ``verify`` shows what was masked and when.
See :mod:`agent_saga._log.redaction` for what this does and does not prove.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._errors import LogError
from .._log.chain import Chain, _line, _tail
from .._log.codec import JSONValue, canonical
from .._log.files import (
    LOCK_NAME,
    LOG_NAME,
    OS,
    OWNERS_DIR,
    WATERMARK_NAME,
    encode_watermark,
    fsync_dir,
    fsync_fd,
    write_fully,
)
from .._log.locks import owner_alive
from .._log.records import Entry, Record
from .._log.redaction import LATER, REDACTION_KIND, mask, parse_path, redaction_digest
from .._log.scan import content_end, walk

__all__ = ["RedactionReport", "redact_path"]


@dataclass(frozen=True)
class RedactionReport:
    """What :func:`redact_path` masked: ``{seq: [concrete paths]}``, and its record's ``seq``."""

    masked: dict[int, list[str]]
    record_seq: int | None


def _live_owners(home: Path) -> list[str]:
    owners = home / OWNERS_DIR
    if not owners.is_dir():
        return []
    names = [p.stem for p in owners.glob("*.lock")]
    return [name for name in names if owner_alive(OS, home, name)]


def _replace(path: Path, content: bytes) -> None:
    tmp = path.with_name(f".{path.name}.redact.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write_fully(OS, fd, content)
        fsync_fd(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _stored_line(record: Record, data: JSONValue) -> bytes:
    tail = _tail(record.kind, record.prev, record.saga, record.seq, record.ts)
    return _line(canonical(data), record.hash, tail)


def redact_path(
    log: str | os.PathLike[str],
    path: str,
    *,
    seqs: Iterable[int] | None = None,
    key: bytes | None = None,
    reason: str = "",
) -> RedactionReport:
    """Mask the value at ``path`` in every stored record (or in the records ``seqs``).

    ``path`` is dotted and relative to a record's data, with ``*`` for any key or element:
    ``"args.card.cvv"``, ``"args.items.*.cvv"``. ``log`` is the log file or the home holding it.

    Raises:
        LogError: an agent still has the log open (stop it first), or the path is invalid.
        CorruptLogError: the log does not verify before the change (nothing is changed).
    """
    target = Path(log)
    home = target if target.is_dir() else target.parent
    log_path = home / LOG_NAME
    try:
        parts = parse_path(path)
    except ValueError as exc:
        raise LogError(str(exc)) from None
    wanted = None if seqs is None else set(seqs)
    live = _live_owners(home)
    if live:
        raise LogError(f"the log is open in {len(live)} live process(es); stop them first")
    lock_fd = os.open(home / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        if _live_owners(home):  # one may have opened the log while we waited for the lock
            raise LogError("an agent opened the log meanwhile; stop it first")
        return _rewrite(log_path, home, parts, path, wanted, Chain(key), reason)
    finally:
        os.close(lock_fd)


def _rewrite(
    log_path: Path,
    home: Path,
    parts: tuple[str, ...],
    path: str,
    wanted: set[int] | None,
    chain: Chain,
    reason: str,
) -> RedactionReport:
    lines: list[bytes] = []
    masked: dict[int, list[str]] = {}
    entries: list[dict[str, JSONValue]] = []
    last: Record | None = None
    raw = log_path.read_bytes()
    fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
    try:  # read under the exclusive lock we hold (iter_log would wait for a shared one)
        found = list(walk(OS, fd, chain, str(log_path), end=content_end(OS, fd, len(raw))))
    finally:
        os.close(fd)
    for offset, length, record in found:
        line = raw[offset : offset + length]
        last = record
        if wanted is None or record.seq in wanted:
            data, hits = mask(record.data, [parts], LATER)
            if hits:
                line = _stored_line(record, data) + b"\n"
                masked[record.seq] = hits
                entries.append(
                    {"seq": record.seq, "paths": list(hits), "digest": redaction_digest(line[:-1])}
                )
        lines.append(line)
    if not masked or last is None:
        return RedactionReport({}, None)
    statement: dict[str, JSONValue] = {"records": list(entries), "path": path}
    if reason:
        statement["reason"] = reason
    entry = Entry(REDACTION_KIND, None, statement, int(time.time() * 1000))
    sealed, stored = chain.seal(entry, last.seq + 1, last.hash)
    content = b"".join(lines) + stored
    _replace(log_path, content)
    _replace(home / WATERMARK_NAME, encode_watermark(len(content)))
    return RedactionReport(masked, sealed.seq)
