"""The audit page: each origin's tail and latest checkpoint, recent checkpoints, and on request
one origin's certify report (chain, checkpoint, every saga).

A certify report reads the origin's whole stored log, so it runs only when asked for
(``?certify=ORIGIN``), never on a plain visit.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from ..store.audit import certify
from ..store.checkpoints import list_checkpoints
from ..store.ingest import origin_state
from ..store.tokens import NAME
from .approvals import at
from .web import Config, PageViewer, render

pages = APIRouter()


@pages.get("/audit")
def audit_page(
    viewer: PageViewer,
    config: Config,
    certify_origin: Annotated[str, Query(alias="certify", max_length=128)] = "",
) -> Response:
    with config.db.transaction(write=False) as tx:
        names = [str(r[0]) for r in tx.all("SELECT origin FROM origins ORDER BY origin")]
        states = [origin_state(tx, name) for name in names]
    checkpoints = list_checkpoints(config.db, None, 20)
    report = None
    problem = ""
    if certify_origin:
        if NAME.fullmatch(certify_origin) and certify_origin in names:
            report = certify(config.db, certify_origin)
        else:
            problem = "no such origin"
    return render(
        "audit.html", viewer, 404 if problem else 200, states=states, checkpoints=checkpoints,
        report=report, problem=problem, at=at,
    )  # fmt: skip


__all__ = ["pages"]
