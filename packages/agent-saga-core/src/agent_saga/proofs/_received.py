"""Records received from elsewhere (a control plane's ingest), checked against their chain.

A receiver that keeps a copy of a log checks each arriving record with the same code that
verifies the log itself: exactly a record's fields, canonical values, ``seq`` and ``prev``
continuing the copy, and the hash recomputed from the content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import AgentSagaError
from .._log.chain import Chain, ChainBreak, check_object, check_object_encoded
from .._log.records import Record

__all__ = ["ChainError", "check_record", "check_records"]


class ChainError(AgentSagaError, ValueError):
    """A received record does not continue its chain; the message names the defect."""


def check_record(
    obj: Mapping[str, Any], *, seq: int, prev: str, key: bytes | None = None
) -> Record:
    """Check the decoded record ``obj`` (``hash`` included) as record ``seq`` after ``prev``.

    ``key`` is the chain key of a keyed (HMAC) chain. Never mutates ``obj``.

    Raises:
        ChainError: other fields than a record's, wrong types, a value with no canonical form,
            another ``seq`` or ``prev``, or a hash that does not match the content.
    """
    result = check_object(Chain(key), dict(obj), seq, prev)
    if isinstance(result, ChainBreak):
        raise ChainError(f"record {seq}: {result.reason}")
    return result


def check_records(
    objs: Sequence[Mapping[str, Any]], *, seq: int, prev: str, key: bytes | None = None
) -> list[tuple[Record, bytes]]:
    """Check consecutive decoded records as records ``seq``, ``seq + 1``, ... after ``prev``.

    The same checks as :func:`check_record` on each, in one pass: each record comes back with
    the canonical bytes of its ``data`` as a log stores them (so a receiver keeping the records
    need not encode them again). Never mutates ``objs``.

    Raises:
        ChainError: the first record that does not continue the chain (the message names its
            ``seq`` and the defect); nothing is returned then.
    """
    chain = Chain(key)
    checked: list[tuple[Record, bytes]] = []
    for at, obj in enumerate(objs, seq):
        result = check_object_encoded(chain, dict(obj), at, prev)
        if isinstance(result, ChainBreak):
            raise ChainError(f"record {at}: {result.reason}")
        checked.append(result)
        prev = result[0].hash
    return checked
