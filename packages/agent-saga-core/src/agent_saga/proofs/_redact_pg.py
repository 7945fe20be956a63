"""Masking values stored in a PostgreSQL log (fleet mode), with the file log's guarantees.

One transaction: it takes the log's append lock (writers on every host wait for it), reads and
verifies every row, rewrites the ``line`` of each masked record (its ``hash`` column and chain
hash do not change: see :mod:`agent_saga._log.commit`) and appends the administrator's signed
``log.redaction`` record as the new tail, stored with its ``kind`` like every writer's row (a
row without one makes the next saga read fill it in and rebuild ``open_sagas``). Agents may
keep running: a masked record keeps its place and hash, so their followers and checkpoints are
undisturbed.

Only version 2 records can be masked here: a version 1 record masked in place no longer
matches its hash, which the PostgreSQL reader never accepts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._errors import LogError, StoreFailedError
from .._log.chain import Chain
from .._log.codec import JSONValue
from .._log.records import Entry, Record
from .._log.redaction import REDACTION_KIND
from .._postgres.connection import (
    DEFAULT_SCHEMA,
    check_schema_name,
    display_url,
    lock_key,
    require_psycopg,
)
from .._postgres.read import checked_records, paged_rows
from ._admin import AdminSigner
from ._masking import mask_record, parse_masked_path, signed_statement
from ._redact import RedactionReport

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["redact_postgres"]


def redact_postgres(
    url: str,
    path: str,
    *,
    admin_key: str | os.PathLike[str] | Ed25519PrivateKey,
    seqs: Iterable[int] | None = None,
    key: bytes | None = None,
    reason: str = "",
    schema: str | None = None,
) -> RedactionReport:
    """:func:`agent_saga.redact_path` for the PostgreSQL log at ``url`` (in ``schema``, by
    default the fleet's ``agent_saga``).

    Raises:
        ConfigurationError: psycopg is missing, or the administrator key cannot be loaded or
            is not trusted.
        LogError: the path is invalid, or it matches a version 1 record.
        CorruptLogError: the log does not verify before the change (nothing is changed).
        StoreFailedError: the server cannot be reached, or the transaction failed (nothing
            is changed).
    """
    require_psycopg()
    import psycopg
    from psycopg import sql

    parts = parse_masked_path(path)
    schema = check_schema_name(schema or DEFAULT_SCHEMA)
    signer = AdminSigner.load(admin_key)
    signer.require_trusted()
    wanted = None if seqs is None else set(seqs)
    chain, where = Chain(key), f"{display_url(url)} schema {schema}"
    table = sql.Identifier(schema, "records")
    page = sql.SQL("SELECT seq, hash, line FROM {} WHERE seq > %s ORDER BY seq LIMIT %s")
    try:
        with psycopg.connect(url, connect_timeout=10) as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(schema, "append"),))

            def query(statement: Any, params: tuple[int, int]) -> list[tuple[Any, ...]]:
                return conn.execute(statement, params).fetchall()

            updates: list[tuple[bytes, int]] = []
            entries: list[dict[str, JSONValue]] = []
            masked: dict[int, list[str]] = {}
            last: Record | None = None
            rows = paged_rows(query, page.format(table))
            for record in checked_records(rows, chain, where):
                last = record
                if wanted is not None and record.seq not in wanted:
                    continue
                done = mask_record(record, parts)
                if done is not None and record.v == 1:
                    raise LogError(
                        f"record {record.seq} was written by an older version: its values can "
                        "be masked only in a file log"
                    )
                if done is not None:
                    updates.append((done[0], record.seq))
                    entries.append(done[1])
                    paths = done[1]["paths"]
                    masked[record.seq] = [str(p) for p in paths] if isinstance(paths, list) else []
            if not masked or last is None:
                return RedactionReport({}, None)
            statement = signed_statement(
                signer, last.seq + 1, last.hash, entries, path=path, reason=reason
            )
            entry = Entry(REDACTION_KIND, None, statement, int(time.time() * 1000))
            sealed, line = chain.seal(entry, last.seq + 1, last.hash)
            with conn.cursor() as cursor:
                cursor.executemany(
                    sql.SQL("UPDATE {} SET line = %s WHERE seq = %s").format(table), updates
                )
                insert = (
                    "INSERT INTO {} (seq, hash, line, saga, kind) VALUES (%s, %s, %s, NULL, %s)"
                )
                cursor.execute(
                    sql.SQL(insert).format(table),
                    (sealed.seq, sealed.hash, line[:-1], REDACTION_KIND),
                )
    except psycopg.Error as exc:
        raise StoreFailedError(f"{where}: redaction not applied: {exc}") from exc
    return RedactionReport(masked, sealed.seq)
