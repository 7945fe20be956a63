"""The PostgreSQL store's statements and its crash model (what survives what, from settings)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .connection import durability_problems, lock_key
from .schema import PUT, SEAL_CALL

if TYPE_CHECKING:
    from psycopg.sql import Composed

PROCESS_CRASH = (
    "Every record whose append returned: it is committed on the server. The dead process's "
    "unfinished sagas are recovered by any host once its owner heartbeat expires."
)
POWER_LOSS = {
    True: "Every record acknowledged as durable (append with sync=True, or sync()) survives a "
    "power loss of the server: it flushed its WAL past the record. Records appended without "
    "sync since the last flush may be lost, and no later record survives without them. "
    "Assumes the server's fsync reaches stable storage.",
    False: "No record is sure to survive: the server runs with fsync or full_page_writes off, "
    "or its settings could not be read.",
}
DISK_LOSS = {
    True: "Every record acknowledged as durable: the server's synchronous standbys hold it too.",
    False: "Nothing, unless the server's storage is replicated: it has no synchronous standby, "
    "so the log is on its disk alone.",
}


def crash_model(settings: dict[str, str] | None) -> dict[str, str]:
    durable = settings is not None and not durability_problems(settings)
    standby = settings is not None and bool(settings["synchronous_standby_names"])
    return {
        "process_crash": PROCESS_CRASH,
        "power_loss": POWER_LOSS[durable],
        "disk_loss": DISK_LOSS[durable and standby],
    }


_FENCE_AND_LOCK = (
    "SELECT {s}.agent_saga_expect(EXISTS (SELECT 1 FROM {s}.owners WHERE owner_id = {o}"
    " AND expires_at > clock_timestamp() FOR KEY SHARE), 'owner fenced');"
    " SELECT pg_advisory_xact_lock({k})"
)


def queries(schema: str, owner_id: str, ttl: float = 0.0) -> dict[str, Composed]:
    """The store's statements on ``schema`` for ``owner_id`` (whose row lives ``ttl`` s a beat).

    ``open`` starts a batch: a transaction committed without waiting for the flush, the fence
    (fails with ``owner fenced`` unless this owner's row is alive, and share-locks it), then the
    log's advisory lock; ``open_durable`` is the same with a commit that waits for the flush
    (``synchronous_commit = on``, the session's setting). ``flush`` follows a batch's ``COMMIT``
    in the same message: it refreshes the owner row in a transaction of its own, committed
    synchronously. ``put`` and ``seal_call`` start calls of the server routines that fence,
    lock and write a batch in one statement (``schema``): the writer appends the batch's
    arguments (for ``seal_call``, first whether it is durable) and ``)``.
    """
    from psycopg import sql

    text = {
        "open": "BEGIN; SET LOCAL synchronous_commit = off; " + _FENCE_AND_LOCK,
        "open_durable": "BEGIN; " + _FENCE_AND_LOCK,
        "tail": "SELECT seq, hash FROM {s}.records ORDER BY seq DESC LIMIT 1",
        "insert": "INSERT INTO {s}.records (seq, hash, line, saga, kind) VALUES ",
        "flush": "; UPDATE {s}.owners"
        " SET expires_at = clock_timestamp() + make_interval(secs => {t})"
        " WHERE owner_id = {o} AND expires_at > clock_timestamp() RETURNING 1",
        "put": f"SELECT {{s}}.{PUT}({{o}}, {{k}}, ",
        "seal_call": f"CALL {{s}}.{SEAL_CALL}({{o}}, {{k}}, {{t}}, ",
        "rollback": "ROLLBACK",
        "last": "SELECT seq, hash, line FROM {s}.records ORDER BY seq DESC LIMIT 1",
        "page": "SELECT seq, hash, line FROM {s}.records WHERE seq > %s ORDER BY seq LIMIT %s",
        "saga": "SELECT seq, hash, line FROM {s}.records WHERE saga = %s ORDER BY seq",
        "open_sagas": "SELECT saga FROM {s}.open_sagas ORDER BY seq",
        "unindexed": "SELECT seq, line FROM {s}.records WHERE kind IS NULL ORDER BY seq LIMIT %s",
        "saga_probe": "SELECT 1 FROM {s}.records WHERE saga = %s LIMIT 1",
        "saga_prefix": "SELECT saga FROM {s}.records WHERE saga IS NOT NULL"
        " AND replace(lower(saga), '-', '') LIKE %s GROUP BY saga ORDER BY min(seq) LIMIT %s",
        "saga_count": "SELECT count(DISTINCT saga) FROM {s}.records",
    }
    names = {
        "s": sql.Identifier(schema),
        "o": sql.Literal(owner_id),
        "k": sql.Literal(lock_key(schema, "append")),
        "t": sql.Literal(ttl),
    }
    return {name: sql.SQL(q).format(**names) for name, q in text.items()}
