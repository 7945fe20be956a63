"""The body of ``POST /v1/origins/{origin}/records``, checked without a model per record.

The OpenAPI document describes the body as :class:`.models.IngestBody`; a batch holds up to
2,000 records and validating each through a pydantic model costs as much as checking its chain,
so the route takes the strictly parsed JSON (:func:`.strict.strict_json`) and this module
applies exactly the model's rules to it: the same fields, strict types (``true`` is not an
integer, ``"5"`` is not a number), the same bounds and patterns. A body that breaks one is a 400
naming the first wrong field, as any other body the API refuses.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import HTTPException

from .models import MAX_BATCH, MAX_INT, MAX_KIND, MAX_SAGA, MAX_SALTS, IngestBody

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SALTS = re.compile(r"[A-Za-z0-9_.-]*")
_REQUIRED = frozenset({"v", "seq", "ts", "kind", "saga", "data", "prev", "hash"})
_ALLOWED = _REQUIRED | {"salts"}


def request_body_doc() -> dict[str, Any]:
    """The ``requestBody`` of the route's OpenAPI operation (schemas in the components)."""
    ref = {"$ref": f"#/components/schemas/{IngestBody.__name__}"}
    return {"required": True, "content": {"application/json": {"schema": ref}}}


def ingest_schemas() -> dict[str, Any]:
    """The JSON schemas the route's body refers to, by name, for the document's components."""
    schema = IngestBody.model_json_schema(ref_template="#/components/schemas/{model}")
    found: dict[str, Any] = schema.pop("$defs", {})
    found[IngestBody.__name__] = schema
    return found


def records_of(body: Any) -> list[dict[str, Any]]:
    """The records of a parsed ingest body, every one checked against the model's rules.

    Raises:
        HTTPException: 400 naming the first field that breaks a rule (the value is not echoed).
    """
    if type(body) is not dict:
        raise _bad("", "a JSON object is required")
    if body.keys() != {"records"}:
        extra = sorted(body.keys() - {"records"})
        raise _bad(extra[0] if extra else "records", "unexpected" if extra else "required")
    records = body["records"]
    if type(records) is not list:
        raise _bad("records", "a list is required")
    if not 1 <= len(records) <= MAX_BATCH:
        raise _bad("records", f"a batch holds 1 to {MAX_BATCH} records")
    for at, record in enumerate(records):
        problem = _record_problem(record)
        if problem is not None:
            raise _bad(f"records.{at}.{problem[0]}" if problem[0] else f"records.{at}", problem[1])
    return records


def _record_problem(obj: Any) -> tuple[str, str] | None:
    """``(field, why)`` for the first rule ``obj`` breaks, or ``None``."""
    if type(obj) is not dict:
        return "", "a JSON object is required"
    keys = obj.keys()
    if keys not in (_REQUIRED, _ALLOWED):
        extra = sorted(keys - _ALLOWED)
        return (extra[0], "unexpected") if extra else (sorted(_REQUIRED - keys)[0], "required")
    v, seq, ts, kind, saga = obj["v"], obj["seq"], obj["ts"], obj["kind"], obj["saga"]
    if type(v) is not int or not 1 <= v <= 2:
        return "v", "an integer from 1 to 2 is required"
    if type(seq) is not int or not 1 <= seq <= MAX_INT:
        return "seq", f"an integer from 1 to {MAX_INT} is required"
    if type(ts) is not int or not -MAX_INT <= ts <= MAX_INT:
        return "ts", f"an integer of at most {MAX_INT} in size is required"
    if type(kind) is not str or len(kind) > MAX_KIND:
        return "kind", f"a string of at most {MAX_KIND} characters is required"
    if saga is not None and (type(saga) is not str or len(saga) > MAX_SAGA):
        return "saga", f"null or a string of at most {MAX_SAGA} characters is required"
    if type(obj["data"]) is not dict:
        return "data", "a JSON object is required"
    for name in ("prev", "hash"):
        value = obj[name]
        if type(value) is not str or len(value) != 64 or not _HEX64.fullmatch(value):
            return name, "64 lowercase hexadecimal digits are required"
    salts = obj.get("salts", "")
    if type(salts) is not str or len(salts) > MAX_SALTS or not _SALTS.fullmatch(salts):
        return "salts", "a string of base64url characters and dots is required"
    return None


def _bad(where: str, why: str) -> HTTPException:
    return HTTPException(400, f"invalid request: {where}: {why}" if where else why)


__all__ = ["ingest_schemas", "records_of", "request_body_doc"]
