"""The home's checkpoint signing key: created on first use, readable only by its owner.

``keys/checkpoint.key`` holds the Ed25519 private key (PKCS#8 PEM, mode 0600 in a 0700
directory), encrypted with ``$AGENT_SAGA_KEY_PASSPHRASE`` when that is set at creation (and then
needed to load it). ``keys/checkpoint.pub`` holds the verifier key an auditor needs, in the
signed-note encoding ``<name>+<id>+<key>``. The key's name, which is also the origin line of
every checkpoint it signs, is derived from the public key, so two homes never share an origin.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .._errors import ConfigurationError
from .._log.files import OS as _OS
from .._log.files import ensure_dir, fsync_dir, fsync_fd, write_fully
from ._note import NoteError, NoteSigner, NoteVerifier
from ._notefiles import KEYS_DIR, PUBLIC_NAME

PRIVATE_NAME = "checkpoint.key"
PASSPHRASE_ENV = "AGENT_SAGA_KEY_PASSPHRASE"  # noqa: S105 - the variable name, not a secret


def key_name(public_key: bytes) -> str:
    """The name (and checkpoint origin) of a home's key."""
    return "agent-saga.log/" + hashlib.sha256(public_key).hexdigest()[:16]


def _passphrase() -> bytes | None:
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode() if value else None


def _write_new(path: Path, data: bytes, mode: int) -> bool:
    """Create ``path`` with ``data`` durably and atomically; False if it already exists."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        write_fully(_OS, fd, data)
        fsync_fd(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process created the key first
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    fsync_dir(path.parent)
    return True


def _load(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=_passphrase())
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot load the checkpoint key {path}: {exc} (is ${PASSPHRASE_ENV} right?)"
        ) from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(f"{path} is not an Ed25519 key")
    return key


def home_signer(home: Path) -> NoteSigner:
    """The home's signing key, created (once, whichever process comes first) if missing."""
    directory = home / KEYS_DIR
    private = directory / PRIVATE_NAME
    if not private.exists():
        ensure_dir(directory)
        os.chmod(directory, 0o700)
        key = Ed25519PrivateKey.generate()
        passphrase = _passphrase()
        encryption: serialization.KeySerializationEncryption = (
            serialization.BestAvailableEncryption(passphrase)
            if passphrase
            else serialization.NoEncryption()
        )
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        _write_new(private, pem, 0o600)
    key = _load(private)
    signer = NoteSigner(key_name(key.public_key().public_bytes_raw()), key)
    public = directory / PUBLIC_NAME
    if not public.exists():
        _write_new(public, (signer.verifier.encode() + "\n").encode(), 0o644)
    return signer


def home_verifier(home: Path) -> NoteVerifier | None:
    """The home's public verifier key, or ``None`` when no key was ever created there."""
    public = home / KEYS_DIR / PUBLIC_NAME
    if not public.exists():
        return None
    return read_verifier(public)


def read_verifier(source: str | Path) -> NoteVerifier:
    """A verifier key given as its text or as a file holding it."""
    text = str(source)
    path = Path(text)
    if "+" not in text or path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(f"cannot read the public key {source}: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"the public key {source} is not UTF-8 text: {exc}") from None
    try:
        return NoteVerifier.parse(text)
    except NoteError as exc:
        raise ConfigurationError(f"not a verifier key ({source}): {exc}") from exc
