"""Fleet budgets: agents reserve, commit and release; admins set caps; anyone allowed reads."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Query

from ..store import budgets as store
from ..store.budgets import BudgetRefused
from ..store.tokens import Caller
from .common import CONFLICT, router
from .context import ServerContext, context
from .models import (
    BudgetList,
    BudgetOut,
    CapIn,
    HoldList,
    HoldOut,
    ReserveIn,
    ReserveOut,
    SettleIn,
    SettleOut,
    UsageOut,
)
from .security import allow

api = router("budgets")
BudgetName = Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,128}$")]
HoldId = Annotated[str, Path(pattern=r"^[0-9a-f]{24}$")]


@api.get("/budgets", response_model=BudgetList)
def list_budgets(
    caller: Annotated[Caller, Depends(allow("admin", "auditor", "agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> BudgetList:
    """Every budget: its server cap (if set), spent and held over all accounts."""
    return BudgetList(
        budgets=[
            BudgetOut(
                name=b.name,
                cap=None if b.cap is None else str(b.cap),
                spent=str(b.spent),
                held=str(b.held),
            )
            for b in store.list_budgets(ctx.db)
        ]
    )


@api.put("/budgets/{budget}", response_model=BudgetOut)
def put_cap(
    budget: BudgetName,
    body: CapIn,
    caller: Annotated[Caller, Depends(allow("admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> BudgetOut:
    """Set (or clear, with null) the fleet-wide cap of a budget; agents' own limits still apply."""
    from ..store.control import audit

    store.set_cap(ctx.db, budget, None if body.cap is None else Decimal(body.cap))
    with ctx.db.transaction() as tx:
        audit(tx, caller, "budget.cap", {"budget": budget, "cap": body.cap})
    found = next(b for b in store.list_budgets(ctx.db) if b.name == budget)
    return BudgetOut(name=budget, cap=body.cap, spent=str(found.spent), held=str(found.held))


@api.post("/budgets/{budget}/reserve", response_model=ReserveOut, responses=CONFLICT)
def reserve(
    budget: BudgetName,
    body: ReserveIn,
    caller: Annotated[Caller, Depends(allow("agent"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> ReserveOut:
    """Hold an amount if ``spent + held + amount <= cap``; ``hold_id`` null when it does not
    fit. Retrying with the same ``hold_id`` returns the same hold."""
    assert caller.origin is not None
    try:
        answer = store.reserve(
            ctx.db, budget, hold_id=body.hold_id, account=body.account,
            amount=Decimal(body.amount), limit=Decimal(body.limit), origin=caller.origin,
            saga=body.saga, ordinal=body.ordinal, keep_spent=body.keep_spent, until=body.until,
        )  # fmt: skip
    except BudgetRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return ReserveOut(
        hold_id=answer.hold_id, spent=str(answer.spent), held=str(answer.held), cap=str(answer.cap)
    )


@api.post("/budgets/{budget}/holds/{hold_id}", response_model=SettleOut)
def settle(
    budget: BudgetName,
    hold_id: HoldId,
    body: SettleIn,
    caller: Annotated[Caller, Depends(allow("agent", "admin"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> SettleOut:
    """Commit (``commit: true``: held becomes spent) or release a hold. Idempotent."""
    origin = caller.origin if caller.scope == "agent" else None
    try:
        done = store.settle(ctx.db, budget, hold_id, commit=body.commit, origin=origin)
    except BudgetRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    return SettleOut(settled=done)


@api.get("/budgets/{budget}/usage", response_model=UsageOut)
def usage(
    budget: BudgetName,
    account: Annotated[str, Query(min_length=1, max_length=300)],
    caller: Annotated[Caller, Depends(allow("agent", "admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> UsageOut:
    """Spent and held of one account of a budget now."""
    spent, held = store.usage(ctx.db, budget, account)
    return UsageOut(budget=budget, account=account, spent=str(spent), held=str(held))


@api.get("/budgets/{budget}/holds", response_model=HoldList)
def holds(
    budget: BudgetName,
    caller: Annotated[Caller, Depends(allow("agent", "admin", "auditor"))],
    ctx: Annotated[ServerContext, Depends(context)],
) -> HoldList:
    """Outstanding holds (an agent token sees its own origin's)."""
    origin = caller.origin if caller.scope == "agent" else None
    return HoldList(
        holds=[
            HoldOut(
                hold_id=h.hold_id,
                account=h.account,
                amount=str(h.amount),
                origin=h.origin,
                saga=h.saga,
                ordinal=h.ordinal,
            )
            for h in store.holds(ctx.db, budget, origin)
        ]
    )
