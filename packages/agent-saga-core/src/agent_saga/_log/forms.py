"""A record's ``data`` in its two canonical forms, hashed and stored, for the shapes the engine
writes most.

The format is :mod:`.commit`'s: the hashed form replaces each committed leaf by its salted
commitment, the stored form is ``canonical(data)``. Nearly every committed value the engine
writes is one scalar (a result) or one object of scalars (the arguments), under one committed
key. For those, the hashed form is encoded once (C encoder), each leaf once, and the stored
form is the hashed bytes with each quoted commitment swapped for its leaf's bytes (a commitment
is a hash over a fresh random salt, so it occurs nowhere else); every other shape goes to the
reference implementations, :func:`.commit.sealed_forms` and :func:`.commit.open_forms`.

Invariant: for the same ``data`` and the same salts in leaf order, the bytes are those of the
reference implementations (pinned by ``tests/test_seal_bytes.py``); an error is theirs too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from hashlib import blake2s
from json.encoder import encode_basestring as _quote  # C-accelerated; keeps non-ASCII
from typing import Any, NamedTuple

from .codec import CodecError, JSONValue, canonical
from .commit import (
    COMMITTED,
    SALT_LEN,
    SALT_POOL,
    open_forms,
    scalar_bytes,
    sealed_forms,
    swapped,
    take_salt,
)
from .records import Entry

__all__ = ["Prepared", "json_string", "open_forms_fast", "prepare", "seal_forms"]

_COMMITTED_SET = frozenset(COMMITTED)
_UNMASKED_SALTS = re.compile(rb"(?:[A-Za-z0-9_-]{22})+")
_pop = SALT_POOL.pop
_STRINGS: dict[str, bytes] = {}
_STRINGS_MAX = 4096
_tuple = tuple.__new__


def json_string(text: str) -> bytes:
    """``canonical(text)`` for a record's kind or saga id (cached: a saga writes many records).

    Raises:
        CodecError: ``text`` is not valid Unicode (a lone surrogate).
    """
    encoded = _STRINGS.get(text)
    if encoded is None:
        try:
            encoded = _quote(text).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CodecError(f"no canonical JSON form: {exc}") from exc
        if len(_STRINGS) >= _STRINGS_MAX:
            _STRINGS.clear()
        _STRINGS[text] = encoded
    return encoded


def _salt() -> bytes:
    try:
        return _pop()
    except IndexError:
        return take_salt()


def _only_key(data: dict[str, Any]) -> str | None:
    """The one committed key of ``data``, or ``None`` when it has none or several."""
    found = None
    for key in COMMITTED:
        if key in data:
            if found is not None:
                return None
            found = key
    return found


def _one_value(
    data: dict[str, Any], key: str, salt: Callable[[], bytes], drawn: list[bytes]
) -> tuple[bytes, bytes] | None:
    """Both forms of ``data`` whose only committed value, under ``key``, is a scalar or a
    non-empty object of scalars; ``None`` for another shape (``drawn`` holds the salts used)."""
    value = data[key]
    encoded = scalar_bytes(value)
    hashed = dict(data)
    if encoded is not None:
        drawn.append(first := salt())
        digest = blake2s(first + encoded).hexdigest()
        hashed[key] = digest
        hashed_bytes = canonical(hashed)
        return hashed_bytes, hashed_bytes.replace(b'"%s"' % digest.encode(), encoded, 1)
    if type(value) is not dict or not value:
        return None
    skeleton: dict[str, str] = {}
    swaps: list[tuple[bytes, bytes]] = []
    for name in sorted(value):
        encoded = scalar_bytes(value[name])
        if encoded is None or type(name) is not str:
            return None
        drawn.append(next_salt := salt())
        skeleton[name] = digest = blake2s(next_salt + encoded).hexdigest()
        swaps.append((b'"%s"' % digest.encode(), encoded))
    hashed[key] = skeleton
    hashed_bytes = canonical(hashed)
    return hashed_bytes, swapped(hashed_bytes, swaps)


def _replay(drawn: list[bytes], draw: Callable[[], bytes]) -> Callable[[], bytes]:
    """A salt source that hands out ``drawn`` first, then draws fresh ones."""
    pending: Iterator[bytes] = iter(drawn)

    def next_salt() -> bytes:
        return next(pending, None) or draw()

    return next_salt


def seal_forms(data: dict[str, JSONValue]) -> tuple[bytes, bytes, str | None]:
    """For fresh ``data``: the canonical bytes of its hashed form and of its stored form, and
    its new salts in leaf order (``None``, and the same bytes twice, when it commits nothing).

    Raises:
        CodecError: a value has no canonical form.
    """
    if _COMMITTED_SET.isdisjoint(data):
        stored = canonical(data)
        return stored, stored, None
    key = _only_key(data)
    drawn: list[bytes] = []
    if key is not None:
        forms = _one_value(data, key, _salt, drawn)
        if forms is not None:
            return forms[0], forms[1], b"".join(drawn).decode("ascii")
    general = sealed_forms(data, _replay(drawn, take_salt))
    assert general is not None  # data commits a value
    return general


def open_forms_fast(data: dict[str, Any], salts: Any) -> tuple[bytes, bytes]:
    """For stored ``data`` with its ``salts``: the canonical bytes of its hashed form and its
    canonical stored bytes, as :func:`.commit.open_forms` gives them (masked values and every
    error included: those cases are handed to it).

    Raises:
        CodecError: the salts are malformed or do not match the committed values one for one,
            or a value has no canonical form.
    """
    key = _only_key(data) if type(salts) is str and salts.isascii() else None
    if key is not None:
        raw = salts.encode("ascii")
        if _UNMASKED_SALTS.fullmatch(raw) is not None:
            pool = [raw[at : at + SALT_LEN] for at in range(len(raw) - SALT_LEN, -1, -SALT_LEN)]
            try:
                forms = _one_value(data, key, pool.pop, [])
            except (ValueError, IndexError):
                forms = None  # the reference implementation says what is wrong
            if forms is not None and not pool:
                return forms
    hashed, stored, _ = open_forms(data, salts)
    return hashed, stored


class Prepared(NamedTuple):
    """An entry's encoded parts that do not depend on its place in the chain (its salts are
    drawn here, once)."""

    entry: Entry
    hashed: bytes
    """The canonical bytes of its data as hashed (committed values replaced)."""
    data: bytes
    """The canonical bytes of its data as stored (the same object as ``hashed`` without salts)."""
    salts: str | None
    kind: bytes
    """``kind`` as a JSON string."""
    saga: bytes
    """``saga`` as a JSON string, or ``null``."""


def prepare(entry: Entry) -> Prepared:
    """Encode ``entry``'s parts, drawing the salts of its committed values.

    Raises:
        CodecError: the entry's data, kind or saga has no canonical form.
    """
    hashed_bytes, data_bytes, salts = seal_forms(entry.data)
    saga = entry.saga
    saga_json = b"null" if saga is None else json_string(saga)
    parts = (entry, hashed_bytes, data_bytes, salts, json_string(entry.kind), saga_json)
    return _tuple(Prepared, parts)  # without the Python-level ``__new__``: once per record
