"""The approval queue in chromium: an agent process's IRREVERSIBLE step waits for a decision,
an approver approves or denies it from the page, and the step runs exactly once or never."""

from __future__ import annotations

from pathlib import Path

from browser_kit import (
    CARD,
    MARKUP,
    Dashboard,
    Guard,
    Snap,
    issue_token,
    start_agent,
    wait_for_request,
)
from playwright.sync_api import Page, expect


def test_an_approver_approves_from_the_queue_and_the_step_runs_once(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path, snap: Snap
) -> None:
    page, _ = guarded
    dashboard.login_as_approver(page, "ann")  # first: agents ask the approvers that exist
    thread, seen = start_agent(dashboard, tmp_path / "agent", "wire-approve")
    try:
        request = wait_for_request(page, dashboard, "wire-approve")
        expect(request.locator(".tool")).to_have_text("bank.wire")
        args = request.locator(".args").inner_text()
        assert CARD not in args  # masked by the agent before it left
        assert '"amount": 9000' in args
        assert MARKUP in args  # markup shown as text
        assert len(request.locator(".digest").inner_text()) == 64
        assert "UTC" in request.locator(".expiry").inner_text()
        snap(page, "approvals")
        request.get_by_label("Note").fill("checked the invoice")
        request.get_by_role("button", name="Approve").click()
        expect(page.locator("#decided")).to_contain_text("is now approved")
        thread.join(20)
        assert seen["wires"] == 1
        assert seen["error"] is None
        assert page.locator("main img").count() == 0
    finally:
        thread.join(20)
        seen["kit"].close()


def test_a_denial_from_the_queue_means_the_step_never_runs(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path
) -> None:
    page, _ = guarded
    dashboard.login_as_approver(page, "ann")  # first: agents ask the approvers that exist
    thread, seen = start_agent(dashboard, tmp_path / "agent", "wire-deny")
    try:
        request = wait_for_request(page, dashboard, "wire-deny")
        request.get_by_label("Note").fill("not on the list")
        request.get_by_role("button", name="Deny").click()
        expect(page.locator("#decided")).to_contain_text("is now denied")
        thread.join(20)
        assert seen["wires"] == 0
        assert seen["error"] is not None
    finally:
        thread.join(20)
        seen["kit"].close()


def test_an_auditor_sees_the_queue_but_cannot_decide(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path
) -> None:
    page, _ = guarded
    issue_token(dashboard.home, "approver", "dora")
    thread, seen = start_agent(dashboard, tmp_path / "agent", "wire-audit")
    try:
        dashboard.login(page, "carl", "auditor")
        request = wait_for_request(page, dashboard, "wire-audit")
        expect(request.get_by_role("button", name="Approve")).to_have_count(0)
        csrf = page.locator("input[name=csrf]").first.get_attribute("value")
        request_id = request.get_attribute("id").removeprefix("approval-")
        answer = page.request.post(
            f"{dashboard.url}/ui/approvals/{request_id}",
            form={"csrf": csrf or "", "decision": "approve"},
        )
        assert answer.status == 403
        dashboard.login_as_approver(page, "dora")
        request = wait_for_request(page, dashboard, "wire-audit")
        request.get_by_role("button", name="Deny").click()
        expect(page.locator("#decided")).to_contain_text("is now denied")
        thread.join(20)
        assert seen["wires"] == 0
    finally:
        thread.join(20)
        seen["kit"].close()
