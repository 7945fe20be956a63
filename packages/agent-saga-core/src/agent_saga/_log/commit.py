"""Salted commitments: how a record's chain hash commits to the values that may be masked later.

The values a tool hands in or out, and exception messages, may hold secrets: the subtrees
under the record's top-level data keys :data:`COMMITTED` (``args``, ``cause``, ``error``,
``result``). Everything else (kind, saga, seq, ts, tool, ordinal, status, ...) is hashed in the
clear and can never be masked.

Every *leaf* of a committed subtree (a scalar, or an empty object or list), taken in canonical
order (committed keys in sorted order, object keys sorted, list items in order), gets its own
random salt of :data:`SALT_LEN` base64url characters (132 bits), and its commitment is::

    c = BLAKE2s-256(salt || canonical(value))      (64 lowercase hex digits)

The chain hash covers the record with each leaf replaced by its commitment (the *hashed form*);
the record stores the plain values, and the salts concatenated in leaf order in its ``salts``
field. Masking a leaf replaces its value by ``{"$redacted": c}`` and its salt by
:data:`MASKED_SALT`: the chain hash is unchanged, every other value is still checked against it
through its published salt, and the masked value cannot be guessed from ``c`` because its salt
is gone. The salts are independent random values (not derived from one seed), so publishing
some reveals nothing about the others.

One canonical encoding serves both forms: the stored bytes are the hashed form's bytes with
each quoted commitment replaced by its value's encoding (a commitment is a hash over a fresh
random salt, so it occurs nowhere else). A reader checks the stored bytes the same way: the
result can equal them only if they are the canonical encoding of what was hashed.
"""

from __future__ import annotations

import os
import re
import threading
from binascii import b2a_base64
from collections.abc import Callable
from hashlib import blake2s
from json.encoder import encode_basestring as _quote
from typing import Any

from .codec import CodecError, JSONValue, canonical

__all__ = [
    "COMMITTED",
    "MARKER",
    "MASKED_SALT",
    "SALT_LEN",
    "SALT_POOL",
    "commitment",
    "is_marker",
    "leaf_bytes",
    "masked_leaves",
    "open_forms",
    "scalar_bytes",
    "sealed_forms",
    "swapped",
    "take_salt",
]

COMMITTED = ("args", "cause", "error", "result")
"""Top-level data keys whose values are committed leaf by leaf (in this, sorted, order)."""
SALT_LEN = 22
MASKED_SALT = "." * SALT_LEN
"""What replaces a masked leaf's salt (``.`` is not a base64url character)."""
MARKER = "$redacted"
_COMMITTED_SET = frozenset(COMMITTED)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SALTS = re.compile(r"(?:[A-Za-z0-9_-]{22}|\.{22})*")
_URLSAFE = bytes.maketrans(b"+/", b"-_")


class _SaltSource:
    """Random salts drawn from a pool refilled in bulk (one ``getrandom`` per 248 salts).

    ``list.pop`` is atomic, so no two records, in any threads, ever get the same salt; a forked
    child starts with an empty pool (and a fresh lock), so parent and child never share one.
    The pool is one list for the life of the process (emptied in place in a forked child), so a
    caller may hold its ``pop`` and call :meth:`take` when it is empty.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pool: list[bytes] = []

    def reset(self) -> None:
        self._lock = threading.Lock()
        self.pool.clear()

    def take(self) -> bytes:
        try:
            return self.pool.pop()
        except IndexError:
            with self._lock:
                raw = os.urandom(3 * 22 * 62)  # 248 salts of 22 base64url characters
                text = b2a_base64(raw, newline=False).translate(_URLSAFE)
                fresh = [text[i : i + SALT_LEN] for i in range(0, len(text), SALT_LEN)]
                self.pool.extend(fresh)
            return self.take()


_SOURCE = _SaltSource()
take_salt = _SOURCE.take
"""A fresh salt (22 base64url bytes), never handed out twice."""
SALT_POOL = _SOURCE.pool
"""The salts :func:`take_salt` hands out next, last first (``SALT_POOL.pop()`` takes one
when the pool is not empty)."""
os.register_at_fork(after_in_child=_SOURCE.reset)


def scalar_bytes(value: Any) -> bytes | None:
    """``canonical(value)`` for a str, int, bool or ``None``; ``None`` for anything else (and
    for an int with more digits than Python converts).

    Raises:
        CodecError: a string that is not valid Unicode.
    """
    kind = type(value)
    if kind is str:
        try:
            return _quote(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CodecError(f"no canonical JSON form: {exc}") from exc
    if kind is int:
        try:
            return b"%d" % value
        except ValueError:
            return None
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    return None


def leaf_bytes(value: Any) -> bytes:
    """``canonical(value)``, with the common scalars done directly.

    Raises:
        CodecError: the value has no canonical form.
    """
    encoded = scalar_bytes(value)
    return canonical(value) if encoded is None else encoded


def commitment(salt: str, value: Any) -> str:
    """The commitment to the leaf ``value`` under ``salt``.

    Raises:
        CodecError: the value has no canonical form.
    """
    return blake2s(salt.encode("ascii") + leaf_bytes(value)).hexdigest()


class _Committer:
    """Builds the hashed form of fresh subtrees, salting leaf after leaf (salts from ``draw``);
    ``swaps`` pairs each quoted commitment with the encoded value it stands for."""

    __slots__ = ("draw", "salts", "swaps")

    def __init__(self, draw: Callable[[], bytes]) -> None:
        self.draw = draw
        self.salts: list[bytes] = []
        self.swaps: list[tuple[bytes, bytes]] = []

    def form(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict and value:
            return {key: self.form(value[key]) for key in sorted(value)}
        if kind is list and value:
            return [self.form(item) for item in value]
        salt = self.draw()
        self.salts.append(salt)
        encoded = leaf_bytes(value)
        digest = blake2s(salt + encoded).hexdigest()
        self.swaps.append((b'"' + digest.encode() + b'"', encoded))
        return digest


def swapped(hashed_bytes: bytes, swaps: list[tuple[bytes, bytes]]) -> bytes:
    """``hashed_bytes`` with each quoted commitment replaced by its leaf's bytes, in one pass.

    The commitments occur in ``swaps``' order (leaves are visited in the encoder's key order),
    so each is searched for after the previous one: linear in the bytes, where replacing them
    one at a time from the start was quadratic (200,000 leaves took minutes). Should one not be
    found after the previous, each is replaced from the start instead (same bytes, slower).
    """
    parts: list[bytes] = []
    at = 0
    for quoted, encoded in swaps:
        found = hashed_bytes.find(quoted, at)
        if found < 0:
            return _swapped_anywhere(hashed_bytes, swaps)
        parts.append(hashed_bytes[at:found])
        parts.append(encoded)
        at = found + len(quoted)
    parts.append(hashed_bytes[at:])
    return b"".join(parts)


def _swapped_anywhere(hashed_bytes: bytes, swaps: list[tuple[bytes, bytes]]) -> bytes:
    for quoted, encoded in swaps:
        hashed_bytes = hashed_bytes.replace(quoted, encoded, 1)
    return hashed_bytes


def sealed_forms(
    data: dict[str, JSONValue], draw: Callable[[], bytes] = take_salt
) -> tuple[bytes, bytes, str] | None:
    """For fresh ``data``: the canonical bytes of its hashed form and of its stored form
    (``canonical(data)``), and its new salts (from ``draw``, in leaf order); ``None`` when it
    commits nothing.

    This is the format's reference implementation, for any value ``canonical`` encodes; the
    chain seals through :func:`agent_saga._log.forms.seal_forms`, which gives the same bytes
    for the same salts in one pass.

    Raises:
        CodecError: a value has no canonical form.
    """
    present = _COMMITTED_SET.intersection(data)
    if not present:
        return None
    hashed: dict[str, Any] = dict(data)
    committer = _Committer(draw)
    for key in sorted(present):
        hashed[key] = committer.form(data[key])
    hashed_bytes = canonical(hashed)
    stored = swapped(hashed_bytes, committer.swaps)
    return hashed_bytes, stored, b"".join(committer.salts).decode("ascii")


def is_marker(value: Any) -> bool:
    """Whether ``value`` has the form of a masked leaf, ``{"$redacted": <64 hex digits>}``."""
    if type(value) is not dict or len(value) != 1:
        return False
    digest = value.get(MARKER)
    return type(digest) is str and _HEX64.fullmatch(digest) is not None


class _Opener:
    """Rebuilds the hashed form from stored values and salts, masked leaves included."""

    __slots__ = ("at", "masked", "salts", "swaps")

    def __init__(self, salts: str) -> None:
        self.salts = salts
        self.at = 0
        self.masked: list[int] = []
        self.swaps: list[tuple[bytes, bytes]] = []

    def form(self, value: Any) -> Any:
        at = self.at
        salt = self.salts[at : at + SALT_LEN]
        if len(salt) < SALT_LEN:
            raise CodecError("fewer salts than committed values")
        kind = type(value)
        if salt == MASKED_SALT and is_marker(value):
            self.masked.append(at // SALT_LEN)
            self.at = at + SALT_LEN
            digest: str = value[MARKER]
            quoted = b'"' + digest.encode() + b'"'
            self.swaps.append((quoted, b'{"$redacted":' + quoted + b"}"))
            return digest
        if kind is dict and value:
            return {key: self.form(value[key]) for key in sorted(value)}
        if kind is list and value:
            return [self.form(item) for item in value]
        if salt == MASKED_SALT:
            raise CodecError(f"committed value {at // SALT_LEN} is masked without its marker")
        self.at = at + SALT_LEN
        encoded = leaf_bytes(value)
        digest = blake2s(salt.encode("ascii") + encoded).hexdigest()
        self.swaps.append((b'"' + digest.encode() + b'"', encoded))
        return digest


def open_forms(data: dict[str, Any], salts: Any) -> tuple[bytes, bytes, list[int]]:
    """For stored ``data`` with its ``salts``: the canonical bytes of its hashed form, its
    canonical stored bytes (``canonical(data)``), and the indexes of its masked leaves.

    The reference implementation, masked leaves included; readers check records through
    :func:`agent_saga._log.forms.open_forms_fast`, which gives the same bytes in one pass.

    Raises:
        CodecError: the salts are malformed or do not match the committed values one for one,
            or a value has no canonical form.
    """
    if type(salts) is not str or len(salts) % SALT_LEN or _SALTS.fullmatch(salts) is None:
        raise CodecError(f"salts must be {SALT_LEN}-character base64url salts")
    present = [key for key in COMMITTED if key in data]
    if not present:
        raise CodecError("salts on a record that commits no values")
    hashed = dict(data)
    opener = _Opener(salts)
    for key in present:
        hashed[key] = opener.form(data[key])
    if opener.at != len(salts):
        raise CodecError("more salts than committed values")
    hashed_bytes = canonical(hashed)
    return hashed_bytes, swapped(hashed_bytes, opener.swaps), opener.masked


def masked_leaves(salts: str | None) -> list[int]:
    """Indexes of the masked leaves of a record with these salts."""
    if not salts or "." not in salts:
        return []
    step = SALT_LEN
    return [i // step for i in range(0, len(salts), step) if salts[i : i + step] == MASKED_SALT]
