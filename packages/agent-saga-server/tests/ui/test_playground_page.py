"""The playground in chromium: the same scripted agent without agent-saga leaves the harm (a
double charge, an overdose sent, an elbow past its limit), through the engine it is refused and
rolled back, side by side on request; inputs are bounded, runs rate-limited, sandboxes removed,
and the visitor's input renders inert."""

from __future__ import annotations

import httpx
from browser_kit import Dashboard, Guard, Snap
from playwright.sync_api import Page, expect


def open_playground(page: Page, dashboard: Dashboard, subject: str) -> None:
    dashboard.login(page, subject, "auditor")
    page.get_by_role("link", name="Playground").click()
    expect(page.locator("h1")).to_have_text("Playground")


def test_a_wire_side_by_side_double_charge_before_refund_after(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded
    open_playground(page, dashboard, "pia")
    page.get_by_label("Wire amount (cents)", exact=True).check()
    page.get_by_label("Wire amount (cents) value").fill("250000")
    page.get_by_label("Compare before and after side by side").check()
    page.get_by_role("button", name="Run with agent-saga (after)").click()
    before, after = page.locator(".run.before"), page.locator(".run.after")
    expect(before.locator(".outcome")).to_contain_text("HARM DONE")
    assert '"charged:cus_ada": 500000' in before.locator(".state").inner_text()  # twice
    assert '"wired:supplier": 250000' in before.locator(".state").inner_text()
    expect(after.locator(".outcome")).to_contain_text("no harm done")
    assert "duplicate_charge" in after.locator(".outcome").inner_text()
    assert after.locator(".state").inner_text().strip() == "{}"  # the first charge refunded
    kinds = after.locator(".log td:nth-child(2)").all_inner_texts()
    assert "compensation.done" in kinds
    assert kinds.index("compensation.done") > kinds.index("saga.begin")
    expect(page.get_by_label("Compare before and after side by side")).to_be_checked()
    snap(page, "playground")
    assert list(dashboard.scratch.iterdir()) == []  # every sandbox removed


def test_an_overdose_is_sent_before_and_refused_after(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    open_playground(page, dashboard, "pia")
    page.get_by_label("Paracetamol dose (mg)", exact=True).check()
    page.get_by_label("Paracetamol dose (mg) value").fill("4000")
    page.get_by_role("button", name="Run without agent-saga (before)").click()
    run = page.locator(".run")
    expect(run).to_have_count(1)
    assert "paracetamol 4000 mg for pt-7" in run.locator(".state").inner_text()
    expect(run.locator(".outcome")).to_contain_text("HARM DONE")
    page.get_by_role("button", name="Run with agent-saga (after)").click()
    expect(run.locator(".outcome")).to_contain_text("dose_range")
    assert '"orders sent to the pharmacy": []' in run.locator(".state").inner_text()
    assert '"cancelled": 1' in run.locator(".state").inner_text()  # the antiemetic undone


def test_a_servo_angle_past_the_limit_is_refused_and_the_shoulder_goes_back(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    open_playground(page, dashboard, "pia")
    page.get_by_label("Elbow angle (degrees)", exact=True).check()
    page.get_by_label("Elbow angle (degrees) value").fill("200")
    page.get_by_label("Compare before and after side by side").check()
    page.get_by_role("button", name="Run without agent-saga (before)").click()
    before, after = page.locator(".run.before"), page.locator(".run.after")
    expect(before.locator(".outcome")).to_contain_text("end stop")
    assert '"elbow": 150.0' in before.locator(".state").inner_text()
    expect(after.locator(".outcome")).to_contain_text("joint_limits")
    state = after.locator(".state").inner_text()
    assert '"shoulder": 0.0' in state  # driven back to its last safe pose
    assert '"elbow": 0.0' in state


def test_inputs_are_bounded_and_runs_need_the_csrf_token(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, guard = guarded
    guard.expected.append("status of 400")
    open_playground(page, dashboard, "pia")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    form: dict[str, str | float | bool] = {
        "csrf": csrf,
        "scenario": "dose",
        "run": "after",
        "dose": "1e9",
    }
    answer = page.request.post(f"{dashboard.url}/ui/playground", form=form)
    assert answer.status == 400
    assert "between 0.001 and 100000" in answer.text()
    hostile: dict[str, str | float | bool] = {**form, "dose": "<script>alert(1)</script>"}
    refused = page.request.post(f"{dashboard.url}/ui/playground", form=hostile)
    assert refused.status == 400
    assert "<script>" not in refused.text()
    no_token: dict[str, str | float | bool] = {**form, "csrf": "", "dose": "5"}
    assert page.request.post(f"{dashboard.url}/ui/playground", form=no_token).status == 403
    with httpx.Client(base_url=dashboard.url, trust_env=False) as anonymous:
        assert anonymous.post("/ui/playground", data=form).status_code == 401


def test_runs_are_rate_limited_per_session(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    open_playground(page, dashboard, "rita")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    form: dict[str, str | float | bool] = {
        "csrf": csrf,
        "scenario": "servo",
        "run": "before",
        "servo": "10",
    }
    statuses = [
        page.request.post(f"{dashboard.url}/ui/playground", form=form).status for _ in range(14)
    ]
    assert statuses[:12] == [200] * 12
    assert statuses[12:] == [429, 429]
