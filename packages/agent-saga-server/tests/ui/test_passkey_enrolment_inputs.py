"""A careless or hostile approver's session against the passkey registration routes of a real
``agent-saga ui`` (chromium, a virtual authenticator): odd and huge bodies, credentials of every
JSON type, a body over the server's limit, a missing CSRF header and a foreign origin are each
refused in one line (never a 500), none of them spends or counts against the enrolment code, and
the code is never in the server's output."""

from __future__ import annotations

import json

import httpx
from browser_kit import Dashboard, Guard, enrolment_code
from passkey_browser import CREATE, ES256, POST, add_authenticator, admin, passkeys_of, signed_in
from playwright.sync_api import Page

RAW = """async ([url, csrf, body]) => {
  const headers = {"Content-Type": "application/json"};
  if (csrf !== null) { headers["X-CSRF-Token"] = csrf; }
  const answer = await fetch(url, {method: "POST", body: body, headers: headers});
  return [answer.status, await answer.text()];
}"""
ODD_BODIES = [
    "[]", "null", '"code"', "{", '{"code": 5}', '{"code": ["x"]}', '{"code": "\\ud800"}',
    '{"code": "' + "x" * 50_000 + '"}', '{"assertion": []}', '{"code": 1e999}',
    '{"assertion": {"challenge_id": {"a": 1}, "credential": 5}}',
    "[" * 5_000 + "]" * 5_000, '{"a": ' + "1" * 5_000 + "}",
]  # fmt: skip
ODD_CREDENTIALS: list[object] = [
    5, "x", [], None, True, {}, {"id": "AA", "rawId": "AA", "type": "public-key", "response": 5},
    {"id": "AA", "rawId": "AA", "type": "public-key",
     "response": {"clientDataJSON": "!!", "attestationObject": "oA"}},
]  # fmt: skip


def _one_line_refusal(status: int, text: str) -> str:
    assert 400 <= status < 500, (status, text)
    detail = json.loads(text)["detail"]
    assert isinstance(detail, str)
    assert "\n" not in detail
    assert len(detail) <= 400
    return detail


def test_odd_bodies_and_credentials_are_refused_in_one_line_and_spend_nothing(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 4")
    csrf = signed_in(page, dashboard, "odd")
    cdp, authenticator = add_authenticator(page, ES256)
    page.reload()
    code = enrolment_code(dashboard.home, "odd")
    for body in ODD_BODIES:
        _one_line_refusal(*page.evaluate(RAW, ["/ui/passkeys/options", csrf, body]))
    details = set()
    for credential in ODD_CREDENTIALS:
        status, offer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"code": code}])
        assert status == 200, offer
        body = json.dumps({"challenge_id": offer["challenge_id"], "credential": credential})
        details.add(_one_line_refusal(*page.evaluate(RAW, ["/ui/passkeys", csrf, body])))
    assert "the passkey did not verify: the credential is not a JSON object" in details
    assert passkeys_of(dashboard, "odd") == []
    status, answer = page.evaluate(CREATE, [csrf, {"code": code}])  # still one good use left
    assert status == 200, answer
    assert len(passkeys_of(dashboard, "odd")) == 1
    made = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
    assert len(made["credentials"]) == 1
    output = (dashboard.home / "ui.err").read_text()
    assert "Traceback" not in output
    assert code[21:] not in output  # the secret is never logged
    with admin(dashboard) as client:
        trail = client.get("/v1/audit/events", params={"limit": 500}).text
    assert '"passkey.refused"' in trail
    assert code[21:] not in trail  # nor audited


def test_the_registration_posts_need_the_csrf_header_and_the_dashboards_origin(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 403")
    csrf = signed_in(page, dashboard, "forged")
    code = enrolment_code(dashboard.home, "forged")
    body = json.dumps({"code": code})
    for url in ("/ui/passkeys/options", "/ui/passkeys/enrol-options", "/ui/passkeys"):
        status, text = page.evaluate(RAW, [url, None, body])
        assert status == 403, (url, text)
        status, text = page.evaluate(RAW, [url, "0" * len(csrf), body])
        assert status == 403, (url, text)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    headers = {"X-CSRF-Token": csrf, "Origin": "https://evil.example", "Content-Type": "text/plain"}
    with httpx.Client(base_url=dashboard.named_url, trust_env=False, timeout=10) as client:
        client.cookies.update(cookies)
        forged = client.post("/ui/passkeys/options", content=body, headers=headers)
        own = {**headers, "Origin": dashboard.named_url, "Content-Type": "application/json"}
        huge = client.post("/ui/passkeys/options", content=b" " * (9 << 20), headers=own)
    assert forged.status_code == 403, forged.text
    assert huge.status_code == 413, huge.text  # refused before it is read in full
    status, offer = page.evaluate(POST, ["/ui/passkeys/options", csrf, {"code": code}])
    assert status == 200, offer  # the code was neither spent nor counted against
