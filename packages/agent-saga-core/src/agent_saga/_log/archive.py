"""Archived segments: where a sealed segment went, and reading it back from there.

A home's archive is named by ``<home>/archive``, one line: a directory (an absolute path, or
``file:///path``) or an S3-compatible bucket, ``s3://bucket/prefix``, optionally with
``?endpoint=URL&region=NAME`` for a store other than AWS. Credentials are never in the home:
boto3 takes them from its usual places (environment, profile, instance role).

Once segment ``k``'s copy is durable and verified (:mod:`.archiving`), the home keeps
``segments/<k>.archived``: a JSON marker with the copy's location, its length and its SHA-256.
The segment's summary (``.sealed``) stays in the home, so opening a store and finding the
layout never touch the archive; readers (verify, records, proofs) read an archived segment's
bytes from the archive, checked by the chain as any segment's are. A marker is derived data
that says where to look, never what the records are.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

from .._errors import ConfigurationError
from .files import OS
from .fs import FileSystem
from .segments import SEGMENTS_DIR

ARCHIVE_FILE = "archive"
MARKER_SUFFIX = ".archived"
_MAX_MARKER_BYTES = 4096


class Target(NamedTuple):
    """Where a home's sealed segments are archived."""

    kind: str
    """``"dir"`` or ``"s3"``."""
    location: str
    """The directory, or the bucket."""
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None

    def url(self, name: str) -> str:
        """Where the object or file ``name`` lives, for markers and messages."""
        if self.kind == "dir":
            return str(Path(self.location) / name)
        key = f"{self.prefix}/{name}" if self.prefix else name
        return f"s3://{self.location}/{key}"

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


def parse_target(text: str) -> Target:
    """The archive named by ``text`` (see the module docstring).

    Raises:
        ConfigurationError: ``text`` names neither an absolute directory nor an S3 bucket.
    """
    text = text.strip()
    parts = urlsplit(text)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ConfigurationError(f"archive {text!r}: an S3 URL names a bucket (s3://bucket)")
        query = parse_qs(parts.query)
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise ConfigurationError(f"archive {text!r}: unknown options {sorted(unknown)}")
        endpoint = query.get("endpoint", [None])[0]
        region = query.get("region", [None])[0]
        return Target("s3", parts.netloc, parts.path.strip("/"), endpoint, region)
    path = parts.path if parts.scheme == "file" else text
    if parts.scheme not in ("", "file") or not os.path.isabs(path):
        raise ConfigurationError(
            f"archive {text!r}: give an absolute directory or s3://bucket/prefix"
        )
    return Target("dir", os.path.normpath(path))


def configured_target(home: Path) -> Target | None:
    """The home's archive, from ``<home>/archive``; ``None`` when none is configured.

    Raises:
        ConfigurationError: the file is unreadable or names no valid archive.
    """
    path = home / ARCHIVE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read {path}: {exc}") from exc
    return parse_target(text)


class Marker(NamedTuple):
    """What the home keeps about one archived segment."""

    url: str
    size: int
    sha256: str

    def encode(self) -> bytes:
        body = {"v": 1, "url": self.url, "size": self.size, "sha256": self.sha256}
        return json.dumps(body, sort_keys=True).encode() + b"\n"


def marker_path(home: Path, first: int) -> str:
    return str(home / SEGMENTS_DIR / f"{first:020d}{MARKER_SUFFIX}")


def read_marker(fs: FileSystem, home: Path, first: int) -> Marker | None:
    """Segment ``first``'s archive marker; ``None`` when there is none or it is malformed."""
    path = marker_path(home, first)
    if not fs.exists(path):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if fs is OS else fs.open_rw(path)
    try:
        raw = fs.pread(fd, _MAX_MARKER_BYTES, 0)
    finally:
        fs.close(fd)
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("v") != 1:
        return None
    url, size, digest = obj.get("url"), obj.get("size"), obj.get("sha256")
    if not isinstance(url, str) or type(size) is not int or not isinstance(digest, str):
        return None
    return Marker(url, size, digest)


class ArchiveReader:
    """Reads archived segments by offset, as a :class:`FileSystem` reads files (read-only).

    Local copies are opened as files; S3 objects are read with ranged GETs, one per chunk.
    """

    def __init__(self) -> None:
        self._objects: dict[int, tuple[Any, str, str, int]] = {}
        self._next = 1 << 30

    def open(self, url: str, target: Target | None) -> tuple[FileSystem, int]:
        """``(file system, descriptor)`` to read the copy at ``url``.

        Raises:
            OSError: the copy cannot be opened (missing, unreachable).
        """
        if not url.startswith("s3://"):
            return OS, os.open(url, os.O_RDONLY | os.O_CLOEXEC)
        parts = urlsplit(url)
        endpoint = target.endpoint if target is not None and target.kind == "s3" else None
        region = target.region if target is not None and target.kind == "s3" else None
        client = s3_client(endpoint, region)
        key = parts.path.lstrip("/")
        try:
            head = client.head_object(Bucket=parts.netloc, Key=key)
        except Exception as exc:  # botocore's errors: not found, unreachable, denied
            raise OSError(f"cannot read {url}: {exc}") from exc
        fd, self._next = self._next, self._next + 1
        self._objects[fd] = (client, parts.netloc, key, int(head["ContentLength"]))
        return self, fd  # type: ignore[return-value]

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        client, bucket, key, length = self._objects[fd]
        if size <= 0 or offset >= length:
            return b""
        last = min(length, offset + size) - 1
        try:
            got = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={offset}-{last}")
            data: bytes = got["Body"].read()
        except Exception as exc:
            raise OSError(f"cannot read s3://{bucket}/{key}: {exc}") from exc
        return data

    def size(self, fd: int) -> int:
        return self._objects[fd][3]

    def exists(self, path: str) -> bool:
        return True

    def close(self, fd: int) -> None:
        self._objects.pop(fd, None)


def s3_client(endpoint: str | None, region: str | None) -> Any:
    """A boto3 S3 client (boto3 is imported only when an archive is on S3).

    Raises:
        ConfigurationError: boto3 is not installed.
    """
    try:
        import boto3
    except ImportError as exc:
        raise ConfigurationError(
            "an S3 archive needs boto3: pip install 'agent-saga[archive-s3]'"
        ) from exc
    return boto3.client("s3", endpoint_url=endpoint, region_name=region or "us-east-1")


def sha256_of(fs: FileSystem, fd: int, size: int) -> str:
    """SHA-256 of the first ``size`` bytes of ``fd``, read in chunks."""
    digest, position = hashlib.sha256(), 0
    while position < size:
        chunk = fs.pread(fd, min(1 << 20, size - position), position)
        if not chunk:
            break
        digest.update(chunk)
        position += len(chunk)
    return digest.hexdigest()
