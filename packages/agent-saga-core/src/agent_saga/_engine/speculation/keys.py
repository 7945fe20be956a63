"""Lease keys: HMAC-SHA-256 secrets under key ids, rotated, kept private in the home.

``<home>/keys/leases/`` (mode 0700) holds one file per key, ``<kid>.key`` (mode 0600): JSON with
the key id (16 hex digits), its creation time and the 32-byte secret in hex. The newest key
signs new leases; an older key still checks the leases it signed, and only those (a lease names
its key id, and the MAC covers it). A key is rotated out after ``ROTATE_AFTER`` and deleted once
its successor is older than the longest lease lifetime (``MAX_TTL``): no lease it signed can be
valid by then. A key file other users can read or write is refused, as ssh refuses a private
key. Secrets never appear in a ``repr`` or a message.

Processes sharing a home share the keys: each picks up keys the others made (a key id it does
not know makes it read the directory again, at most once a second).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..._config import read_private_file
from ..._errors import ConfigurationError
from ..._log.files import ensure_dir, fsync_dir, fsync_fd

KEYS_DIR = Path("keys") / "leases"
ROTATE_AFTER = 24 * 3600.0
"""Seconds a key signs new leases before a fresh one replaces it."""
MAX_TTL = 3600.0
"""The longest a lease may live, in seconds."""
_KID = re.compile(r"[0-9a-f]{16}")
_RESCAN = 1.0


def _sha256(data: bytes = b"") -> Any:
    """SHA-256 as a constructor: given one, the standard :mod:`hmac` keys two SHA-256 states
    (inner and outer) itself instead of an OpenSSL HMAC context, and those states are what
    :class:`KeyedMac` keeps."""
    return hashlib.sha256(data)


LEASE_DOMAIN = b"agent-saga lease v2\x00"
"""What a lease's MAC is computed over first (then the lease text before its MAC)."""
ARGS_DOMAIN = b"agent-saga lease arguments v1\x00"
"""What an argument digest is computed over first (then the canonical arguments)."""
_PROBE = b"agent-saga keyed MAC self-test"


class KeyedMac:
    """HMAC-SHA-256 under one secret, already fed a domain: ``digest(data)`` is
    ``HMAC-SHA-256(secret, domain || data)``, the standard MAC, byte for byte.

    The standard :mod:`hmac` module computes the keyed inner and outer SHA-256 states once
    (RFC 2104, section 4: the pads are precomputed per key); each MAC copies both, feeds the
    data to the inner one and its digest to the outer one, which is what ``HMAC.digest`` does,
    without the Python frames of ``HMAC.copy``, ``update``, ``_current`` and ``digest``. The
    states are checked against :func:`hmac.digest` when the key is made; a Python whose
    :mod:`hmac` keeps them elsewhere gets the copying of the HMAC object instead (slower, the
    same MAC). The states are never updated in place.
    """

    __slots__ = ("_hmac", "_inner", "_outer")

    def __init__(self, secret: bytes, domain: bytes) -> None:
        keyed = hmac.new(secret, domain, _sha256)
        self._hmac = keyed
        self._inner: Any = getattr(keyed, "_inner", None)
        self._outer: Any = getattr(keyed, "_outer", None)
        if self._inner is not None and self.digest(_PROBE) != hmac.digest(
            secret, domain + _PROBE, "sha256"
        ):
            self._inner = self._outer = None

    def digest(self, data: bytes) -> bytes:
        """``HMAC-SHA-256(secret, domain || data)``."""
        inner = self._inner
        if inner is None:
            copied = self._hmac.copy()
            copied.update(data)
            return copied.digest()
        inner = inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()  # type: ignore[no-any-return]


@dataclass(frozen=True, repr=False)
class LeaseKey:
    """One lease key. Its ``repr`` names the key id only.

    ``lease_mac`` and ``args_mac`` are :class:`KeyedMac` under the secret, fed their domain
    (:data:`LEASE_DOMAIN`, :data:`ARGS_DOMAIN`): a key's pads are computed once per key, not
    once per lease.
    """

    kid: str
    secret: bytes
    created: float
    """Seconds since the epoch, on the kit's clock."""
    lease_mac: KeyedMac = field(init=False, compare=False)
    args_mac: KeyedMac = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease_mac", KeyedMac(self.secret, LEASE_DOMAIN))
        object.__setattr__(self, "args_mac", KeyedMac(self.secret, ARGS_DOMAIN))

    def __repr__(self) -> str:
        return f"LeaseKey({self.kid!r})"


class LeaseKeys(Protocol):
    """Where a kit's lease keys live."""

    def current(self, now: float) -> LeaseKey:
        """The key that signs new leases (a fresh one when the newest is too old)."""
        ...

    def get(self, kid: str, now: float) -> LeaseKey | None:
        """The key ``kid``, if it is still kept."""
        ...

    def rotate(self, now: float) -> LeaseKey:
        """Make a new key the one that signs new leases; older ones keep checking theirs."""
        ...


def _new_key(now: float) -> LeaseKey:
    return LeaseKey(os.urandom(8).hex(), os.urandom(32), now)


class MemoryLeaseKeys:
    """Lease keys held in the process (kits on the memory store): nothing survives it."""

    def __init__(self) -> None:
        self._keys: dict[str, LeaseKey] = {}
        self._lock = threading.Lock()

    def current(self, now: float) -> LeaseKey:
        with self._lock:
            newest = max(self._keys.values(), key=lambda k: k.created, default=None)
        if newest is None or now - newest.created >= ROTATE_AFTER:
            return self.rotate(now)
        return newest

    def get(self, kid: str, now: float) -> LeaseKey | None:
        return self._keys.get(kid)  # one dict read: atomic, no lock needed

    def rotate(self, now: float) -> LeaseKey:
        key = _new_key(now)
        with self._lock:
            self._keys[key.kid] = key
            _retire(self._keys, now, None)
        return key


def _retire(keys: dict[str, LeaseKey], now: float, directory: Path | None) -> None:
    """Forget (and delete) every key whose successor is older than the longest lease life."""
    ordered = sorted(keys.values(), key=lambda k: (k.created, k.kid))
    for older, successor in itertools.pairwise(ordered):
        if now - successor.created > MAX_TTL:
            del keys[older.kid]
            if directory is not None:
                with contextlib.suppress(FileNotFoundError):
                    (directory / f"{older.kid}.key").unlink()


def read_key(path: Path) -> LeaseKey:
    """One key file.

    Raises:
        ConfigurationError: the file is open to other users, unreadable or malformed.
    """
    raw = read_private_file(path, "lease key file", 4096)
    try:
        info = json.loads(raw)
        kid, secret, created = info["kid"], bytes.fromhex(info["secret"]), float(info["created"])
    except (ValueError, KeyError, TypeError):
        raise ConfigurationError(f"the lease key file {path} is not a lease key") from None
    if not isinstance(kid, str) or not _KID.fullmatch(kid) or path.stem != kid or len(secret) != 32:
        raise ConfigurationError(f"the lease key file {path} is not a lease key")
    return LeaseKey(kid, secret, created)


class FileLeaseKeys:
    """The lease keys of one home (see the module docstring). Thread-safe."""

    def __init__(self, home: Path) -> None:
        self.directory = home / KEYS_DIR
        self._keys: dict[str, LeaseKey] = {}
        self._lock = threading.Lock()
        self._scanned: float | None = None

    def _scan(self, now: float) -> None:
        keys: dict[str, LeaseKey] = {}
        if self.directory.is_dir():
            for path in sorted(self.directory.glob("*.key")):
                key = read_key(path)
                keys[key.kid] = key
        self._keys = keys
        self._scanned = now

    def current(self, now: float) -> LeaseKey:
        with self._lock:
            if self._scanned is None or now - self._scanned >= 60.0:
                self._scan(now)
            newest = max(self._keys.values(), key=lambda k: (k.created, k.kid), default=None)
        if newest is None or now - newest.created >= ROTATE_AFTER:
            return self.rotate(now)
        return newest

    def get(self, kid: str, now: float) -> LeaseKey | None:
        key = self._keys.get(kid)  # one dict read (the dict is replaced whole by a scan)
        if key is not None:
            return key
        with self._lock:
            key = self._keys.get(kid)
            stale = self._scanned is None or now - self._scanned >= _RESCAN
            if key is None and _KID.fullmatch(kid) and stale:
                self._scan(now)
                key = self._keys.get(kid)
            return key

    def rotate(self, now: float) -> LeaseKey:
        key = _new_key(now)
        ensure_dir(self.directory)
        os.chmod(self.directory, 0o700)
        body = json.dumps({"kid": key.kid, "created": now, "secret": key.secret.hex()})
        path = self.directory / f"{key.kid}.key"
        tmp = self.directory / f".{key.kid}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, body.encode())
            fsync_fd(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # whole or absent: a crash never leaves half a key
        finally:
            tmp.unlink()
        fsync_dir(self.directory)
        with self._lock:
            self._keys[key.kid] = key
            _retire(self._keys, now, self.directory)
        return key
