"""The control plane's tables, the same for SQLite and PostgreSQL.

Amounts are decimal strings (exact sums in Python under a row lock); times are seconds since the
epoch as floating point; record timestamps are the agents' milliseconds. Identifiers that order
(audit events, conflicts) start with a zero-padded nanosecond time so both databases sort them
alike without sequences.

``known_tools`` holds every tool name ingest has seen (one row a name, kept with
``saga_tools``), so the designer asks a small table for them rather than the whole history; a
database made before it existed fills it once from ``saga_tools`` while it is empty.
"""

from __future__ import annotations

POSTGRES_LOCK_ID = 7_172_017
"""Advisory lock taken while creating tables, so replicas starting together do not race."""

_TABLES = """
CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY, digest TEXT NOT NULL, scope TEXT NOT NULL, subject TEXT NOT NULL,
    origin TEXT, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION,
    revoked_at DOUBLE PRECISION, created_by TEXT
);
CREATE TABLE IF NOT EXISTS origins (
    origin TEXT PRIMARY KEY, last_seq BIGINT NOT NULL, last_hash TEXT NOT NULL,
    keyed INTEGER NOT NULL, checkpoint_size BIGINT NOT NULL, checkpoint_root TEXT,
    checkpoint_note TEXT, verifier TEXT, updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS records (
    origin TEXT NOT NULL, seq BIGINT NOT NULL, ts BIGINT NOT NULL, kind TEXT NOT NULL,
    saga TEXT, hash TEXT NOT NULL, prev TEXT NOT NULL, data TEXT NOT NULL,
    v INTEGER NOT NULL, salts TEXT, PRIMARY KEY (origin, seq)
);
CREATE INDEX IF NOT EXISTS records_by_saga ON records (origin, saga, seq);
CREATE INDEX IF NOT EXISTS records_of_the_log ON records (origin, kind, seq) WHERE saga IS NULL;
CREATE TABLE IF NOT EXISTS conflicts (
    id TEXT PRIMARY KEY, origin TEXT NOT NULL, seq BIGINT, what TEXT NOT NULL,
    reason TEXT NOT NULL, body TEXT NOT NULL, received_at DOUBLE PRECISION NOT NULL,
    token_id TEXT
);
CREATE TABLE IF NOT EXISTS checkpoints (
    origin TEXT NOT NULL, size BIGINT NOT NULL, root TEXT NOT NULL, note TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (origin, size)
);
CREATE TABLE IF NOT EXISTS sagas (
    origin TEXT NOT NULL, saga TEXT NOT NULL, name TEXT NOT NULL, status TEXT NOT NULL,
    started BIGINT NOT NULL, ended BIGINT, first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
    PRIMARY KEY (origin, saga)
);
CREATE INDEX IF NOT EXISTS sagas_by_start ON sagas (started, origin, saga);
CREATE TABLE IF NOT EXISTS saga_tools (
    origin TEXT NOT NULL, saga TEXT NOT NULL, tool TEXT NOT NULL,
    PRIMARY KEY (origin, saga, tool)
);
CREATE INDEX IF NOT EXISTS saga_tools_by_tool ON saga_tools (tool);
CREATE TABLE IF NOT EXISTS known_tools (tool TEXT PRIMARY KEY);
INSERT INTO known_tools (tool) SELECT DISTINCT tool FROM saga_tools
    WHERE NOT EXISTS (SELECT 1 FROM known_tools) ON CONFLICT (tool) DO NOTHING;
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY, origin TEXT NOT NULL, saga TEXT NOT NULL, ordinal BIGINT NOT NULL,
    tool TEXT NOT NULL, semantics TEXT NOT NULL, digest TEXT NOT NULL, args TEXT NOT NULL,
    rule TEXT NOT NULL, reason TEXT NOT NULL, approvers TEXT NOT NULL, quorum BIGINT NOT NULL,
    requested_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL, decided_at DOUBLE PRECISION, outcome TEXT
);
CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals (status, requested_at);
CREATE TABLE IF NOT EXISTS approval_votes (
    request TEXT NOT NULL, approver TEXT NOT NULL, decision TEXT NOT NULL, note TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, token_id TEXT NOT NULL, PRIMARY KEY (request, approver)
);
CREATE TABLE IF NOT EXISTS approval_vote_proofs (
    request TEXT NOT NULL, approver TEXT NOT NULL, passkey TEXT NOT NULL,
    PRIMARY KEY (request, approver)
);
CREATE TABLE IF NOT EXISTS budgets (
    name TEXT PRIMARY KEY, cap TEXT, updated_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS budget_accounts (
    budget TEXT NOT NULL, account TEXT NOT NULL, spent TEXT NOT NULL, until DOUBLE PRECISION,
    PRIMARY KEY (budget, account)
);
CREATE TABLE IF NOT EXISTS budget_holds (
    hold_id TEXT PRIMARY KEY, budget TEXT NOT NULL, account TEXT NOT NULL, amount TEXT NOT NULL,
    origin TEXT NOT NULL, saga TEXT NOT NULL, ordinal BIGINT NOT NULL, keep INTEGER NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS budget_holds_by_account ON budget_holds (budget, account);
CREATE TABLE IF NOT EXISTS kill_switch (
    id INTEGER PRIMARY KEY, halted INTEGER NOT NULL, reason TEXT NOT NULL,
    since DOUBLE PRECISION, version BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, actor TEXT NOT NULL, scope TEXT NOT NULL,
    action TEXT NOT NULL, details TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (topic TEXT PRIMARY KEY, version BIGINT NOT NULL);
INSERT INTO kill_switch (id, halted, reason, since, version) VALUES (1, 0, '', NULL, 0)
    ON CONFLICT (id) DO NOTHING;
INSERT INTO changes (topic, version) VALUES ('killswitch', 0) ON CONFLICT (topic) DO NOTHING;
INSERT INTO changes (topic, version) VALUES ('approvals', 0) ON CONFLICT (topic) DO NOTHING
"""


def statements(dialect: str) -> list[str]:
    """The statements that create every table (idempotent), for ``sqlite`` or ``postgres``."""
    return [s.strip() for s in _TABLES.split(";") if s.strip()]


__all__ = ["POSTGRES_LOCK_ID", "statements"]
