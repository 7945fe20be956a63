"""Salted commitments: how a record's chain hash commits to the values that may be masked later.

The values a tool hands in or out, and exception messages, may hold secrets: the subtrees
under the record's top-level data keys :data:`COMMITTED` (``args``, ``cause``, ``error``,
``result``). Everything else (kind, saga, seq, ts, tool, ordinal, status, ...) is hashed in the
clear and can never be masked.

Every *leaf* of a committed subtree (a scalar, or an empty object or list), taken in canonical
order (committed keys in sorted order, object keys sorted, list items in order), gets its own
random salt of :data:`SALT_LEN` base64url characters (132 bits), and its commitment is::

    c = SHA-256(salt || canonical(value))      (64 lowercase hex digits)

The chain hash covers the record with each leaf replaced by its commitment (the *hashed form*);
the record stores the plain values, and the salts concatenated in leaf order in its ``salts``
field. Masking a leaf replaces its value by ``{"$redacted": c}`` and its salt by
:data:`MASKED_SALT`: the chain hash is unchanged, every other value is still checked against it
through its published salt, and the masked value cannot be guessed from ``c`` because its salt
is gone. The salts are independent random values (not derived from one seed), so publishing
some reveals nothing about the others.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Mapping
from json.encoder import encode_basestring as _quote
from typing import Any

from .codec import CodecError, JSONValue, canonical

__all__ = [
    "COMMITTED",
    "MASKED_SALT",
    "MARKER",
    "SALT_LEN",
    "Leaf",
    "hashed_form",
    "leaves_of",
    "masked_leaves",
    "open_form",
    "rebuild",
]

COMMITTED = ("args", "cause", "error", "result")
"""Top-level data keys whose values are committed leaf by leaf (in this, sorted, order)."""
SALT_LEN = 22
MASKED_SALT = "." * SALT_LEN
"""What replaces a masked leaf's salt (``.`` is not a base64url character)."""
MARKER = "$redacted"
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SALTS = re.compile(r"(?:[A-Za-z0-9_-]{22}|\.{22})*")
_sha256 = hashlib.sha256


class _SaltSource:
    """Random salts drawn from a pool refilled in bulk (one ``getrandom`` per ~180 salts).

    A forked child starts with an empty pool, so parent and child never share a salt.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text = b""
        self._at = 0

    def reset(self) -> None:
        self._text, self._at = b"", 0

    def take(self, count: int) -> bytes:
        size = count * SALT_LEN
        with self._lock:
            at = self._at
            if at + size > len(self._text):
                self._text = base64.urlsafe_b64encode(os.urandom(max(3072, size)))
                at = 0
            self._at = at + size
            return self._text[at : at + size]


_SOURCE = _SaltSource()
os.register_at_fork(after_in_child=_SOURCE.reset)


def _encoded(value: Any) -> bytes:
    """``canonical(value)`` for a leaf, with the common scalars done directly."""
    kind = type(value)
    try:
        if kind is str:
            return _quote(value).encode("utf-8")
        if kind is int:
            return int.__repr__(value).encode("ascii")
    except UnicodeEncodeError as exc:
        raise CodecError(f"no canonical JSON form: {exc}") from exc
    if value is None:
        return b"null"
    if value is True:
        return b"true"
    if value is False:
        return b"false"
    return canonical(value)


def _count(value: Any) -> int:
    kind = type(value)
    if kind is dict:
        return sum(_count(v) for v in value.values()) if value else 1
    if kind is list:
        return sum(_count(v) for v in value) if value else 1
    return 1


class _Committer:
    """Builds the hashed form of fresh subtrees, salting leaf after leaf."""

    __slots__ = ("at", "salts")

    def __init__(self, salts: bytes) -> None:
        self.salts = salts
        self.at = 0

    def form(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict and value:
            return {key: self.form(value[key]) for key in sorted(value)}
        if kind is list and value:
            return [self.form(item) for item in value]
        at = self.at
        self.at = at + SALT_LEN
        return _sha256(self.salts[at : at + SALT_LEN] + _encoded(value)).hexdigest()


def hashed_form(data: dict[str, JSONValue]) -> tuple[dict[str, JSONValue], str] | None:
    """The hashed form of fresh ``data`` and its new salts; ``None`` when it commits nothing.

    Raises:
        CodecError: a leaf has no canonical form.
    """
    present = [key for key in COMMITTED if key in data]
    if not present:
        return None
    if len(present) == 1:  # the usual record: one subtree, often one scalar
        value = data[present[0]]
        count = 1 if type(value) not in (dict, list) else _count(value)
    else:
        count = sum(_count(data[key]) for key in present)
    salts = _SOURCE.take(count)
    committer = _Committer(salts)
    hashed = dict(data)
    for key in present:
        hashed[key] = committer.form(data[key])
    return hashed, salts.decode("ascii")


class _Opener:
    """Rebuilds the hashed form from stored values and salts, masked leaves included."""

    __slots__ = ("at", "masked", "salts")

    def __init__(self, salts: str) -> None:
        self.salts = salts
        self.at = 0
        self.masked: list[int] = []

    def salt(self) -> str:
        if self.at + SALT_LEN > len(self.salts):
            raise CodecError("fewer salts than committed values")
        return self.salts[self.at : self.at + SALT_LEN]

    def form(self, value: Any) -> Any:
        salt = self.salt()
        kind = type(value)
        if salt == MASKED_SALT and _is_marker(value):
            self.masked.append(self.at // SALT_LEN)
            self.at += SALT_LEN
            return value[MARKER]
        if kind is dict and value:
            return {key: self.form(value[key]) for key in sorted(value)}
        if kind is list and value:
            return [self.form(item) for item in value]
        if salt == MASKED_SALT:
            raise CodecError(f"committed value {self.at // SALT_LEN} is masked without its marker")
        self.at += SALT_LEN
        return _sha256(salt.encode("ascii") + _encoded(value)).hexdigest()


def _is_marker(value: Any) -> bool:
    if type(value) is not dict or len(value) != 1:
        return False
    digest = value.get(MARKER)
    return type(digest) is str and _HEX64.fullmatch(digest) is not None


def open_form(data: dict[str, Any], salts: Any) -> tuple[dict[str, Any], list[int]]:
    """The hashed form of stored ``data`` with its ``salts``, and the indexes of masked leaves.

    Raises:
        CodecError: the salts are malformed or do not match the committed values one for one.
    """
    if type(salts) is not str or len(salts) % SALT_LEN or _SALTS.fullmatch(salts) is None:
        raise CodecError(f"salts must be {SALT_LEN}-character base64url salts")
    present = [key for key in COMMITTED if key in data]
    if not present:
        raise CodecError("salts on a record that commits no values")
    opener = _Opener(salts)
    hashed = dict(data)
    for key in present:
        hashed[key] = opener.form(data[key])
    if opener.at != len(salts):
        raise CodecError("more salts than committed values")
    return hashed, opener.masked


def masked_leaves(salts: str | None) -> list[int]:
    """Indexes of the masked leaves of a record with these salts."""
    if not salts or "." not in salts:
        return []
    step = SALT_LEN
    return [i // step for i in range(0, len(salts), step) if salts[i : i + step] == MASKED_SALT]


class Leaf:
    """One committed value of a stored record, as :func:`leaves_of` finds it."""

    __slots__ = ("index", "path", "salt", "value")

    def __init__(self, index: int, path: tuple[str, ...], salt: str, value: Any) -> None:
        self.index = index
        self.path = path
        self.salt = salt
        self.value = value

    @property
    def masked(self) -> bool:
        return self.salt == MASKED_SALT

    def commitment(self) -> str:
        if self.masked:
            return str(self.value[MARKER])
        return _sha256(self.salt.encode("ascii") + _encoded(self.value)).hexdigest()


def leaves_of(data: dict[str, Any], salts: str) -> list[Leaf]:
    """Every committed value of stored ``data``, in leaf order, with its concrete path.

    Raises:
        CodecError: as :func:`open_form`.
    """
    open_form(data, salts)  # checks the salts against the values
    found: list[Leaf] = []

    def visit(value: Any, path: tuple[str, ...]) -> None:
        at = len(found) * SALT_LEN
        salt = salts[at : at + SALT_LEN]
        kind = type(value)
        if salt == MASKED_SALT and _is_marker(value):
            found.append(Leaf(len(found), path, salt, value))
        elif kind is dict and value:
            for key in sorted(value):
                visit(value[key], (*path, key))
        elif kind is list and value:
            for index, item in enumerate(value):
                visit(item, (*path, str(index)))
        else:
            found.append(Leaf(len(found), path, salt, value))

    for key in COMMITTED:
        if key in data:
            visit(data[key], (key,))
    return found


def rebuild(data: dict[str, Any], replace: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    """``data`` with the committed value at each path of ``replace`` replaced by the value it
    maps to (containers copied where changed)."""

    def visit(value: Any, path: tuple[str, ...]) -> Any:
        if path in replace:
            return replace[path]
        if type(value) is dict and value:
            return {key: visit(item, (*path, key)) for key, item in value.items()}
        if type(value) is list and value:
            return [visit(item, (*path, str(i))) for i, item in enumerate(value)]
        return value

    out = dict(data)
    for key in COMMITTED:
        if key in data:
            out[key] = visit(data[key], (key,))
    return out
