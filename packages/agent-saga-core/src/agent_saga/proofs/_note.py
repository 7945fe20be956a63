"""C2SP signed notes with Ed25519 keys: signing, verifying, and the key encodings.

A signed note (https://c2sp.org/signed-note) is UTF-8 text ending in ``\\n``, a blank line, and
one or more signature lines ``"\\u2014 <key name> <base64(key id || signature)>\\n"``. The
signature covers the text including its final newline. A key's 4-byte id is the first four bytes
of ``SHA-256(name || "\\n" || 0x01 || public key)`` (``0x01`` is the Ed25519 signature type), and
a verifier key is shared as ``<name>+<hex id>+<base64(0x01 || public key)>``.

Verification follows the spec's rules: signature lines from unknown keys are ignored, a line
whose name and id match a known key but whose signature does not verify rejects the whole note,
and a note without any verified signature is rejected. Inputs are bounded (note size, number of
signature lines), and every refusal is a :class:`NoteError`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import AgentSagaError

if TYPE_CHECKING:  # cryptography is imported when a key is first used, not with the package
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "NoteError",
    "NoteSigner",
    "NoteVerifier",
    "key_id",
    "open_note",
    "sign_note",
]

MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
_DASH = "\u2014 "
_ED25519 = b"\x01"


class NoteError(AgentSagaError, ValueError):
    """A note, key or signature was malformed, unsigned, or signed by the wrong key."""


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name) or not name.isprintable():
        raise NoteError(f"invalid key name {name!r}: non-empty, no spaces, no '+'")
    return name


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte id of an Ed25519 key named ``name``."""
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + public_key).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise NoteError(f"{what} is not valid base64") from exc


@dataclass(frozen=True)
class NoteVerifier:
    """An Ed25519 public key under a name, as a verifier key string describes it."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if len(self.public_key) != 32:
            raise NoteError("an Ed25519 public key is 32 bytes")

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public_key)

    @classmethod
    def parse(cls, text: str) -> NoteVerifier:
        """Parse ``<name>+<hex id>+<base64(0x01 || key)>``; the id must match the key."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise NoteError("a verifier key reads <name>+<hex id>+<base64 key>")
        name, hex_id, encoded = parts
        raw = _b64decode(encoded, "the verifier key")
        if len(raw) != 33 or raw[:1] != _ED25519:
            raise NoteError("the verifier key is not an Ed25519 key")
        verifier = cls(name, raw[1:])
        if hex_id.lower() != verifier.id.hex() or len(hex_id) != 8:
            raise NoteError("the verifier key's id does not match its name and key")
        return verifier

    def encode(self) -> str:
        key = base64.b64encode(_ED25519 + self.public_key).decode()
        return f"{self.name}+{self.id.hex()}+{key}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


class NoteSigner:
    """An Ed25519 private key under a name."""

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        self.name = _check_name(name)
        self._key = private_key
        public = private_key.public_key().public_bytes_raw()
        self.verifier = NoteVerifier(name, public)

    def sign_bytes(self, message: bytes) -> bytes:
        """A raw Ed25519 signature (callers add their own domain-separating prefix)."""
        return self._key.sign(message)

    def sign(self, text: str) -> str:
        """The signature line for ``text`` (which must already be a valid note text)."""
        signature = self._key.sign(text.encode())
        encoded = base64.b64encode(self.verifier.id + signature).decode()
        return f"{_DASH}{self.name} {encoded}\n"


def _check_text(text: str) -> None:
    if not text.endswith("\n") or "\n\n" in text:
        raise NoteError("note text must end in a newline and contain no blank line")
    if any(c < " " and c != "\n" for c in text):
        raise NoteError("note text contains a control character")


def sign_note(text: str, signer: NoteSigner) -> str:
    """The signed note: ``text``, a blank line and ``signer``'s signature line."""
    _check_text(text)
    note = text + "\n" + signer.sign(text)
    if len(note.encode()) > MAX_NOTE_BYTES:
        raise NoteError(f"note larger than {MAX_NOTE_BYTES} bytes")
    return note


def open_note(note: str, verifiers: list[NoteVerifier]) -> tuple[str, list[NoteVerifier]]:
    """Verify ``note`` against known keys; returns its text and the keys that signed it.

    Raises:
        NoteError: the note is malformed, a known key's signature fails, or no known key
            signed it.
    """
    if len(note.encode("utf-8", "surrogatepass")) > MAX_NOTE_BYTES:
        raise NoteError(f"note larger than {MAX_NOTE_BYTES} bytes")
    split = note.rfind("\n\n")
    if split < 0:
        raise NoteError("not a signed note: no blank line before the signatures")
    text, block = note[: split + 1], note[split + 2 :]
    _check_text(text)
    if not block.endswith("\n"):
        raise NoteError("signature block must end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    known = {(v.name, v.id): v for v in verifiers}
    signed: list[NoteVerifier] = []
    message = text.encode()
    for line in lines:
        if not line.startswith(_DASH):
            raise NoteError("malformed signature line")
        name, _, encoded = line[len(_DASH) :].partition(" ")
        raw = _b64decode(encoded, "a signature")
        if len(raw) < 5:
            raise NoteError("signature too short")
        verifier = known.get((name, raw[:4]))
        if verifier is None:
            continue  # another party's signature: ignored, as the spec says
        if not verifier.verify(message, raw[4:]):
            raise NoteError(f"invalid signature by {name}")
        if verifier not in signed:
            signed.append(verifier)
    if not signed:
        raise NoteError("no signature by a known key")
    return text, signed
