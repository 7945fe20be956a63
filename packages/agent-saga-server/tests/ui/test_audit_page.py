"""The audit page: the origins with their checkpoints, and a certify report run on request."""

from __future__ import annotations

import time

from agent_saga import AgentKit
from browser_kit import Dashboard, Guard, Snap
from playwright.sync_api import Page, expect


def note(text: str) -> str:
    return text


def test_an_auditor_certifies_an_origin_from_the_page(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, guard = guarded
    kit = AgentKit(home=dashboard.home)
    try:
        step = kit.tool(name="audit.note", compensate=lambda text: None)(note)
        with kit.transaction("audited"):
            step(text="kept")
    finally:
        kit.close()
    dashboard.login(page, "ida", "auditor")
    page.get_by_role("link", name="Audit", exact=True).click()
    deadline = time.monotonic() + 15
    while "local" not in page.locator("#origins").inner_text():
        assert time.monotonic() < deadline, "the home's log never reached the control plane"
        page.wait_for_timeout(200)
        page.reload()
    assert page.locator("#certify-verdict").count() == 0  # certify runs only when asked
    page.get_by_role("link", name="Certify local").click()
    verdict = page.locator("#certify-verdict")
    expect(verdict).to_contain_text("sagas")
    assert "0 critical" in verdict.inner_text()
    snap(page, "audit")
    guard.expected.append("status of 404")
    page.goto(f"{dashboard.url}/ui/audit?certify=nobody")
    expect(page.locator(".problem")).to_have_text("no such origin")
