"""Fields of a record's ``data`` read defensively: a value of the wrong type reads as absent,
never as an error (the history shows what a log says, whoever wrote it)."""

from __future__ import annotations

from collections.abc import Mapping

from .._log.codec import JSONValue
from .._log.records import Kind, Record
from .views import ErrorInfo


def str_field(data: Mapping[str, JSONValue], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def int_field(data: Mapping[str, JSONValue], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_info(value: JSONValue) -> ErrorInfo | None:
    if not isinstance(value, dict):
        return None
    kind, message = value.get("type"), value.get("message")
    return ErrorInfo(
        kind if isinstance(kind, str) else "?", message if isinstance(message, str) else ""
    )


def compensation_of(value: JSONValue) -> tuple[str | None, bool | None]:
    if not isinstance(value, dict):
        return None, None
    recoverable = value.get("recoverable")
    flag = recoverable if isinstance(recoverable, bool) else None
    name, func = value.get("name"), value.get("callable")
    if isinstance(name, str):
        return name, flag
    if isinstance(func, str):
        return f"callable {func}", flag
    return None, flag


def settlement(record: Record) -> tuple[str, str] | None:
    """The saga a ``saga.settled`` record settles and the note a view shows (``by: note``);
    ``None`` for any other record, or one that names no saga."""
    if record.saga is not None or record.kind != Kind.SETTLED:
        return None
    target, by, note = (str_field(record.data, key) for key in ("saga", "by", "note"))
    return None if target is None else (target, f"{by or '?'}: {note or ''}")


__all__ = ["compensation_of", "error_info", "int_field", "settlement", "str_field"]
