"""One origin's branch of records, read from a home-shaped directory and checked against the
origin's own key.

A directory holds a branch when it is laid out like an agent-saga home: ``log.jsonl`` (the
records), ``keys/checkpoint.pub`` (the origin's Ed25519 verifier key) and
``checkpoints/latest.note`` (its latest signed checkpoint), with any earlier checkpoints under
``checkpoints/seen/``. A device's home is one; so is every origin of a mesh directory.

An origin *is* its key: its id is the SHA-256 of the Ed25519 public key, and the key's name must
be the one the core derives from that key (:func:`~agent_saga.proofs._signing.key_name`), so no
key can speak for another origin. A record counts only when a checkpoint signed by its origin
covers it: the branch is the longest prefix of the log that verifies as a chain and whose Merkle
root is the root of a checkpoint signed by the origin. Everything after it is rejected, with the
reason; nothing here raises on what a directory holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ..._errors import ConfigurationError, CorruptLogError
from ..._log.chain import HASH_MISMATCH, MAX_RECORD_BYTES, Chain
from ..._log.files import LOG_NAME
from ..._log.read import iter_log
from ..._log.records import Record
from .._checkpoint import (
    MAX_CHECKPOINT_BYTES,
    Checkpoint,
    CheckpointError,
    open_checkpoint,
)
from .._logtree import record_leaf
from .._note import NoteVerifier
from .._tree import MerkleTree

PUBLIC_KEY = Path("keys") / "checkpoint.pub"
LATEST = Path("checkpoints") / "latest.note"
SEEN = Path("checkpoints") / "seen"
MAX_NOTE_FILES = 10_000
"""Checkpoints read per branch at most (a directory holding more is refused)."""


@dataclass(frozen=True)
class Origin:
    """A device's log identity: its checkpoint verifier key."""

    verifier: NoteVerifier

    @property
    def id(self) -> str:
        """The SHA-256 of the public key, in hex: the origin's directory in a mesh."""
        return hashlib.sha256(self.verifier.public_key).hexdigest()

    @property
    def name(self) -> str:
        """The key's name (``agent-saga.log/<16 hex digits>``), as people see the origin."""
        return self.verifier.name


@dataclass(frozen=True)
class Rejection:
    """Something an input offered that was not merged, and why."""

    source: str
    origin: str | None
    what: str
    """What was refused: ``"every record"``, ``"records 6-10"``, ``"checkpoint <file>"``."""
    reason: str

    def __str__(self) -> str:
        who = f" (origin {self.origin})" if self.origin else ""
        return f"{self.source}{who}: {self.what} rejected: {self.reason}"


@dataclass(frozen=True, eq=False)
class Branch:
    """The first ``size`` records of ``log`` (``end`` bytes), checked: a hash chain from the
    first record, covered by ``checkpoints`` signed with the origin's key (the largest of size
    ``size``). ``records`` holds them when asked for."""

    origin: Origin
    log: Path
    size: int
    end: int
    tree: MerkleTree
    checkpoints: tuple[Checkpoint, ...]
    records: tuple[Record, ...] = ()

    @property
    def tip(self) -> bytes:
        """The leaf hash of the last record (it commits to every record before it)."""
        return self.tree.leaf_hash(self.size - 1)

    def extends(self, other: Branch) -> bool:
        """Whether ``other``'s records are a prefix of this branch's (same origin)."""
        return (
            other.origin.id == self.origin.id
            and other.size <= self.size
            and self.tree.leaf_hash(other.size - 1) == other.tip
        )

    def common_prefix(self, other: Branch) -> int:
        """How many first records the two branches share (0 for other origins)."""
        if other.origin.id != self.origin.id:
            return 0
        lo, hi = 0, min(self.size, other.size)  # the first lo records are shared
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.tree.leaf_hash(mid - 1) == other.tree.leaf_hash(mid - 1):
                lo = mid
            else:
                hi = mid - 1
        return lo


def read_origin(directory: Path) -> Origin:
    """The origin whose verifier key ``directory`` holds.

    Raises:
        ConfigurationError: no key, an unreadable one, or a key whose name is not the one its
            public key gives (it would speak for another origin).
    """
    from .._signing import key_name, read_verifier  # cryptography: only when needed

    path = directory / PUBLIC_KEY
    if not path.is_file():
        raise ConfigurationError(
            f"no public key at {path}: the device never signed a checkpoint "
            "(run 'agent-saga checkpoint' there)"
        )
    verifier = read_verifier(path)
    if verifier.name != key_name(verifier.public_key):
        raise ConfigurationError(
            f"the key {verifier.name!r} in {path} is not named after its public key, so it "
            "cannot stand for an origin"
        )
    return Origin(verifier)


def note_files(directory: Path) -> list[Path]:
    """The checkpoint notes of a branch directory: ``latest.note`` and those under ``seen/``."""
    found = [directory / LATEST] if (directory / LATEST).is_file() else []
    seen = directory / SEEN
    if seen.is_dir():
        found.extend(sorted(p for p in seen.iterdir() if p.suffix == ".note"))
    if len(found) > MAX_NOTE_FILES:
        raise ConfigurationError(f"{directory} holds more than {MAX_NOTE_FILES} checkpoints")
    return found


def _checkpoints(
    directory: Path, origin: Origin, source: str, notes: list[tuple[Path, str]]
) -> tuple[list[Checkpoint], list[Rejection]]:
    valid: list[Checkpoint] = []
    refused: list[Rejection] = []
    for path, note in notes:
        try:
            valid.append(open_checkpoint(note, [origin.verifier], origin.name))
        except CheckpointError as exc:
            what = f"checkpoint {path.relative_to(directory)}"
            refused.append(Rejection(source, origin.name, what, str(exc)))
    return valid, refused


def read_notes(directory: Path) -> list[tuple[Path, str]]:
    """The checkpoint notes of ``directory`` as text (read before its log: see
    :func:`check_branch`); a file that vanished is left out."""
    notes = []
    for path in note_files(directory):
        try:
            with path.open("rb") as handle:  # bounded: a longer note is refused as too large
                raw = handle.read(MAX_CHECKPOINT_BYTES + 1)
            notes.append((path, raw.decode("utf-8", "replace")))  # bad bytes fail its check
        except OSError:
            continue
    return notes


@dataclass
class _Walk:
    tree: MerkleTree
    records: list[Record]
    ends: dict[int, int]
    verified: int = 0
    broken: str | None = None


def _walk(log: Path, key: bytes | None, sizes: set[int], keep: bool) -> _Walk:
    """Read ``log`` as a chain from its first record, up to its first defect."""
    walk = _Walk(MerkleTree(), [], {})
    last = -1
    try:
        for offset, record in iter_log(log, Chain(key)):
            if record.seq - 1 in sizes:
                walk.ends[record.seq - 1] = offset
            walk.tree.append(record_leaf(record))
            walk.verified = record.seq
            last = offset
            if keep:
                walk.records.append(record)
    except CorruptLogError as exc:
        hint = ""
        if exc.seq == 1 and exc.reason == HASH_MISMATCH:
            hint = " (a keyed chain is read with its chain key: --chain-key-file)"
        walk.broken = f"record {exc.seq}: {exc.reason}{hint}"
    except OSError as exc:
        walk.broken = f"cannot read {log}: {exc}"
    if walk.verified in sizes and walk.verified and walk.verified not in walk.ends:
        with log.open("rb") as handle:
            handle.seek(last)
            walk.ends[walk.verified] = last + len(handle.readline(MAX_RECORD_BYTES + 1))
    return walk


def check_branch(
    directory: Path,
    source: str,
    *,
    log: Path | None = None,
    notes: list[tuple[Path, str]] | None = None,
    key: bytes | None = None,
    trusted: Collection[NoteVerifier] | None = None,
    keep_records: bool = False,
    expect: str | None = None,
) -> tuple[Branch | None, list[Rejection]]:
    """The branch ``directory`` holds (``None`` when nothing of it counts) and what was refused.

    Args:
        directory: the home-shaped directory (its key and checkpoints).
        source: how rejections name the input.
        log: the log file to check (default ``directory/log.jsonl``; a merge passes a copy).
        notes: the checkpoints as read before the log was copied (default: read now).
        key: the chain key of a keyed chain.
        trusted: when given, only origins with one of these keys are accepted.
        keep_records: keep the branch's records (for the merged view).
        expect: the origin id the directory must hold (a mesh's ``origins/<id>``).
    """
    try:
        origin = read_origin(directory)
    except ConfigurationError as exc:
        return None, [Rejection(source, None, "every record", str(exc))]
    if expect is not None and origin.id != expect:
        reason = f"its key is not the key of origin {expect[:16]}, whose place it is in"
        return None, [Rejection(source, origin.name, "every record", reason)]
    if trusted is not None and origin.verifier.public_key not in {v.public_key for v in trusted}:
        return None, [Rejection(source, origin.name, "every record", "not a trusted origin key")]
    try:
        found = read_notes(directory) if notes is None else notes
    except ConfigurationError as exc:
        return None, [Rejection(source, origin.name, "every record", str(exc))]
    checkpoints, refused = _checkpoints(directory, origin, source, found)
    sizes = {c.size for c in checkpoints if c.size}
    walk = _walk(log or directory / LOG_NAME, key, sizes, keep_records)
    covering = [c for c in checkpoints if 0 < c.size <= walk.verified]
    for checkpoint in covering:
        if walk.tree.root(checkpoint.size) != checkpoint.root:
            reason = "its root does not match the records: they changed after it was signed"
            what = f"checkpoint of {checkpoint.size} records"
            refused.append(Rejection(source, origin.name, what, reason))
    good = [c for c in covering if walk.tree.root(c.size) == c.root]
    size = max((c.size for c in good), default=0)
    last = walk.verified if walk.broken is None else walk.verified + 1
    if walk.broken is not None or last > size:
        reason = walk.broken or "not covered by a checkpoint signed by the origin's key"
        if walk.broken is not None and size < walk.verified:
            reason += f"; records {size + 1}-{walk.verified} are not covered by a checkpoint"
        what = f"records from {size + 1} on" if walk.broken else f"records {size + 1}-{last}"
        refused.append(Rejection(source, origin.name, what, reason))
    if size == 0:
        return None, refused
    tree = MerkleTree.from_leaf_hashes(walk.tree.leaf_hash(i) for i in range(size))
    branch = Branch(
        origin,
        log or directory / LOG_NAME,
        size,
        walk.ends[size],
        tree,
        tuple(sorted(good, key=lambda c: (c.size, c.note))),
        tuple(walk.records[:size]),
    )
    return branch, refused
