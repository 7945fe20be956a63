"""Log records: what the write-ahead log stores, the record kinds the engine writes, and the
tool semantics that decide how durable a step's records must be.

A record is sealed by a store when it is appended: the store assigns the global ``seq`` and the
``prev`` hash of the record before it, then computes ``hash = H(prev || hashed form)`` where
``H`` is SHA-256 (or HMAC-SHA-256 when the chain is keyed). The hashed form is the record's
canonical JSON without ``hash`` (and ``salts``) in which every value that may be masked later is
replaced by its salted commitment (record version 2, see :mod:`agent_saga._log.commit`);
version 1 records (written before) hash their canonical JSON as it is stored.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

from .codec import JSONValue

RECORD_VERSION = 2
"""The version new records are written with; version 1 records still read and verify."""
GENESIS = "0" * 64
"""The ``prev`` of the first record."""
IN_SAGA = "in_saga"
"""The data field of a saga's own record that states how many records of that saga precede
it (written since this version; absent from older records). Covered by the record's hash, it
lets a reader of one saga through the saga index tell that a record in the middle is missing
(see :meth:`agent_saga._log.sagaindex.SagaIndex.saga_records`)."""


class Semantics(enum.StrEnum):
    """What undoing a tool's effect takes. Declared explicitly; never guessed from a name.

    * ``REVERSIBLE``: undo is local and cheap (or there is nothing to undo, like a read). Its
      records may take the fast path: buffered, made durable at the next durable point.
    * ``COMPENSABLE``: an external effect with a compensating action. The intent, with the named
      compensation, is durable before the effect runs.
    * ``IRREVERSIBLE``: cannot be undone; needs an approval, and is refused when no approval
      channel is configured.
    """

    REVERSIBLE = "reversible"
    COMPENSABLE = "compensable"
    IRREVERSIBLE = "irreversible"

    @property
    def durable_intent(self) -> bool:
        """Whether the step's intent must be on stable storage before the effect runs."""
        return self is not Semantics.REVERSIBLE


class Kind(enum.StrEnum):
    """Record kinds written by the engine."""

    SAGA_BEGIN = "saga.begin"
    SAGA_END = "saga.end"
    SAGA_SUSPENDED = "saga.suspended"
    """The saga's transaction left it open, to be resumed by id (``kit.transaction(resume=)``)."""
    SAGA_RESUMED = "saga.resumed"
    """A new owner continues a suspended saga."""
    GATE_REFUSED = "gate.refused"
    STEP_INTENT = "step.intent"
    STEP_DONE = "step.done"
    STEP_FAILED = "step.failed"
    ROLLBACK_BEGIN = "rollback.begin"
    COMP_INTENT = "compensation.intent"
    COMP_DONE = "compensation.done"
    COMP_FAILED = "compensation.failed"
    SAVEPOINT_BEGIN = "savepoint.begin"
    SAVEPOINT_ROLLBACK = "savepoint.rollback"
    RECOVERY_BEGIN = "recovery.begin"
    RECOVERY_ESCALATED = "recovery.escalated"
    STEP_PROBED = "step.probed"
    SETTLED = "saga.settled"
    """A human marked a ``needs_human`` saga as handled (a record of no saga: ``data.saga``)."""
    HALT = "control.halt"
    RESUME = "control.resume"
    GATE_VOTE = "gate.vote"
    """One validator's vote on a call (consensus rules)."""
    HOLD_UNSETTLED = "gate.hold_unsettled"
    """A reservation (budget) could not be committed or released; it stays counted."""
    SELFHEAL_ATTEMPT = "selfheal.attempt"
    SELFHEAL_ESCALATED = "selfheal.escalated"
    APPROVAL_REQUESTED = "approval.requested"
    """A step waits for humans (see :mod:`agent_saga._approvals.request`)."""
    APPROVAL_VOTE = "approval.vote"
    APPROVAL_REFUSED = "approval.refused"
    APPROVAL_DECIDED = "approval.decided"
    KEY_ADDED = "approver.key_added"
    KEY_REVOKED = "approver.key_revoked"
    KEY_REFUSED = "approver.key_refused"
    """An attempt to register or revoke an approver key without the authority to."""
    REDACTION = "log.redaction"
    """Records masked after they were written (see :mod:`agent_saga._log.redaction`)."""
    SPECULATION_ISSUED = "speculation.issued"
    """A REVERSIBLE step ran ahead of confirmation under a lease (see ``_engine.speculation``)."""
    SPECULATION_REDEEMED = "speculation.redeemed"
    SPECULATION_REFUSED = "speculation.refused"
    SPECULATION_DISCARDED = "speculation.discarded"
    MESH_SEEN = "mesh.seen"
    """What a device had seen of the other origins of its mesh when it synced (``proofs._mesh``)."""


class SagaStatus(enum.StrEnum):
    """Where a saga stands, as derived from its records."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    """Left open on purpose by its transaction (no owner) until it is resumed or expires."""
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    NEEDS_HUMAN = "needs_human"


class Entry(NamedTuple):
    """A record before it is sealed into the chain."""

    kind: str
    saga: str | None
    data: dict[str, JSONValue]
    ts: int
    """Milliseconds since the epoch."""


class Record(NamedTuple):
    """A sealed, chained log record."""

    seq: int
    ts: int
    kind: str
    saga: str | None
    data: dict[str, JSONValue]
    prev: str
    hash: str
    salts: str | None = None
    """The salts of its committed values (version 2 records that commit any), in leaf order."""
    v: int = RECORD_VERSION

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object, ``hash`` included (and ``salts`` when it has some)."""
        out: dict[str, Any] = {
            "v": self.v,
            "seq": self.seq,
            "ts": self.ts,
            "kind": self.kind,
            "saga": self.saga,
            "data": self.data,
            "prev": self.prev,
            "hash": self.hash,
        }
        if self.salts is not None:
            out["salts"] = self.salts
        return out
