"""Who may call what: the authorization matrix the tests hold the server to, written out by
hand (not read from the server), one row per operation of the OpenAPI document."""

from __future__ import annotations

AGENT, APPROVER, ADMIN, AUDITOR = "agent", "approver", "admin", "auditor"
EVERYONE = frozenset({AGENT, APPROVER, ADMIN, AUDITOR})
PUBLIC = frozenset({"none"})
"""Health and readiness: no token needed."""

ALLOWED: dict[tuple[str, str], frozenset[str]] = {
    ("GET", "/v1/health"): PUBLIC,
    ("GET", "/v1/ready"): PUBLIC,
    ("GET", "/v1/whoami"): EVERYONE,
    ("POST", "/v1/tokens"): frozenset({ADMIN}),
    ("GET", "/v1/tokens"): frozenset({ADMIN}),
    ("DELETE", "/v1/tokens/{token_id}"): frozenset({ADMIN}),
    ("GET", "/v1/killswitch"): EVERYONE,
    ("GET", "/v1/killswitch/stream"): EVERYONE,
    ("POST", "/v1/killswitch/halt"): frozenset({ADMIN, AGENT}),
    ("POST", "/v1/killswitch/resume"): frozenset({ADMIN}),
    ("GET", "/v1/audit/events"): frozenset({ADMIN, AUDITOR}),
    ("GET", "/v1/origins"): frozenset({ADMIN, AUDITOR}),
    ("GET", "/v1/origins/{origin}"): frozenset({AGENT, ADMIN, AUDITOR}),
    ("POST", "/v1/origins/{origin}/records"): frozenset({AGENT}),
    ("POST", "/v1/origins/{origin}/checkpoints"): frozenset({AGENT}),
    ("GET", "/v1/sagas"): frozenset({ADMIN, AUDITOR, APPROVER}),
    ("GET", "/v1/sagas/{origin}/{saga}"): frozenset({ADMIN, AUDITOR, APPROVER}),
    ("GET", "/v1/approvers"): frozenset({AGENT, ADMIN, AUDITOR}),
    ("POST", "/v1/approvals"): frozenset({AGENT}),
    ("GET", "/v1/approvals"): EVERYONE,
    ("GET", "/v1/approvals/{request_id}"): EVERYONE,
    ("POST", "/v1/approvals/{request_id}/votes"): frozenset({APPROVER}),
    ("GET", "/v1/budgets"): frozenset({ADMIN, AUDITOR, AGENT}),
    ("PUT", "/v1/budgets/{budget}"): frozenset({ADMIN}),
    ("POST", "/v1/budgets/{budget}/reserve"): frozenset({AGENT}),
    ("POST", "/v1/budgets/{budget}/holds/{hold_id}"): frozenset({AGENT, ADMIN}),
    ("GET", "/v1/budgets/{budget}/usage"): frozenset({AGENT, ADMIN, AUDITOR}),
    ("GET", "/v1/budgets/{budget}/holds"): frozenset({AGENT, ADMIN, AUDITOR}),
    ("GET", "/v1/audit/sagas/{origin}/{saga}/disclosure"): frozenset({ADMIN, AUDITOR}),
    ("GET", "/v1/audit/certify/{origin}"): frozenset({ADMIN, AUDITOR}),
    ("GET", "/v1/audit/checkpoints"): frozenset({ADMIN, AUDITOR}),
    ("GET", "/v1/audit/conflicts"): frozenset({ADMIN, AUDITOR}),
    ("POST", "/v1/passkeys/enrolments"): frozenset({ADMIN}),
    ("GET", "/v1/passkeys"): frozenset({ADMIN}),
    ("DELETE", "/v1/passkeys/{credential_id}"): frozenset({ADMIN}),
}


def token_for(method: str, path: str) -> str | None:
    """The scope to call an operation with in the schema tests (one that is allowed)."""
    allowed = ALLOWED[(method, path)]
    if allowed == PUBLIC:
        return None
    for scope in (ADMIN, AGENT, APPROVER, AUDITOR):
        if scope in allowed:
            return scope
    raise AssertionError(path)
