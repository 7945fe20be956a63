"""Passkey approvals in chromium with a virtual authenticator (CDP ``WebAuthn``): an approver
registers a passkey and approves (or denies) an agent's IRREVERSIBLE step with it: the agent's
engine, counting only passkey votes, checks the assertion again, the step runs once (or not),
and certify verifies the assertion offline from the agent's log. A replayed assertion, and an
assertion made for another request (other arguments), are refused. The page is on
``http://localhost`` (WebAuthn needs a host name).

Each algorithm is exercised in the browser: chromium's virtual authenticator has no setting for
its algorithms and takes the first one offered that it supports, so the test's init script
narrows the offer the page passes to ``navigator.credentials.create`` to one algorithm (as an
authenticator that supports only that one would choose it): ES256 (-7) or Ed25519 (-8). The
server offers both (``test_passkey_commitment.py``) and records the one registered.

Each approver registers with an admin's enrolment code (``test_passkey_enrolment.py`` holds the
enrolment rules)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from agent_saga import AgentKit
from browser_kit import (
    Dashboard,
    Guard,
    enrolment_code,
    issue_token,
    start_agent,
    wait_for_request,
)
from passkey_browser import ED25519, ES256, POST, SIGN, add_authenticator, pending_request
from plane_testkit import AGENT_SAGA, server_environment
from playwright.sync_api import Page, expect


def register_passkey(page: Page, dashboard: Dashboard, subject: str, alg: int) -> None:
    """Log in with an approver token, and register a passkey with an admin's enrolment code."""
    dashboard.login_as_approver(page, subject, base=dashboard.named_url)
    add_authenticator(page, alg)
    page.get_by_role("link", name="Passkeys").click()
    page.get_by_label("Enrolment code").fill(enrolment_code(dashboard.home, subject))
    page.get_by_role("button", name="Register a passkey").click()
    expect(page.locator("#passkeys li")).to_contain_text("used", timeout=15_000)


def agent_log(home: Path) -> list[Any]:
    with AgentKit(home=home, checkpoints=False) as kit:
        return list(kit.store.records())


def certify(home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENT_SAGA, "--home", str(home), "certify"],
        capture_output=True, text=True, check=False, env=server_environment(),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("decision", "alg"), [("approve", ES256), ("deny", ED25519)], ids=["es256", "ed25519"]
)
def test_an_approver_decides_with_a_passkey_and_the_agent_checks_it(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path, decision: str, alg: int
) -> None:
    """The agent's kit, made with ``require_passkey=True``, counts only passkey votes; the
    assertion made in the page (an ES256 credential approving, an Ed25519 one denying) reaches
    the agent's log with the approver's key, is checked there before the step runs, and certify
    verifies it offline."""
    page, _ = guarded
    approver = f"pat-{decision}"
    register_passkey(page, dashboard, approver, alg)
    home = tmp_path / "agent"
    origin = f"wire-passkey-{decision}"
    thread, seen = start_agent(dashboard, home, origin, require_passkey=True)
    try:
        page.goto(f"{dashboard.named_url}/ui/approvals")
        request = wait_for_request(page, dashboard, origin, base=dashboard.named_url)
        request.get_by_label("Note").fill("signed with my passkey")
        button = "Approve with passkey" if decision == "approve" else "Deny with passkey"
        request.get_by_role("button", name=button).click()
        outcome = "approved" if decision == "approve" else "denied"
        expect(page.locator("#decided")).to_contain_text(f"is now {outcome}")
        thread.join(30)
        assert not thread.is_alive()
        assert seen["wires"] == (1 if decision == "approve" else 0)
        assert seen["error"] == (None if decision == "approve" else "SagaRolledBack")
    finally:
        thread.join(20)
        seen["kit"].close()
    records = agent_log(home)
    (key,) = [r.data for r in records if r.kind == "passkey.registered"]
    (vote,) = [r.data for r in records if r.kind == "approval.vote"]
    (decided,) = [r.data for r in records if r.kind == "approval.decided"]
    assert (key["approver"], key["rp_id"]) == (approver, "localhost")
    assert key["alg"] == alg
    assert vote["by"] == approver
    assert vote["passkey"]["credential"] == key["credential"]
    assert vote["passkey"]["challenge"]["decision"] == decision
    assert decided["decision"] == outcome
    assert decided["by" if decision == "approve" else "denied_by"] == [approver]
    certified = certify(home)
    assert certified.returncode == 0, certified.stdout + certified.stderr
    assert "1 passkey votes verified" in certified.stdout


def test_a_replayed_assertion_and_one_for_other_arguments_are_refused(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 403")
    register_passkey(page, dashboard, "quinn", ES256)
    small = pending_request(dashboard, "passkey-replay", 10)
    large = pending_request(dashboard, "passkey-replay", 99_000)
    page.goto(f"{dashboard.named_url}/ui/approvals")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    base = f"{dashboard.named_url}/ui/approvals"
    signed: dict[str, Any] = page.evaluate(SIGN, [f"{base}/{small}", csrf, "approve"])
    status, answer = page.evaluate(POST, [f"{base}/{large}/passkey", csrf, signed])
    assert status == 403
    assert "another approval request" in answer["detail"]
    status, answer = page.evaluate(POST, [f"{base}/{small}/passkey", csrf, signed])
    assert status == 403  # a challenge presented once, even misdirected, is spent
    assert "already used" in answer["detail"]
    signed = page.evaluate(SIGN, [f"{base}/{small}", csrf, "approve"])
    status, answer = page.evaluate(POST, [f"{base}/{small}/passkey", csrf, signed])
    assert (status, answer["status"]) == (200, "approved")
    status, answer = page.evaluate(POST, [f"{base}/{small}/passkey", csrf, signed])
    assert status == 403
    assert "already used" in answer["detail"]
    with httpx.Client(base_url=dashboard.url, trust_env=False) as client:
        admin = {"Authorization": f"Bearer {issue_token(dashboard.home, 'admin', 'root')}"}
        votes = client.get(f"/v1/approvals/{small}", headers=admin).json()["votes"]
        untouched = client.get(f"/v1/approvals/{large}", headers=admin).json()
    assert [v["approver"] for v in votes] == ["quinn"]
    assert untouched["status"] == "pending"
    assert untouched["votes"] == []


def test_a_malformed_assertion_of_a_registered_credential_is_refused_not_a_crash(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    """An assertion naming the approver's registered credential but of the wrong shape (its
    ``response`` not an object, its authenticator data cut short) is a 403 with its reason,
    never a server error."""
    page, guard = guarded
    guard.expected.append("status of 403")
    register_passkey(page, dashboard, "rowan", ED25519)
    pending = pending_request(dashboard, "passkey-malformed", 12)
    page.goto(f"{dashboard.named_url}/ui/approvals")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    base = f"{dashboard.named_url}/ui/approvals/{pending}"
    for response in ("not an object", {"clientDataJSON": "e30", "signature": "AA"}):
        signed: dict[str, Any] = page.evaluate(SIGN, [base, csrf, "approve"])
        signed["credential"]["response"] = response
        status, answer = page.evaluate(POST, [f"{base}/passkey", csrf, signed])
        assert status == 403, answer
        assert "did not verify" in answer["detail"]
