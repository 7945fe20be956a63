"""The kill switch and the fleet's budgets.

Halting and resuming take a reason and a ticked confirmation; only an admin session may do
either, and each is audited under the session's subject (the same store functions as the API's
``/v1/killswitch/halt`` and ``/resume``). Each budget shows its cap, what is spent and what is
reserved (held), as a gauge.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from fastapi import APIRouter, Form, HTTPException
from fastapi.responses import Response

from ..store.budgets import BudgetInfo, list_budgets
from ..store.control import halt, resume, switch_state
from ..store.tokens import Caller
from .approvals import at
from .web import Config, FormViewer, PageViewer, redirect, render

pages = APIRouter()


def gauge(budget: BudgetInfo) -> dict[str, object]:
    """What a budget's gauge shows: used and reserved as whole percentages of the cap."""
    if budget.cap is None or budget.cap <= 0:
        return {"budget": budget, "used_pct": None, "held_pct": None}
    used = int(min(Decimal(100), budget.spent * 100 / budget.cap))
    held = int(min(Decimal(100 - used), budget.held * 100 / budget.cap))
    return {"budget": budget, "used_pct": used, "held_pct": held}


@pages.get("/control")
def control_page(viewer: PageViewer, config: Config, problem: str = "") -> Response:
    state = switch_state(config.db)
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
    (halt if action == "halt" else resume)(config.db, caller, reason.strip())
    return redirect("/control")


__all__ = ["gauge", "pages"]
