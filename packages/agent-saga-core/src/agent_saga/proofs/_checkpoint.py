"""Checkpoints: signed statements of the log's Merkle tree size and root.

The body follows C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): the origin line, the
tree size in decimal, the base64 root hash, then optional extension lines; it is wrapped in a
signed note (:mod:`agent_saga.proofs._note`).

A newer checkpoint is accepted only when a consistency proof shows that the older tree is a
prefix of the newer one (:func:`check_extension`). That single rule catches a truncated log
(smaller size), a rewritten log (the proof fails) and a forked one (same size, another root).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import AgentSagaError
from ._merkle import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency
from ._note import NoteError, NoteSigner, NoteVerifier, open_note, sign_note

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ForkError",
    "UncapturedError",
    "check_extension",
    "open_checkpoint",
    "parse_checkpoint",
]

MAX_CHECKPOINT_BYTES = 64 * 1024
_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")


class CheckpointError(AgentSagaError, ValueError):
    """A checkpoint is malformed, unsigned, or does not extend the previous one."""


class ForkError(CheckpointError):
    """Two signed checkpoints that cannot both describe one append-only log.

    Attributes:
        older, newer: the two checkpoints (both kept as evidence by the caller).
    """

    def __init__(self, message: str, older: Checkpoint, newer: Checkpoint) -> None:
        super().__init__(message)
        self.older = older
        self.newer = newer


class UncapturedError(CheckpointError):
    """The latest checkpoint's size was passed without its root being computed (another
    process published it while the log was read): read again, capturing ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__(
            f"a checkpoint of {size} records was published while the log was read; "
            "run the command again"
        )
        self.size = size


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: ``size`` records whose Merkle root is ``root``, for the log ``origin``.

    ``note`` is the signed note it was read from (empty for an unsigned one being built).
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if not self.origin or not self.origin.isprintable():
            raise CheckpointError("a checkpoint's origin is a non-empty printable line")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise CheckpointError("a checkpoint's size is a non-negative integer")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            raise CheckpointError(f"a checkpoint's root is {HASH_SIZE} bytes")
        if self.size == 0 and self.root != EMPTY_ROOT:
            raise CheckpointError("the empty tree has only one root")
        for line in self.extensions:
            if not line or "\n" in line or not line.isprintable():
                raise CheckpointError("extension lines are non-empty printable lines")

    def body(self) -> str:
        """The checkpoint's text, as signed."""
        root = base64.b64encode(self.root).decode()
        lines = [self.origin, str(self.size), root, *self.extensions]
        return "\n".join(lines) + "\n"

    def sign(self, signer: NoteSigner) -> Checkpoint:
        """This checkpoint with its signed note."""
        try:
            note = sign_note(self.body(), signer)
        except NoteError as exc:
            raise CheckpointError(str(exc)) from exc
        return Checkpoint(self.origin, self.size, self.root, self.extensions, note)


def parse_checkpoint(body: str) -> Checkpoint:
    """Parse a checkpoint body (the text of its note), strictly."""
    if not body.endswith("\n"):
        raise CheckpointError("a checkpoint body ends with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("a checkpoint has an origin, a size and a root")
    origin, size_text, root_text, *extensions = lines
    if not _SIZE.fullmatch(size_text):
        raise CheckpointError(f"invalid tree size {size_text[:40]!r}")
    try:
        root = base64.b64decode(root_text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise CheckpointError("the root is not valid base64") from exc
    if base64.b64encode(root).decode() != root_text:
        raise CheckpointError("the root is not in canonical base64")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def open_checkpoint(
    note: str, verifiers: Sequence[NoteVerifier], origin: str | None = None
) -> Checkpoint:
    """Verify a signed checkpoint note and parse it.

    Args:
        note: the signed note text.
        verifiers: the keys trusted to sign checkpoints; other signatures are ignored.
        origin: when given, the checkpoint must be for this log.

    Raises:
        CheckpointError: bad signature, no trusted signature, malformed body, other origin.
    """
    if len(note) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(f"checkpoint larger than {MAX_CHECKPOINT_BYTES} bytes")
    try:
        text, _ = open_note(note, list(verifiers))
    except NoteError as exc:
        raise CheckpointError(f"checkpoint signature: {exc}") from exc
    parsed = parse_checkpoint(text)
    if origin is not None and parsed.origin != origin:
        raise CheckpointError(f"checkpoint is for {parsed.origin!r}, not {origin!r}")
    return Checkpoint(parsed.origin, parsed.size, parsed.root, parsed.extensions, note)


def check_extension(older: Checkpoint, newer: Checkpoint, proof: Sequence[bytes]) -> None:
    """Accept ``newer`` only if the log it describes extends the one ``older`` describes.

    Raises:
        CheckpointError: ``newer`` is for another log or describes fewer records (the log was
            truncated or rolled back).
        ForkError: the same size with another root, or a consistency proof that fails: the
            records ``older`` covers were changed.
    """
    if newer.origin != older.origin:
        raise CheckpointError(f"checkpoints of two logs ({older.origin!r}, {newer.origin!r})")
    if newer.size < older.size:
        raise CheckpointError(
            f"log truncated or rolled back: {newer.size} records now, "
            f"{older.size} in the earlier checkpoint"
        )
    if newer.size == older.size:
        if newer.root != older.root:
            raise ForkError(f"two roots for the first {older.size} records", older, newer)
        return
    if older.size == 0:
        return  # every tree extends the empty one
    try:
        verify_consistency(older.size, newer.size, list(proof), older.root, newer.root)
    except ProofError as exc:
        raise ForkError(
            f"the first {older.size} records changed since the earlier checkpoint ({exc})",
            older,
            newer,
        ) from exc
