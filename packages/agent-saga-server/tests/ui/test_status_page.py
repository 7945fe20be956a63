"""The status page under ``agent-saga ui``: the fleet's switch and saga counts, the home's
readiness and guarantees manifest, and a verification of the home's log run on request."""

from __future__ import annotations

import json

from agent_saga import AgentKit
from browser_kit import Dashboard, Guard, Snap
from playwright.sync_api import Page, expect


def note(text: str) -> str:
    return text


def test_the_status_page_shows_the_home_and_verifies_its_log_on_request(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded
    with AgentKit(home=dashboard.home) as kit:
        step = kit.tool(name="status.note", compensate=lambda text: None)(note)
        with kit.transaction("<b>status</b> saga"):
            step(text="x")
        stored = sum(1 for _ in kit.store.records())
    dashboard.login(page, "ida", "auditor")
    page.get_by_role("link", name="Status", exact=True).click()
    expect(page.locator("#status-switch")).to_contain_text("RUNNING")
    expect(page.locator("#home-ready")).to_contain_text("READY")
    assert str(dashboard.home) in page.locator("main").inner_text()
    manifest = json.loads(page.locator("#home-guarantees").inner_text())
    assert manifest["kill_switch"]["kind"] == "file"
    assert page.locator("#home-verify").count() == 0  # verify runs only when asked
    page.get_by_role("link", name="Verify the whole log now").click()
    verdict = page.locator("#home-verify")
    expect(verdict).to_contain_text("OK")
    records = int(verdict.inner_text().split(": ")[1].split()[0])
    assert records >= stored
    snap(page, "status")
