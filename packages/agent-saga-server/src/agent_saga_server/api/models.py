"""Request and response bodies of the REST API (what the OpenAPI document describes).

Request bodies are strict (no coercion: ``"seq": false`` or ``"5"`` is not an integer) and
forbid unknown fields. Names of origins, subjects and budgets are plain identifiers; amounts are
decimal strings, so no amount goes through a binary float.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from .strict import StrictModel

MAX_INT = 2**53 - 1
"""The largest integer the API takes: every JSON parser holds it exactly (a double's range)."""
MAX_BATCH, MAX_KIND, MAX_SAGA, MAX_SALTS = 2000, 200, 500, 4 * 1024 * 1024
"""An ingest batch's most records, and a record's longest ``kind``, ``saga`` and ``salts``."""
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Amount = Annotated[str, Field(pattern=r"^[0-9]{1,30}(\.[0-9]{1,18})?$")]
Text = Annotated[str, Field(max_length=2000)]
ScopeName = Literal["agent", "approver", "admin", "auditor"]


class Problem(BaseModel):
    detail: str


class Health(BaseModel):
    status: Literal["ok"]


class Ready(BaseModel):
    ready: bool
    database: str
    halted: bool | None


class WhoAmI(BaseModel):
    token_id: str
    scope: ScopeName
    subject: str
    origin: str | None


class TokenCreate(StrictModel):
    scope: ScopeName
    subject: Name
    origin: Name | None = None
    expires_in: Annotated[int, Field(ge=1, le=10 * 365 * 86400)] | None = None


class TokenOut(BaseModel):
    id: str
    scope: ScopeName
    subject: str
    origin: str | None
    created_at: float
    expires_at: float | None
    revoked_at: float | None


class TokenCreated(TokenOut):
    token: str


class EnrolmentCreate(StrictModel):
    subject: Name
    expires_in: Annotated[int, Field(ge=60, le=7 * 86400)] = 900
    """Seconds the code is valid (15 minutes unless given)."""


class EnrolmentCreated(BaseModel):
    code: str
    """``ase_<id>_<secret>``: in this answer only (the server keeps a hash)."""
    id: str
    subject: str
    expires_at: float


class PasskeyOut(BaseModel):
    credential_id: str
    subject: str
    created_at: float
    sign_count: int


class PasskeyList(BaseModel):
    passkeys: list[PasskeyOut]


class TokenList(BaseModel):
    tokens: list[TokenOut]


class RecordIn(StrictModel):
    """A log record as the agent's log holds it (``salts`` only on a version 2 record that
    commits values)."""

    v: Annotated[int, Field(ge=1, le=2)]
    seq: Annotated[int, Field(ge=1, le=MAX_INT)]
    ts: Annotated[int, Field(ge=-MAX_INT, le=MAX_INT)]
    kind: Annotated[str, Field(max_length=MAX_KIND)]
    saga: Annotated[str, Field(max_length=MAX_SAGA)] | None
    data: dict[str, Any]
    prev: Hex64
    hash: Hex64
    salts: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]*$", max_length=MAX_SALTS)] = ""
    """Absent on a record without committed values (an empty string is not a record's)."""


class IngestBody(StrictModel):
    """Checked by :mod:`.ingest_body` (the same rules, without a model per record)."""

    records: Annotated[list[RecordIn], Field(min_length=1, max_length=MAX_BATCH)]


class IngestOut(BaseModel):
    accepted: int
    duplicates: int
    last_seq: int
    last_hash: str


class OriginOut(BaseModel):
    origin: str
    last_seq: int
    last_hash: str
    checkpoint_size: int
    checkpoint: str | None
    verifier: str | None


class OriginList(BaseModel):
    origins: list[OriginOut]


class CheckpointIn(StrictModel):
    note: Annotated[str, Field(min_length=1, max_length=64 * 1024)]
    proof: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=64)]
    verifier: Annotated[str, Field(max_length=1000)] | None = None


class CheckpointOut(BaseModel):
    origin: str
    size: int
    root: str
    note: str
    received_at: float


class CheckpointList(BaseModel):
    checkpoints: list[CheckpointOut]


class SagaSummaryOut(BaseModel):
    origin: str
    saga: str
    name: str
    status: str
    started: int
    ended: int | None
    tools: list[str]


class SagaPage(BaseModel):
    sagas: list[SagaSummaryOut]
    next: str | None


class VoteOut(BaseModel):
    approver: str
    decision: str
    note: str
    at: float
    passkey: dict[str, Any] | None = None
    """A passkey vote's proof: the WebAuthn assertion, its challenge's inputs (``challenge``)
    and the approver's registered key (``key``), for the agent's log."""


class ApprovalOut(BaseModel):
    id: str
    origin: str
    saga: str
    ordinal: int
    tool: str
    semantics: str
    digest: str
    args: Any
    rule: str
    reason: str
    approvers: list[str]
    quorum: int
    requested_at: float
    expires_at: float
    status: Literal["pending", "approved", "denied", "expired"]
    decided_at: float | None
    outcome: str | None
    votes: list[VoteOut]


class SagaDetail(BaseModel):
    origin: str
    saga: dict[str, Any]
    """The core's view of the saga (``agent_saga.SagaView``): steps, rollbacks, status."""
    approvals: list[ApprovalOut]


class ApprovalList(BaseModel):
    approvals: list[ApprovalOut]
    next: str | None


class ApprovalCreate(StrictModel):
    id: Annotated[str, Field(pattern=r"^apr-[0-9a-f]{16}$")]
    saga: Annotated[str, Field(min_length=1, max_length=500)]
    ordinal: Annotated[int, Field(ge=0, le=MAX_INT)]
    tool: Annotated[str, Field(min_length=1, max_length=500)]
    semantics: Literal["reversible", "compensable", "irreversible"]
    digest: Hex64
    args: Any
    rule: Text
    reason: Text
    approvers: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=200)]],
        Field(min_length=1, max_length=100),
    ]
    quorum: Annotated[int, Field(ge=1, le=100)]
    expires_at: Annotated[float, Field(ge=0, le=1e11)]


class VoteIn(StrictModel):
    decision: Literal["approve", "deny"]
    note: Text = ""


class ApproverList(BaseModel):
    approvers: list[str]


class ReserveIn(StrictModel):
    hold_id: Annotated[str, Field(pattern=r"^[0-9a-f]{24}$")]
    account: Annotated[str, Field(min_length=1, max_length=300)]
    amount: Amount
    limit: Amount
    saga: Annotated[str, Field(min_length=1, max_length=500)]
    ordinal: Annotated[int, Field(ge=0, le=MAX_INT)]
    keep_spent: bool
    until: Annotated[float, Field(ge=0, le=1e11)] | None = None


class ReserveOut(BaseModel):
    hold_id: str | None
    spent: str
    held: str
    cap: str


class SettleIn(StrictModel):
    commit: bool


class SettleOut(BaseModel):
    settled: bool


class UsageOut(BaseModel):
    budget: str
    account: str
    spent: str
    held: str


class HoldOut(BaseModel):
    hold_id: str
    account: str
    amount: str
    origin: str
    saga: str
    ordinal: int


class HoldList(BaseModel):
    holds: list[HoldOut]


class CapIn(StrictModel):
    cap: Amount | None


class BudgetOut(BaseModel):
    name: str
    cap: str | None
    spent: str
    held: str


class BudgetList(BaseModel):
    budgets: list[BudgetOut]


class ReasonIn(StrictModel):
    reason: Annotated[str, Field(min_length=1, max_length=2000)]


class SwitchOut(BaseModel):
    halted: bool
    reason: str
    since: float | None
    version: int
    readable: bool = True
    at: float


class AuditEventOut(BaseModel):
    id: str
    at: float
    actor: str
    scope: str
    action: str
    details: dict[str, Any]


class AuditList(BaseModel):
    events: list[AuditEventOut]
    next: str | None


class ConflictOut(BaseModel):
    id: str
    origin: str
    seq: int | None
    what: str
    reason: str
    received_at: float
    body: Any


class ConflictList(BaseModel):
    conflicts: list[ConflictOut]
    next: str | None


class CertifyOut(BaseModel):
    origin: str
    ok: bool
    records: int
    checkpoint: str | None
    counts: dict[str, int]
    findings: list[dict[str, Any]]


__all__ = [name for name in dir() if name[0].isupper()]
