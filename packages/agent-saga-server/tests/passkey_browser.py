"""Helpers of the passkey browser tests: a virtual authenticator (CDP ``WebAuthn``), the scripts
that sign and post in the page, and an approval request made as an agent would."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
from browser_kit import Dashboard, issue_token
from playwright.sync_api import CDPSession, Page

SIGN = """async ([base, csrf, decision]) => {
  const post = async (url, body) => {
    const answer = await fetch(url, {method: "POST", body: JSON.stringify(body),
      headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}});
    return [answer.status, await answer.json()];
  };
  const [, offer] = await post(`${base}/passkey-options`, {decision});
  const options = PublicKeyCredential.parseRequestOptionsFromJSON(offer.options);
  const credential = await navigator.credentials.get({publicKey: options});
  return {challenge_id: offer.challenge_id, credential: credential.toJSON()};
}"""
CREATE = """async ([csrf, grant]) => {
  const post = async (url, body) => {
    const answer = await fetch(url, {method: "POST", body: JSON.stringify(body),
      headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}});
    return [answer.status, await answer.json()];
  };
  const [status, offer] = await post("/ui/passkeys/options", grant);
  if (status !== 200) { return [status, offer]; }
  const options = PublicKeyCredential.parseCreationOptionsFromJSON(offer.options);
  const made = await navigator.credentials.create({publicKey: options});
  return await post("/ui/passkeys", {challenge_id: offer.challenge_id, credential: made.toJSON()});
}"""
POST = """async ([url, csrf, body]) => {
  const answer = await fetch(url, {method: "POST", body: JSON.stringify(body),
    headers: {"Content-Type": "application/json", "X-CSRF-Token": csrf}});
  return [answer.status, await answer.json()];
}"""


ES256, ED25519 = -7, -8


def only_algorithm(alg: int) -> str:
    """An init script: the page's registrations offer the authenticator ``alg`` only."""
    return f"""{{
  const create = navigator.credentials.create.bind(navigator.credentials);
  navigator.credentials.create = (options) => {{
    const offered = options.publicKey.pubKeyCredParams;
    options.publicKey.pubKeyCredParams = offered.filter((p) => p.alg === {int(alg)});
    return create(options);
  }};
}}"""


AUTHENTICATOR = {
    "protocol": "ctap2", "transport": "internal", "hasResidentKey": True,
    "hasUserVerification": True, "isUserVerified": True, "automaticPresenceSimulation": True,
}  # fmt: skip


def add_authenticator(page: Page, alg: int) -> tuple[CDPSession, str]:
    """A virtual authenticator in ``page``'s browser: its DevTools session and id."""
    page.add_init_script(only_algorithm(alg))  # for the pages loaded from now on
    cdp = page.context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    added = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": AUTHENTICATOR})
    return cdp, str(added["authenticatorId"])


def pending_request(dashboard: Dashboard, origin: str, amount: int) -> str:
    """An approval request created through the API as an agent would (no agent waits)."""
    request_id = f"apr-{secrets.token_hex(8)}"
    body = {
        "id": request_id, "saga": f"saga-{amount}", "ordinal": 1, "tool": "bank.wire",
        "semantics": "irreversible", "digest": f"{amount:064x}", "args": {"amount": amount},
        "rule": "irreversible", "reason": "r", "approvers": ["*"], "quorum": 1,
        "expires_at": time.time() + 600,
    }  # fmt: skip
    token = issue_token(dashboard.home, "agent", origin)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=dashboard.url, headers=headers, trust_env=False) as client:
        assert client.post("/v1/approvals", json=body).status_code == 201
    return request_id


def admin(dashboard: Dashboard) -> httpx.Client:
    """An API client holding an admin token of the dashboard's control plane."""
    token = issue_token(dashboard.home, "admin", "root")
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=dashboard.url, headers=headers, trust_env=False, timeout=10)


def passkeys_of(dashboard: Dashboard, subject: str) -> list[dict[str, Any]]:
    with admin(dashboard) as client:
        answer = client.get("/v1/passkeys", params={"subject": subject})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["passkeys"])


def signed_in(page: Page, dashboard: Dashboard, subject: str) -> str:
    """Log in with an approver token (only that), open the passkeys page; its CSRF token."""
    dashboard.login_as_approver(page, subject, base=dashboard.named_url)
    page.goto(f"{dashboard.named_url}/ui/passkeys")
    return str(page.locator("#register-passkey").get_attribute("data-csrf"))
