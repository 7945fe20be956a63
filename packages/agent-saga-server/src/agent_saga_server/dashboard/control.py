"""The kill switch and the fleet's budgets.

Halting and resuming take a reason and a ticked confirmation (under ``agent-saga ui`` they
act on the home's own switch too, see :mod:`.home`); only an admin session may do
either, and each is audited under the session's subject (the same store functions as the API's
``/v1/killswitch/halt`` and ``/resume``). Each budget shows its cap, what is spent and what is
reserved (held), as a gauge.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Literal

from fastapi import APIRouter, Form, HTTPException
from fastapi.responses import Response

from ..store.budgets import BudgetInfo, list_budgets
from ..store.control import halt, resume, switch_state
from ..store.tokens import Caller
from .approvals import at
from .web import Config, DashboardConfig, FormViewer, PageViewer, redirect, render

pages = APIRouter()


def gauge(budget: BudgetInfo) -> dict[str, object]:
    """What a budget's gauge shows: used and reserved as whole percentages of the cap."""
    if budget.cap is None or budget.cap <= 0:
        return {"budget": budget, "used_pct": None, "held_pct": None}
    used = int(min(Decimal(100), budget.spent * 100 / budget.cap))
    held = int(min(Decimal(100 - used), budget.held * 100 / budget.cap))
    return {"budget": budget, "used_pct": used, "held_pct": held}


@dataclass(frozen=True)
class ShownSwitch:
    """The switch as the page shows it: halted when the fleet's or the home's is."""

    halted: bool
    reason: str | None
    since: float | None


def shown_switch(config: DashboardConfig) -> ShownSwitch:
    fleet = switch_state(config.db)
    if fleet.halted or config.home is None:
        return ShownSwitch(fleet.halted, fleet.reason, fleet.since)
    home = config.home.switch_state()
    return ShownSwitch(home.halted, home.reason, home.since)


@pages.get("/control")
def control_page(viewer: PageViewer, config: Config, problem: str = "") -> Response:
    state = shown_switch(config)
    gauges = [gauge(b) for b in list_budgets(config.db)]
    return render("control.html", viewer, state=state, gauges=gauges, at=at, problem=problem[:200])


@pages.post("/control/{action}")
def switch(
    viewer: FormViewer,
    config: Config,
    action: Literal["halt", "resume"],
    reason: Annotated[str, Form(max_length=500)] = "",
    confirm: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Halt or resume the fleet, with a reason, once confirmed."""
    if not viewer.may_control:
        raise HTTPException(403, f"a {viewer.role} session may not use the kill switch")
    if confirm != "yes":
        return redirect(f"/control?problem=tick+the+box+to+confirm+the+{action}")
    if not reason.strip():
        return redirect(f"/control?problem=give+a+reason+for+the+{action}")
    caller = Caller(f"ui:{viewer.session_id}", "admin", viewer.subject, None)
    why = reason.strip()
    if action == "halt":
        if config.home is not None:  # first: the agents on the home stop at once
            config.home.halt(f"{why} (by {viewer.subject} from the dashboard)")
        halt(config.db, caller, why)
    else:
        resume(config.db, caller, why)
        if config.home is not None:
            config.home.resume()
    return redirect("/control")


__all__ = ["ShownSwitch", "gauge", "pages", "shown_switch"]
