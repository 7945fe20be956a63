"""Administrator keys: the Ed25519 public keys trusted to authorize changes to what a log says.

Two things can change what a log says after the fact, and both need an administrator's
signature: masking a stored value (a ``log.redaction`` record, see :mod:`.redaction`) and
registering or revoking an approver's key (see :mod:`agent_saga._approvals.request`).

The trusted public keys are configured *outside the home*, so that writing to the home is not
enough to make a key trusted: ``admin_keys = [...]`` in ``agent-saga.toml`` or
``[tool.agent-saga]`` (each entry a verifier key ``<name>+<id>+<base64>``, or the path of a PEM
public key file such as the ``.pub`` written by ``agent-saga keys new``; relative paths are
relative to the configuration file), or given for one run with :func:`trusting_admins` (the
CLI's ``--admin-key``). The private keys never belong in the home.

Keys are read only when a record that needs one is met, so a log with no redaction and no
approver key never reads the configuration.
"""

from __future__ import annotations

import binascii
import hashlib
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .._config import find_config
from .._errors import ConfigurationError

__all__ = [
    "admin_id",
    "b64decode",
    "b64encode",
    "parse_public_key",
    "trusted_admin_keys",
    "trusting_admins",
    "verify_signature",
]

_ED25519 = b"\x01"
_OVERRIDES: list[frozenset[bytes]] = []
_LOCK = threading.Lock()


def b64encode(raw: bytes) -> str:
    """Standard base64 (``binascii``: no extra module is loaded with the log)."""
    return binascii.b2a_base64(raw, newline=False).decode("ascii")


def b64decode(text: object, size: int | None = None) -> bytes | None:
    """The bytes of strict standard base64 ``text`` (of ``size`` bytes when given), or ``None``."""
    if not isinstance(text, str):
        return None
    try:
        raw = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    return raw if size is None or len(raw) == size else None


def admin_id(public_key: bytes) -> str:
    """How records name an administrator key: the base64 of its 32 raw bytes."""
    return b64encode(public_key)


def _from_verifier_text(text: str) -> bytes | None:
    """The raw key of a signed-note verifier key ``<name>+<hex id>+<base64(0x01 || key)>``."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        return None
    name, hex_id, encoded = parts
    raw = b64decode(encoded, 33)
    if raw is None or raw[:1] != _ED25519:
        return None
    expected = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    return raw[1:] if hex_id.lower() == expected else None


def _from_pem(data: bytes) -> bytes | None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        return None
    return key.public_bytes_raw() if isinstance(key, Ed25519PublicKey) else None


def parse_public_key(entry: str, base: Path | None = None) -> bytes:
    """The raw 32-byte Ed25519 key named by ``entry``: a verifier key's text, or the path of a
    file holding a PEM public key or a verifier key (relative to ``base`` when given).

    Raises:
        ConfigurationError: the entry names no readable Ed25519 public key.
    """
    raw = _from_verifier_text(entry) if "+" in entry else None
    if raw is not None:
        return raw
    path = Path(entry)
    if base is not None and not path.is_absolute():
        path = base / path
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"administrator key {entry!r}: cannot read {path}: {exc}") from exc
    raw = _from_pem(data)
    if raw is None:
        try:
            raw = _from_verifier_text(data.decode("utf-8"))
        except UnicodeDecodeError:
            raw = None
    if raw is None:
        raise ConfigurationError(
            f"administrator key {entry!r}: {path} holds no Ed25519 public key (PEM or verifier key)"
        )
    return raw


def trusted_admin_keys() -> frozenset[bytes]:
    """The administrator keys trusted now: those of the innermost :func:`trusting_admins`, else
    the configuration's ``admin_keys`` (none when it lists none).

    Raises:
        ConfigurationError: a configured key cannot be read.
    """
    with _LOCK:
        if _OVERRIDES:
            return _OVERRIDES[-1]
    config = find_config()
    base = config.source.parent if config.source is not None else None
    return frozenset(parse_public_key(entry, base) for entry in config.admin_keys)


@contextmanager
def trusting_admins(keys: Iterable[bytes | str]) -> Iterator[frozenset[bytes]]:
    """Trust exactly ``keys`` (raw keys, or entries as :func:`parse_public_key` reads them)
    instead of the configuration's, in every thread, until the block ends."""
    trusted = frozenset(k if isinstance(k, bytes) else parse_public_key(k) for k in keys)
    if any(len(k) != 32 for k in trusted):
        raise ConfigurationError("an Ed25519 public key is 32 bytes")
    with _LOCK:
        _OVERRIDES.append(trusted)
    try:
        yield trusted
    finally:
        with _LOCK:
            _OVERRIDES.remove(trusted)


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s Ed25519 signature of ``message``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if len(public_key) != 32 or len(signature) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except InvalidSignature:
        return False
    return True
