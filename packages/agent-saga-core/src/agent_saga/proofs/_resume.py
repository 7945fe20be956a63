"""Resume points: where a full or resumed verify found the log matching a signed checkpoint.

After a pass confirms that the log's first ``N`` records have the root signed by a checkpoint,
it stores ``checkpoints/verified/<N, 20 digits>.json``: the checkpoint's signed note, the
Merkle frontier at ``N`` (O(log N) hashes), the hash of record ``N`` with its *edge* (its
inclusion path inside the frontier's last subtree) and the offset where record ``N`` ends in
the file log. ``verify --since`` and ``certify --since`` start from the newest such point.

What is trusted, and how it is checked before use:

* The note must verify with the keys the caller trusts (the home's own, or ``--key``).
* The frontier must fold to the note's root, and the record hash with its edge to the
  frontier's last subtree: so the frontier and record ``N``'s hash are the ones the signed
  root commits to (forging either means a SHA-256 collision).
* The offset is not trusted: the records after it must continue the chain from record ``N``'s
  hash, from ``seq N + 1``, else the point is not used and the whole log is read.

What a resumed pass does not check: the records up to ``N``. They were verified by the pass
that stored the point; tampering with them afterwards is found by a full ``verify``, by
``verify`` against a checkpoint that covers them, or by a later resumed pass only where it
breaks the chain at record ``N``. A point is a file of a few kilobytes; none is ever deleted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._log.files import ensure_dir, write_atomic
from ._checkpoint import Checkpoint, CheckpointError, open_checkpoint
from ._frontier import fold_edge, fold_frontier
from ._merkle import HASH_SIZE, leaf_hash
from ._note import NoteVerifier

CHECKPOINTS_DIR = "checkpoints"
VERIFIED_DIR = "verified"
_SUFFIX = ".json"
_MAX_POINT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Captured:
    """The state of a streaming pass just after record ``size``."""

    size: int
    frontier: list[bytes]
    edge: list[bytes]
    hash: str
    """Record ``size``'s chain hash (hex)."""
    offset: int
    """Where record ``size`` ends in the file log, across segments (-1: not a file log)."""


@dataclass(frozen=True)
class ResumePoint:
    """A :class:`Captured` state confirmed by a signed checkpoint of the same size."""

    checkpoint: Checkpoint
    state: Captured

    def encode(self) -> bytes:
        body = {
            "v": 1,
            "note": self.checkpoint.note,
            "size": self.state.size,
            "frontier": [h.hex() for h in self.state.frontier],
            "edge": [h.hex() for h in self.state.edge],
            "hash": self.state.hash,
            "offset": self.state.offset,
        }
        return json.dumps(body, sort_keys=True, indent=1).encode() + b"\n"


def confirm(checkpoint: Checkpoint, state: Captured) -> str | None:
    """Why ``state`` is not the state the signed ``checkpoint`` commits to; ``None``: it is."""
    size = state.size
    if size != checkpoint.size or size <= 0:
        return f"it is for {size} records, the checkpoint for {checkpoint.size}"
    if len(state.frontier) != size.bit_count():
        return "its frontier has the wrong number of hashes"
    if fold_frontier(state.frontier) != checkpoint.root:
        return "its frontier does not lead to the checkpoint's root"
    if len(state.edge) != (size & -size).bit_length() - 1:
        return "its edge has the wrong number of hashes"
    try:
        leaf = leaf_hash(bytes.fromhex(state.hash))
    except ValueError:
        return "its record hash is not hex"
    if len(state.hash) != 2 * HASH_SIZE or fold_edge(leaf, state.edge) != state.frontier[-1]:
        return f"record {size}'s hash is not the last leaf under the checkpoint's root"
    return None


def save_point(home: Path, point: ResumePoint) -> Path:
    """Store ``point`` durably (written to a temporary name, fsynced, renamed)."""
    directory = home / CHECKPOINTS_DIR / VERIFIED_DIR
    ensure_dir(directory)
    path = directory / f"{point.state.size:020d}{_SUFFIX}"
    write_atomic(path, point.encode())
    return path


def load_point(
    home: Path, at_most: int, verifiers: Sequence[NoteVerifier]
) -> tuple[ResumePoint | None, list[str]]:
    """The newest usable resume point of at most ``at_most`` records, and why newer ones were
    not used (one line each)."""
    directory = home / CHECKPOINTS_DIR / VERIFIED_DIR
    try:
        names = sorted((p.name for p in directory.iterdir()), reverse=True)
    except OSError:
        return None, []
    refused: list[str] = []
    for name in names:
        stem = name.removesuffix(_SUFFIX)
        if not name.endswith(_SUFFIX) or len(stem) != 20 or not stem.isdigit():
            continue
        if int(stem) > at_most or int(stem) == 0:
            continue
        point, why = read_point(directory / name, verifiers)
        if point is not None:
            return point, refused
        refused.append(f"resume point {name} not used: {why}")
    return None, refused


def read_point(path: Path, verifiers: Sequence[NoteVerifier]) -> tuple[ResumePoint | None, str]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(_MAX_POINT_BYTES + 1)
        obj = json.loads(raw)
        if len(raw) > _MAX_POINT_BYTES or not isinstance(obj, dict) or obj.get("v") != 1:
            return None, "not a resume point"
        state = Captured(
            int(obj["size"]),
            [bytes.fromhex(h) for h in obj["frontier"]],
            [bytes.fromhex(h) for h in obj["edge"]],
            str(obj["hash"]),
            int(obj["offset"]),
        )
        checkpoint = open_checkpoint(str(obj["note"]), list(verifiers))
    except CheckpointError as exc:
        return None, f"its checkpoint is rejected ({exc})"
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
        # OverflowError: a number of 1e400 (infinity) where an integer belongs; RecursionError:
        # JSON nested past the parser's limit. A garbled file is ignored like any other.
        return None, f"unreadable ({exc})"
    if any(len(h) != HASH_SIZE for h in [*state.frontier, *state.edge]):
        return None, "a hash is not 32 bytes"
    why = confirm(checkpoint, state)
    if why is not None:
        return None, why
    return ResumePoint(checkpoint, state), ""
