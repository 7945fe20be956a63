"""The hash chain: sealing entries into records and checking records against their chain.

The byte layout of a stored record is its canonical JSON object (keys ``data``, ``hash``,
``kind``, ``prev``, ``saga``, ``salts`` when it has some, ``seq``, ``ts``, ``v`` in that sorted
order) followed by ``\\n``. The hashed bytes are the same object without ``hash`` and ``salts``,
in which (version 2) every committed value is replaced by its salted commitment (see
:mod:`.commit`); a record that commits no value is hashed exactly as stored. Version 1 records,
written before commitments existed, hash their stored bytes without ``hash``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from binascii import hexlify, unhexlify
from json import JSONDecoder
from json import loads as _loads
from json.encoder import encode_basestring as _quote  # C-accelerated; keeps non-ASCII
from typing import Any, Literal, NamedTuple, overload

from .codec import CodecError, canonical
from .commit import COMMITTED, masked_leaves
from .forms import Prepared, open_forms_fast, prepare
from .lineforms import hashed_data_when_warm
from .records import GENESIS, RECORD_VERSION, Entry, Record

MAX_RECORD_BYTES = 4 * 1024 * 1024
"""Records larger than this are refused on write and treated as corrupt on read."""

_VERSION_END = f',"v":{RECORD_VERSION}}}'
_fromhex = bytes.fromhex
_sha256 = hashlib.sha256
_tuple = tuple.__new__
_KEYS = frozenset({"data", "hash", "kind", "prev", "saga", "seq", "ts", "v"})
_SALTED_KEYS = _KEYS | {"salts"}
_VERSIONS = (1, RECORD_VERSION)
_HEX64 = re.compile(r"[0-9a-f]{64}")
# json.loads without its wrappers (encoding sniffing, spaces); typeshed does not list it
_scan: Any = getattr(JSONDecoder(), "scan_once")  # noqa: B009


def _tails(
    kind: str,
    prev: str,
    saga: str | None,
    seq: int,
    ts: int,
    salts: str | None = None,
    v: int = RECORD_VERSION,
) -> tuple[bytes, bytes]:
    """The encoded fields after ``data`` (and ``hash``), in canonical order: as hashed (without
    ``salts``) and as stored."""
    saga_json = "null" if saga is None else _quote(saga)
    try:
        if salts is None:
            text = (
                f',"kind":{_quote(kind)},"prev":"{prev}","saga":{saga_json},'
                f'"seq":{seq},"ts":{ts},"v":{v}}}'
            ).encode()
            return text, text
        head = f',"kind":{_quote(kind)},"prev":"{prev}","saga":{saga_json}'
        end = f',"seq":{seq},"ts":{ts},"v":{v}}}'
        return (head + end).encode("utf-8"), f'{head},"salts":{_quote(salts)}{end}'.encode()
    except UnicodeEncodeError as exc:
        raise CodecError(f"no canonical JSON form: {exc}") from exc


def _body(data_bytes: bytes, tail: bytes) -> bytes:
    return b'{"data":' + data_bytes + tail


def _line(data_bytes: bytes, digest: str, tail: bytes) -> bytes:
    return b'{"data":' + data_bytes + b',"hash":"' + digest.encode() + b'"' + tail


def _keys_problem(obj: dict[str, Any]) -> str | None:
    keys = obj.keys()
    if keys == _KEYS or (keys == _SALTED_KEYS and obj["v"] != 1):
        return None
    return f"unexpected fields {sorted(keys ^ (_SALTED_KEYS if 'salts' in keys else _KEYS))}"


def stored_line(obj: dict[str, Any]) -> bytes:
    """The stored bytes (without ``\\n``) of a decoded record object.

    Raises:
        ValueError: other fields than a record's; TypeError or CodecError: fields of the
            wrong type or without a canonical form.
    """
    problem = _keys_problem(obj) if "v" in obj else "a record has a version"
    if problem is not None:
        raise ValueError(problem)
    kind, prev, saga, seq, ts, digest = (
        obj["kind"],
        obj["prev"],
        obj["saga"],
        obj["seq"],
        obj["ts"],
        obj["hash"],
    )
    salts, version = obj.get("salts"), obj["v"]
    if not (isinstance(kind, str) and isinstance(prev, str) and isinstance(digest, str)):
        raise TypeError("kind, prev and hash are strings")
    if not (saga is None or isinstance(saga, str)) or type(seq) is not int or type(ts) is not int:
        raise TypeError("saga is a string or null; seq and ts are integers")
    if not (salts is None or isinstance(salts, str)):
        raise TypeError("salts is a string")
    if not _is_hex64(prev) or not _is_hex64(digest) or version not in _VERSIONS:
        raise ValueError("prev and hash are 64 hex digits; v is a record version")
    tail = _tails(kind, prev, saga, seq, ts, salts, version)[1]
    return _line(canonical(obj["data"]), digest, tail)


class Chain:
    """Computes record hashes, plain (SHA-256) or keyed (HMAC-SHA-256)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key

    @property
    def keyed(self) -> bool:
        return self.key is not None

    def hasher(self, prev_hex: bytes) -> Any:
        """A hash object already fed the previous record's hash (for incremental hashing)."""
        prev = unhexlify(prev_hex)
        if self.key is None:
            return hashlib.sha256(prev)
        return hmac.new(self.key, prev, hashlib.sha256)

    def digest(self, prev: str, body: bytes) -> str:
        message = bytes.fromhex(prev) + body
        if self.key is None:
            return hashlib.sha256(message).hexdigest()
        return hmac.digest(self.key, message, "sha256").hex()

    def hex_digest(self, prev_hex: bytes, *parts: bytes) -> bytes:
        """The hash, as ASCII hex bytes, of the record after ``prev_hex`` whose hashed bytes
        are ``parts`` joined."""
        message = unhexlify(prev_hex) + b"".join(parts)
        if self.key is None:
            return hexlify(hashlib.sha256(message).digest())
        return hexlify(hmac.digest(self.key, message, "sha256"))

    def seal(self, entry: Entry, seq: int, prev: str) -> tuple[Record, bytes]:
        """Seal ``entry`` as record ``seq`` after ``prev``; returns the record and its stored line.

        Raises:
            CodecError: the entry's data has no canonical form or the record is too large.
        """
        return self.place(prepare(entry), seq, prev)

    def place(self, parts: Prepared, seq: int, prev: str) -> tuple[Record, bytes]:
        """Seal an entry prepared by :func:`prepare` as record ``seq`` after ``prev``.

        Raises:
            CodecError: the record is too large.
        """
        entry, hashed_bytes, data_bytes, salts, kind_json, saga_json = parts
        ts = entry.ts
        # One formatting operation per byte string (the stored line and the hashed message
        # share the fields after ``data``): the bytes are those of the layout above.
        middle = b',"kind":%b,"prev":"%b","saga":%b' % (kind_json, prev.encode("ascii"), saga_json)
        end = f',"seq":{seq},"ts":{ts}{_VERSION_END}'.encode()
        message = b'%b{"data":%b%b%b' % (_fromhex(prev), hashed_bytes, middle, end)
        if self.key is None:
            digest = _sha256(message).hexdigest()
        else:
            digest = hmac.digest(self.key, message, "sha256").hex()
        if salts is None:
            line = b'{"data":%b,"hash":"%b"%b%b\n' % (data_bytes, digest.encode(), middle, end)
        else:
            line = b'{"data":%b,"hash":"%b"%b,"salts":"%b"%b\n' % (
                data_bytes, digest.encode(), middle, salts.encode(), end,
            )  # fmt: skip
        if len(line) > MAX_RECORD_BYTES:
            raise CodecError(f"record of {len(line) - 1} bytes exceeds {MAX_RECORD_BYTES}")
        fields = (seq, ts, entry.kind, entry.saga, entry.data, prev, digest, salts, RECORD_VERSION)
        return _tuple(Record, fields), line


class ChainBreak(NamedTuple):
    """Why a stored record does not fit its chain."""

    reason: str


class Masked(NamedTuple):
    """A record, in its chain position, with values masked after it was written: valid only if
    a later signed ``log.redaction`` record accounts for it (see :mod:`.redaction`).

    ``leaves`` are the indexes of its masked committed values (version 2: its hash still
    matches). Empty for a version 1 record masked in place, whose bytes no longer match its
    hash; its stored hash is ``hash`` (ASCII hex bytes).
    """

    seq: int
    hash: bytes
    record: Record | None = None
    leaves: tuple[int, ...] = ()


HASH_MISMATCH = "hash does not match the record's contents"
_MARKER = b'{"$redacted":'


@overload
def parse_line(
    chain: Chain,
    line: bytes,
    expect_seq: int,
    expect_prev: str,
    *,
    allow_masked: Literal[False] = False,
) -> Record | ChainBreak: ...
@overload
def parse_line(
    chain: Chain, line: bytes, expect_seq: int, expect_prev: str, *, allow_masked: bool
) -> Record | ChainBreak | Masked: ...


def parse_line(
    chain: Chain, line: bytes, expect_seq: int, expect_prev: str, *, allow_masked: bool = False
) -> Record | ChainBreak | Masked:
    """Check one stored line (without its ``\\n``) against the chain position it should occupy.

    Never raises: every defect is returned as a :class:`ChainBreak` naming it. With
    ``allow_masked``, a record masked after it was written comes back as :class:`Masked`;
    without, a version 2 record with masked values is returned as a :class:`Record` (its hash
    holds) and a version 1 record masked in place is a :class:`ChainBreak`.
    """
    if len(line) >= MAX_RECORD_BYTES:
        return ChainBreak(f"record longer than {MAX_RECORD_BYTES} bytes")
    # The fast C parser is enough here: the bytes must also equal the record's canonical
    # encoding (checked below), which a duplicate key, a NaN or any non-canonical spelling
    # cannot pass.
    try:
        text = line.decode("utf-8")
        obj, end = _scan(text, 0)
        if end != len(text):
            raise ValueError("trailing data")
    except Exception:  # json.loads says what is wrong, in its words
        try:
            obj = _loads(line)
        except (ValueError, RecursionError, MemoryError) as exc:
            return ChainBreak(f"not valid JSON: {str(exc)[:200]}")
    if not isinstance(obj, dict):
        return ChainBreak("not a JSON object")
    result = check_object(chain, obj, expect_seq, expect_prev, stored=line)
    if not allow_masked:
        return result
    if isinstance(result, Record):
        leaves = masked_leaves(result.salts)
        return Masked(expect_seq, result.hash.encode(), result, tuple(leaves)) if leaves else result
    if result.reason == HASH_MISMATCH and obj["v"] == 1 and _MARKER in line:
        data, kind, saga, ts = obj["data"], obj["kind"], obj["saga"], obj["ts"]
        record = Record(expect_seq, ts, kind, saga, data, expect_prev, obj["hash"], None, 1)
        return Masked(expect_seq, obj["hash"].encode(), record)
    return result


def check_object(
    chain: Chain,
    obj: dict[str, Any],
    expect_seq: int,
    expect_prev: str,
    stored: bytes | None = None,
) -> Record | ChainBreak:
    """Check a decoded record object; ``stored`` are its bytes when they must be canonical."""
    result = check_object_encoded(chain, obj, expect_seq, expect_prev, stored)
    return result if isinstance(result, ChainBreak) else result[0]


def check_object_encoded(
    chain: Chain,
    obj: dict[str, Any],
    expect_seq: int,
    expect_prev: str,
    stored: bytes | None = None,
) -> tuple[Record, bytes] | ChainBreak:
    """:func:`check_object`, returning the record with its ``data``'s canonical stored bytes
    (what a receiver keeps, without encoding the data a second time)."""
    if "v" not in obj:
        return ChainBreak(f"unexpected fields {sorted(obj.keys() ^ _KEYS)}")
    problem = _keys_problem(obj)
    if problem is not None:
        return ChainBreak(problem)
    seq, ts, kind, saga, data = obj["seq"], obj["ts"], obj["kind"], obj["saga"], obj["data"]
    prev, digest, version, salts = obj["prev"], obj["hash"], obj["v"], obj.get("salts")
    if type(version) is not int or version not in _VERSIONS:
        return ChainBreak(f"unsupported record version {version!r}")
    if type(seq) is not int or type(ts) is not int:
        return ChainBreak("seq and ts must be integers")
    if not isinstance(kind, str) or not (saga is None or isinstance(saga, str)):
        return ChainBreak("kind must be a string and saga a string or null")
    if not isinstance(data, dict):
        return ChainBreak("data must be an object")
    if not _is_hex64(digest):
        return ChainBreak("hash must be 64 lowercase hex digits")
    if seq != expect_seq:
        return ChainBreak(f"seq {seq} where {expect_seq} was expected")
    if prev != expect_prev:  # expect_prev is known-good hex, so this also checks the form
        return ChainBreak(f"prev does not match the hash of record {expect_seq - 1}")
    try:
        tail, stored_tail = _tails(kind, prev, saga, seq, ts, salts, version)
        if salts is not None:
            hashed_bytes, data_bytes = open_forms_fast(data, salts)
        elif version != 1 and any(key in data for key in COMMITTED):
            return ChainBreak("committed values without their salts")
        else:
            hashed_bytes = data_bytes = canonical(data)
    except CodecError as exc:
        return ChainBreak(str(exc))
    if stored is not None and _line(data_bytes, digest, stored_tail) != stored:
        return ChainBreak("bytes are not the canonical encoding of the record")
    if not hmac.compare_digest(chain.digest(prev, _body(hashed_bytes, tail)), digest):
        return ChainBreak(HASH_MISMATCH)
    return Record(seq, ts, kind, saga, data, prev, digest, salts, version), data_bytes


_TAIL = re.compile(
    rb',"kind":"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*","prev":"([0-9a-f]{64})",'
    rb'"saga":(?:null|"[^"\\\x00-\x1f]*(?:\\.[^"\\\x00-\x1f]*)*")(,"salts":"[A-Za-z0-9_.-]*")?,'
    rb'"seq":(0|[1-9][0-9]{0,18}),"ts":-?(?:0|[1-9][0-9]{0,18}),"v":([12])\}'
)
_HASH_FIELD = b',"hash":"'
_COMMITTED_KEYS = tuple(b'"' + key.encode() + b'":' for key in COMMITTED)


def check_line_fast(
    chain: Chain, line: bytes, expect_seq: int, expect_prev: bytes
) -> tuple[int, bytes] | ChainBreak | Masked:
    """Check a stored line's framing, chain position and hash, decoding ``data`` only when the
    record commits values in shapes :mod:`.lineforms` does not rebuild, or fails the check, or
    is among the process's first :data:`.lineforms.WARM_AFTER` committed lines (see
    :func:`.lineforms.hashed_data_when_warm`).

    ``expect_prev`` is the previous record's hash as ASCII hex bytes. A record that commits
    nothing is hashed as stored, and one that commits values is hashed in a form rebuilt from
    its bytes (:mod:`.lineforms`), so any change to its bytes is caught here without decoding;
    the fields after ``data`` must be in their canonical form. Reading a record
    (:func:`parse_line`) additionally checks that ``data`` is canonical JSON. Returns
    ``(seq, hash as ASCII hex bytes)``.
    """
    cut = line.rfind(_HASH_FIELD)  # the top-level field: inside strings quotes are escaped
    if cut < 9 or not line.startswith(b'{"data":{'):
        return ChainBreak("not a record")
    found = _TAIL.fullmatch(line, cut + 74)
    if found is None or line[cut + 73 : cut + 74] != b'"':
        return ChainBreak("record fields are not in canonical form")
    prev, salts, seq_digits, version = found.groups()
    seq = int(seq_digits)
    if seq != expect_seq:
        return ChainBreak(f"seq {seq} where {expect_seq} was expected")
    if prev != expect_prev:
        return ChainBreak(f"prev does not match the hash of record {expect_seq - 1}")
    stored = line[cut + 9 : cut + 73]
    if version == b"1":
        if salts is not None:
            return ChainBreak("unexpected fields ['salts'] in a version 1 record")
    elif salts is not None or any(key in line for key in _COMMITTED_KEYS):
        if salts is not None:  # the usual shapes: checked from the bytes (see .lineforms)
            start, stop = found.span(2)
            head = hashed_data_when_warm(line, cut, line[start + 10 : stop - 1])
            if head is not None:
                computed = chain.hex_digest(prev, head, line[cut + 74 : start], line[stop:])
                if computed == stored:
                    return seq, computed
        result = parse_line(chain, line, seq, expect_prev.decode(), allow_masked=True)
        if isinstance(result, Record):
            return seq, result.hash.encode()
        return result
    computed = chain.hex_digest(prev, line[:cut], line[cut + 74 :])
    if computed != stored:
        if version == b"1" and _MARKER in line:
            return Masked(seq, stored)
        return ChainBreak(HASH_MISMATCH)
    return seq, computed


def _is_hex64(value: object) -> bool:
    return type(value) is str and len(value) == 64 and _HEX64.fullmatch(value) is not None


__all__ = [
    "GENESIS",
    "HASH_MISMATCH",
    "Chain",
    "ChainBreak",
    "Masked",
    "check_line_fast",
    "check_object",
    "check_object_encoded",
    "parse_line",
    "stored_line",
]
