"""Lease keys: keyed BLAKE2s secrets under key ids, rotated, kept private in the home.

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
import itertools
import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

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


LEASE_FORMAT = "asl3"
"""The first field of every lease text (the format: keyed BLAKE2s MACs)."""
LEASE_PERSON = b"asl3 mac"
"""The BLAKE2s personalization of a lease's MAC (8 bytes, RFC 7693 section 2.8)."""
ARGS_PERSON = b"asl3 arg"
"""The BLAKE2s personalization of an argument digest, so the two never share an input space."""


def keyed_blake2s(secret: bytes, person: bytes) -> hashlib.blake2s:
    """BLAKE2s-256 keyed with ``secret`` (RFC 7693's keyed mode, a MAC as it stands) and
    personalized with ``person``; the state is keyed once, so a MAC copies it and feeds it the
    data (one state, one finalization: no inner and outer hash as in HMAC)."""
    return hashlib.blake2s(key=secret, person=person)


@dataclass(frozen=True, repr=False)
class LeaseKey:
    """One lease key. Its ``repr`` names the key id only.

    ``lease_mac`` and ``args_mac`` are BLAKE2s states keyed with the secret and personalized
    (:data:`LEASE_PERSON`, :data:`ARGS_PERSON`), keyed once per key: each MAC is
    ``state.copy()``, fed its data, finalized. The states are never updated in place.
    """

    kid: str
    secret: bytes
    created: float
    """Seconds since the epoch, on the kit's clock."""
    lease_mac: hashlib.blake2s = field(init=False, compare=False)
    args_mac: hashlib.blake2s = field(init=False, compare=False)
    lease_head: bytes = field(init=False, compare=False)
    """What every lease text under this key begins with: ``asl3.<kid>.``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease_head", f"{LEASE_FORMAT}.{self.kid}.".encode("ascii"))
        object.__setattr__(self, "lease_mac", keyed_blake2s(self.secret, LEASE_PERSON))
        object.__setattr__(self, "args_mac", keyed_blake2s(self.secret, ARGS_PERSON))

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
