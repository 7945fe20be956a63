"""Moving sealed segments to the home's archive (a directory or an S3-compatible bucket).

"Move" here means, for each sealed segment not archived yet, in this order:

1. its records are verified from its bytes (the chain from the summary's ``prev`` to its
   ``last`` record and hash, and its length), so only a sound segment is archived;
2. it is copied to the archive: to a temporary name that is fsynced and renamed, with the
   directory fsynced, for a directory; with one PUT carrying its SHA-256, for S3;
3. the copy is read back in full and its SHA-256 and length compared with the local file's;
4. the marker ``segments/<first>.archived`` (location, length, SHA-256) is written and fsynced,
   and so is its directory;
5. only then is the local file removed (and the directory fsynced).

The first segment, ``log.jsonl``, is never moved: it is what marks a home as holding a log
(and it is a single-file home's whole log before its first roll). A crash anywhere leaves
either the local file (before 5; the next run starts again from 1, and a copy already in the
archive is overwritten by an identical one) or the durable, verified copy and its marker. The
open segment is never archived. Nothing is deleted from the archive, ever; the summary
(``.sealed``) stays in the home. Moving a segment back is copying it back to its
place in ``segments/`` (readers prefer a local file to the archive).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import NamedTuple

from .._errors import CorruptLogError
from .archive import (
    ArchiveReader,
    Marker,
    Target,
    marker_path,
    read_marker,
    s3_client,
    sha256_of,
)
from .chain import Chain
from .files import OS, ensure_dir, fsync_dir, open_read, write_atomic, write_fully
from .read import layout_of
from .scan import scan
from .segments import SEGMENTS_DIR, Segment, Summary

__all__ = ["Archived", "archive_sealed"]


class Archived(NamedTuple):
    """One segment moved by :func:`archive_sealed`."""

    first: int
    url: str
    size: int


def archive_sealed(home: Path, target: Target, key: bytes | None = None) -> list[Archived]:
    """Move every sealed segment of ``home``'s log that is still local to ``target``.

    Returns what was moved, oldest first. Segments already archived are skipped.

    Raises:
        CorruptLogError: a sealed segment does not verify (nothing after it is moved).
        OSError: a copy cannot be written or read back (the local file is kept).
    """
    layout = layout_of(home / "log.jsonl")
    chain = Chain(key)
    moved: list[Archived] = []
    for seg, summary in zip(layout.sealed, layout.summaries, strict=False):
        if summary is None:
            raise CorruptLogError(seg.path, 0, "sealed segment has no summary: open the log first")
        if seg.first == 1 or not os.path.exists(seg.path):
            continue  # log.jsonl marks the home as holding a log; or archived already
        moved.append(_move(home, seg, summary, target, chain))
    return moved


def _move(home: Path, seg: Segment, summary: Summary, target: Target, chain: Chain) -> Archived:
    fd = open_read(OS, seg.path)
    try:
        size = OS.size(fd)
        tail = scan(OS, fd, chain, seg.path, seq=summary.first - 1, prev=summary.prev, end=size)
        if tail.damage is not None:
            raise tail.damage
        if (tail.seq, tail.hash, tail.end, size) != (
            summary.last,
            summary.hash,
            size,
            summary.size,
        ):
            raise CorruptLogError(seg.path, tail.end, "sealed segment does not match its summary")
        digest = sha256_of(OS, fd, size)
        name = Path(seg.path).name
        url = target.url(name)
        if target.kind == "dir":
            _copy_to_dir(fd, size, Path(target.location), name)
        else:
            _put_s3(fd, size, target, name, digest)
    finally:
        OS.close(fd)
    copied = _read_back(url, target, size)
    if copied != digest:
        raise OSError(f"the copy at {url} does not match {seg.path} (SHA-256 {copied})")
    marker = Marker(url, size, digest)
    write_atomic(Path(marker_path(home, seg.first)), marker.encode())
    existing = read_marker(OS, home, seg.first)
    if existing != marker:
        raise OSError(f"the marker of {seg.path} did not read back")
    os.unlink(seg.path)
    fsync_dir(home / SEGMENTS_DIR)
    return Archived(seg.first, url, size)


def _copy_to_dir(fd: int, size: int, directory: Path, name: str) -> None:
    ensure_dir(directory)
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        position = 0
        while position < size:
            chunk = OS.pread(fd, min(1 << 20, size - position), position)
            if not chunk:
                raise OSError(f"{name} shrank while it was copied")
            write_fully(OS, out, chunk)
            position += len(chunk)
        OS.fsync(out)
    finally:
        os.close(out)
    os.replace(tmp, directory / name)
    fsync_dir(directory)


def _put_s3(fd: int, size: int, target: Target, name: str, digest: str) -> None:
    import base64

    body = OS.pread(fd, size, 0)  # one sealed segment (64 MB by default) at a time
    if len(body) != size or hashlib.sha256(body).hexdigest() != digest:
        raise OSError(f"{name} changed while it was copied")
    client = s3_client(target.endpoint, target.region)
    client.put_object(
        Bucket=target.location,
        Key=target.key(name),
        Body=body,
        ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(),
    )


def _read_back(url: str, target: Target, size: int) -> str:
    reader = ArchiveReader()
    fs, fd = reader.open(url, target)
    try:
        if fs.size(fd) != size:
            raise OSError(f"the copy at {url} is {fs.size(fd)} bytes, not {size}")
        return sha256_of(fs, fd, size)
    finally:
        fs.close(fd)
