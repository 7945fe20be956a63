"""The hashed form of a stored record line, rebuilt from its bytes without decoding them.

A version 2 record's hash covers its hashed form: the stored bytes with each committed leaf
replaced by its quoted commitment, ``"BLAKE2s-256(salt || leaf bytes)"`` (see :mod:`.commit`).
For the shapes the engine writes (every value of ``data`` a scalar, or an object or list of
scalars), one regular expression over ``data`` finds the committed values and their leaves,
so the hashed form is the stored bytes with those spans swapped: each leaf is hashed over its
stored bytes, nothing is decoded or re-encoded.

Why that checks the stored bytes exactly: the hashed form fixes every byte outside the leaves
and, through each commitment, each leaf's bytes and salt; so a stored line whose rebuilt hashed
form has the record's hash is, byte for byte, the line that was sealed. Lines outside these
shapes, with masked values, or whose hash does not match, get ``None`` here and are checked
(and their defect named) by decoding them.
"""

from __future__ import annotations

import re
from binascii import hexlify
from functools import cache
from hashlib import blake2s
from itertools import count

from .commit import SALT_LEN

__all__ = ["hashed_data", "hashed_data_when_warm"]

_STR = rb'"[^"\\\x00-\x1f]*(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*)*"'
_SCALAR = (
    rb"(?:" + _STR + rb"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null)"
)
_FLAT = (
    rb"(?:" + _SCALAR
    + rb"|\{(?:" + _STR + rb":" + _SCALAR + rb"(?:," + _STR + rb":" + _SCALAR + rb")*)?\}"
    + rb"|\[(?:" + _SCALAR + rb"(?:," + _SCALAR + rb")*)?\])"
)  # fmt: skip
_MEMBER = (
    rb'(?:"args":(?P<args>' + _FLAT + rb')|"cause":(?P<cause>' + _FLAT + rb")"
    rb'|"error":(?P<error>' + _FLAT + rb')|"result":(?P<result>' + _FLAT + rb")"
    rb'|(?!"(?:args|cause|error|result)":)' + _STR + rb":" + _FLAT + rb")"
)
_LEAF = re.compile(rb"[{,\[](?:" + _STR + rb":)?(" + _SCALAR + rb")")
_CONTAINERS = b"{["


@cache
def _data_pattern() -> re.Pattern[bytes]:
    """The data object's pattern, compiled on first use: compiling it takes 10-20 ms, which
    every ``import agent_saga`` paid though only reading committed lines needs it."""
    return re.compile(rb"\{(?:" + _MEMBER + rb"(?:,(?!\})|(?=\})))+\}")


WARM_AFTER = 512
"""Lines a process checks by decoding before it compiles the data pattern: compiling costs
about as much as decoding this many lines instead (10-12 ms against 15-30 us a line), so a
process that checks only a log's tail (opening a kit) never pays for it."""
_checked = count()


def hashed_data_when_warm(line: bytes, end: int, salts: bytes) -> bytes | None:
    """:func:`hashed_data`, or ``None`` for the process's first :data:`WARM_AFTER` lines (the
    caller then checks the line by decoding it: the same verdict on any line the engine
    sealed; decoding also refuses ``data`` that is not canonical JSON, which the rebuilt form
    does not look at, so a hand-made line of that kind is refused among the first lines and
    passed by the shortcut after them, as a full read refuses it)."""
    if next(_checked) < WARM_AFTER:
        return None
    return hashed_data(line, end, salts)


def hashed_data(line: bytes, end: int, salts: bytes) -> bytes | None:
    """``line[:end]`` (``{"data":`` and the data object) in its hashed form, or ``None``.

    ``salts`` are the line's stored salts. ``None`` when ``data`` is not of the shapes above,
    commits nothing, has a masked value or another number of leaves than salts.
    """
    if b"." in salts or len(salts) % SALT_LEN:
        return None
    found = _data_pattern().fullmatch(line, 8, end)
    if found is None:
        return None
    pieces: list[bytes] = []
    last = at = 0
    for start, stop in found.regs[1:]:  # args, cause, error, result: in leaf order
        if start < last:  # absent (-1), or out of order
            if start < 0:
                continue
            return None
        if line[start] in _CONTAINERS and stop - start > 2:
            spans = [leaf.span(1) for leaf in _LEAF.finditer(line, start, stop)]
        else:
            spans = [(start, stop)]
        for first, after in spans:
            digest = hexlify(blake2s(salts[at : at + SALT_LEN] + line[first:after]).digest())
            pieces += (line[last:first], b'"', digest, b'"')
            last = after
            at += SALT_LEN
    if at != len(salts) or not at:  # as many salts as leaves, and at least one
        return None
    pieces.append(line[last:end])
    return b"".join(pieces)
