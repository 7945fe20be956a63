"""axe-core (vendored, ``axe_core/``) in every dashboard page: no serious or critical violation.

The pages are visited with content in them (a committed and a rolled-back saga, hostile names
included, a pending approval), as a user sees them; the ``snap`` fixture runs the same check on
every page a test photographs.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

import pytest
from agent_saga import AgentKit, SagaRolledBack
from browser_kit import Dashboard, Guard, axe_violations, start_agent, wait_for_request
from playwright.sync_api import Page

HOSTILE = "<img src=x onerror=alert('axe')>"


def echo(text: str) -> str:
    return text


def fail(text: str) -> str:
    raise RuntimeError(f"refused: {text}")


def run_two_sagas(home: Path) -> None:
    """A committed saga and a rolled-back one (a compensation ran) in the dashboard's home."""
    kit = AgentKit(home=home)
    try:
        ok = kit.tool(name=HOSTILE, compensate=lambda text: None)(echo)
        bad = kit.tool(name="axe.fail", compensate=lambda text: None)(fail)
        with kit.transaction("axe-kept"):
            ok(text="<b>kept</b>")
        with pytest.raises(SagaRolledBack), kit.transaction("axe-undone"):
            ok(text="first")
            bad(text="second")
    finally:
        kit.close()


def saga_link(page: Page, dashboard: Dashboard, name: str) -> str:
    deadline = time.monotonic() + 15
    while True:
        page.goto(f"{dashboard.url}/ui/sagas?origin=local")
        link = page.locator("#sagas a", has_text=name)
        if link.count():
            return f"{dashboard.url}{link.first.get_attribute('href')}"
        assert time.monotonic() < deadline, f"{name} never listed"
        time.sleep(0.2)


def test_every_page_has_no_serious_or_critical_violation(
    dashboard: Dashboard, guarded: tuple[Page, Guard], tmp_path: Path
) -> None:
    page, guard = guarded
    guard.expected += ["status of 404", "status of 401", "status of 400"]
    page.goto(f"{dashboard.url}/ui/login")
    found = {"login": axe_violations(page)}
    run_two_sagas(dashboard.home)
    dashboard.login_as_approver(page, "axel")  # first: agents ask the approvers that exist
    thread, seen = start_agent(dashboard, tmp_path / "agent", "axe-bank")
    try:
        request = wait_for_request(page, dashboard, "axe-bank")
        found["approvals"] = axe_violations(page)
        request.get_by_role("button", name="Deny").click()
        found["approvals decided"] = axe_violations(page)
        thread.join(20)
        assert seen["wires"] == 0
        dashboard.login(page, "ann", "admin")
        kept, undone = (saga_link(page, dashboard, n) for n in ("axe-kept", "axe-undone"))
        pages = {
            "sagas": f"{dashboard.url}/ui/sagas",
            "sagas filtered": f"{dashboard.url}/ui/sagas?status=rolled_back",
            "sagas bad filter": f"{dashboard.url}/ui/sagas?status=nope",
            "timeline": kept,
            "timeline rolled back": undone,
            "control": f"{dashboard.url}/ui/control",
            "live": f"{dashboard.url}/ui/live",
            "audit": f"{dashboard.url}/ui/audit",
            "audit certify": f"{dashboard.url}/ui/audit?certify=local",
            "passkeys": f"{dashboard.url}/ui/passkeys",
            "status": f"{dashboard.url}/ui/status",
            "status verified": f"{dashboard.url}/ui/status?verify=yes",
            "playground": f"{dashboard.url}/ui/playground",
            "missing": f"{dashboard.url}/ui/sagas/local/{quote('no such saga')}",
        }
        for name, url in pages.items():
            page.goto(url)
            found[name] = axe_violations(page)
        page.goto(f"{dashboard.url}/ui/playground")
        page.get_by_label("Compare before and after side by side").check()
        page.get_by_role("button", name="Run with agent-saga (after)").click()
        page.locator(".run.after").wait_for()
        found["playground results"] = axe_violations(page)
    finally:
        thread.join(20)
        seen["kit"].close()
    assert {name: v for name, v in found.items() if v} == {}
    assert len(found) == 18


def test_axe_finds_a_violation_it_is_given(dashboard: Dashboard, page: Page) -> None:
    """The check can fail: an image without alternative text is a critical violation."""
    dashboard.login(page)
    page.evaluate("() => document.querySelector('main').appendChild(new Image())")
    assert any(v.startswith("image-alt (critical)") for v in axe_violations(page))
