"""Canonical JSON: the one byte encoding that records are hashed and stored in.

Canonical means sorted keys, no insignificant whitespace, UTF-8 (not ``\\u`` escapes), no NaN or
infinities, integers written exactly. Decoding is strict: duplicate keys, NaN/Infinity literals,
over-deep nesting and over-long input are rejected with :class:`CodecError` rather than crashing
or silently choosing a value.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import threading
from collections.abc import Mapping
from typing import Any

JSONValue = None | bool | int | float | str | list["JSONValue"] | dict[str, "JSONValue"]

MAX_DEPTH = 64
"""Nesting depth beyond which values are not stored as-is (deep values are summarised)."""

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_THREAD = threading.local()


def _c_encoder() -> tuple[Any, dict[int, Any]] | None:
    """This thread's C encoder for ``_ENCODER`` and the dict it tracks open containers in (a
    cycle raises ``ValueError``, as with ``_ENCODER``). ``encode`` builds a new one on every
    call, which is most of its cost. ``None`` where the C accelerator is missing or does not
    produce exactly ``_ENCODER``'s output."""
    if _MAKE_ENCODER is None or getattr(_THREAD, "plain", False):
        return None
    markers: dict[int, Any] = {}
    try:
        encoder = _MAKE_ENCODER(
            markers, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
            True, False, False,
        )  # fmt: skip
        sample = {"b": [1.5, -0.0, 10**20, "\u00e9\n"], "a": {"z": None, "y": True}}
        if "".join(encoder(sample, 0)) != _ENCODER.encode(sample):
            raise ValueError("different output")
    except Exception:  # another interpreter's signature or output: use the plain encoder
        _THREAD.plain = True
        return None
    pair = (encoder, markers)
    _THREAD.encoder = pair
    return pair


class CodecError(ValueError):
    """Bytes that are not a canonical JSON value, or a value that has no canonical form."""


def canonical(value: Any) -> bytes:
    """Encode a JSON value canonically.

    Raises:
        CodecError: the value holds NaN/infinity, a non-string key, an unencodable string or a
            type JSON has no form for.
    """
    pair = getattr(_THREAD, "encoder", None) or _c_encoder()
    try:
        if pair is None:
            return _ENCODER.encode(value).encode("utf-8")
        try:
            return "".join(pair[0](value, 0)).encode("utf-8")
        except BaseException:
            pair[1].clear()  # an error part-way through leaves containers marked open
            raise
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError) as exc:
        raise CodecError(f"no canonical JSON form: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise CodecError(f"non-finite number {name} is not allowed")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CodecError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs, parse_constant=_reject_constant)


def decode(data: bytes | str, *, max_bytes: int | None = None) -> Any:
    """Decode strict JSON.

    Raises:
        CodecError: anything that is not a single, valid, duplicate-free JSON value within the
            size and depth limits; never another exception type.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise CodecError(f"{len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        return _DECODER.decode(text)
    except CodecError:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:
        raise CodecError(str(exc)[:200]) from None


def to_jsonable(value: Any, _depth: int = 0) -> JSONValue:
    """Convert a tool argument or result into a JSON value that has a canonical form.

    Dicts, lists, tuples, sets, dataclasses, enums and objects with ``model_dump`` (pydantic) are
    converted structurally. Anything else, and anything that cannot be encoded exactly (NaN, a
    string with lone surrogates, a non-string key, nesting deeper than :data:`MAX_DEPTH`),
    becomes ``{"$repr": "...", "$type": "..."}`` so the record is still written; such a value is
    marked as not restorable (see :func:`is_restorable`).
    """
    kind = type(value)
    if kind is int or kind is bool or value is None:  # the common results: no checks to make
        scalar: JSONValue = value
        return scalar
    if kind is dict and is_flat(value):
        return dict(value)
    if value is None or isinstance(value, bool | int | str):
        if isinstance(value, str) and not _encodable(value):
            return _opaque(value)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _opaque(value)
    if _depth >= MAX_DEPTH:
        return _opaque(value)
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, _depth + 1)
    if isinstance(value, Mapping):
        out: dict[str, JSONValue] = {}
        for key, item in value.items():
            if not isinstance(key, str) or not _encodable(key):
                return _opaque(value)
            out[key] = to_jsonable(item, _depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [to_jsonable(item, _depth + 1) for item in items]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), _depth + 1)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return to_jsonable(dump(mode="json"), _depth + 1)
        except Exception:  # a model_dump that fails is summarised, never fatal
            return _opaque(value)
    return _opaque(value)


_SCALARS = frozenset({str, int, bool, type(None)})


def is_flat(value: dict[Any, Any]) -> bool:
    """A dict of str keys and plain scalars (the common case) needs no conversion."""
    for key, item in value.items():
        if type(key) is not str or not (key.isascii() or _encodable(key)):
            return False
        kind = type(item)
        if kind not in _SCALARS:
            if kind is float and math.isfinite(item):
                continue
            return False
        if kind is str and not item.isascii() and not _encodable(item):
            return False
    return True


_CONTAINERS = (dict, list, tuple, set, bytearray)


def snapshot(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """A copy of ``value``'s built-in containers (dict, list, tuple, set, bytearray), so that
    nobody holding the original can change what the copy holds; other objects are shared.

    Cycles and shared sub-containers are copied once (like :func:`copy.deepcopy`). Subclasses
    of the containers are copied as their base type only when they are exactly that type;
    instances of other classes (clients, sessions) are never copied.
    """
    kind = type(value)
    if kind not in _CONTAINERS:
        return value
    if memo is None:
        memo = {}
    seen = memo.get(id(value))
    if seen is not None:
        return seen
    if kind is dict:
        copied: Any = {}
        memo[id(value)] = copied
        for key, item in value.items():
            copied[key] = snapshot(item, memo)
        return copied
    if kind is list:
        copied = []
        memo[id(value)] = copied
        copied.extend(snapshot(item, memo) for item in value)
        return copied
    if kind is bytearray:
        copied = bytearray(value)
    elif kind is tuple:
        copied = tuple(snapshot(item, memo) for item in value)
    else:
        copied = {snapshot(item, memo) for item in value}
    memo[id(value)] = copied
    return copied


def is_restorable(value: JSONValue) -> bool:
    """True when ``value`` holds no ``$repr`` placeholder (it can go back to a compensator)."""
    if isinstance(value, dict):
        return "$repr" not in value and all(is_restorable(v) for v in value.values())
    if isinstance(value, list):
        return all(is_restorable(v) for v in value)
    return True


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _opaque(value: Any) -> dict[str, JSONValue]:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not stop the log
        text = f"<unrepresentable {type(value).__name__}>"
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"$repr": text[:2000], "$type": type(value).__qualname__}
