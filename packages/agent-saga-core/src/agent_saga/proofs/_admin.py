"""An administrator's signing key: the private half of a trusted administrator key.

Made by ``agent-saga keys new admin.key`` (PKCS#8 PEM, mode 0600, encrypted with
``$AGENT_SAGA_KEY_PASSPHRASE`` when that is set) and kept *outside* the home: anyone who can
write the home must not be able to read it. Its public half (``admin.key.pub``) is listed in
``admin_keys`` (see :mod:`agent_saga._log.admins`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .._log.admins import admin_id, trusted_admin_keys
from ._signing import PASSPHRASE_ENV

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["AdminSigner"]


class AdminSigner:
    """Signs with an administrator's Ed25519 private key."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.public_key = key.public_key().public_bytes_raw()
        self.id = admin_id(self.public_key)
        """How records name this key (base64 of the raw public key)."""

    @classmethod
    def load(cls, source: str | os.PathLike[str] | Ed25519PrivateKey) -> AdminSigner:
        """The key in a PEM file (or the key itself).

        Raises:
            ConfigurationError: the file cannot be read or holds no Ed25519 private key.
        """
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if isinstance(source, Ed25519PrivateKey):
            return cls(source)
        path = Path(source)
        passphrase = os.environ.get(PASSPHRASE_ENV)
        try:
            key = serialization.load_pem_private_key(
                path.read_bytes(), password=passphrase.encode() if passphrase else None
            )
        except (OSError, TypeError, ValueError) as exc:
            raise ConfigurationError(f"cannot load the administrator key {path}: {exc}") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigurationError(f"{path} is not an Ed25519 private key")
        return cls(key)

    def require_trusted(self) -> None:
        """Refuse a key that readers would not trust (what it signs would not verify).

        Raises:
            ConfigurationError: its public key is not among the trusted administrator keys.
        """
        if self.public_key not in trusted_admin_keys():
            raise ConfigurationError(
                f"the administrator key {self.id} is not trusted: add its public key to "
                "admin_keys in agent-saga.toml (or [tool.agent-saga]) first"
            )

    def sign(self, message: bytes) -> bytes:
        return self._key.sign(message)
