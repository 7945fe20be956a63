"""The status page: the fleet's kill switch and its sagas by status, and, under
``agent-saga ui``, the home's own readiness (``agent-saga status``), its guarantees manifest
(``agent-saga guarantees``) and, on request, a verification of its whole log
(``agent-saga verify``). Certify reports and checkpoints are on the audit page.

Verifying reads the whole log, so it runs only when asked for (``?verify=yes``).
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from .approvals import at
from .control import shown_switch
from .web import Config, PageViewer, render

pages = APIRouter()


@pages.get("/status")
def status_page(
    viewer: PageViewer,
    config: Config,
    verify: Annotated[str, Query(max_length=10)] = "",
) -> Response:
    with config.db.transaction(write=False) as tx:
        counts = {str(s): int(n) for s, n in tx.all(
            "SELECT status, COUNT(*) FROM sagas GROUP BY status ORDER BY status"
        )}  # fmt: skip
    home = config.home
    readiness = guarantees = checked = None
    if home is not None:
        kit = home.kit()
        readiness = kit.status()
        guarantees = json.dumps(kit.guarantees(), indent=1, sort_keys=True, default=str)
        if verify == "yes":
            checked = kit.verify()
    return render(
        "status.html", viewer, switch=shown_switch(config), counts=counts, home=home,
        readiness=readiness, guarantees=guarantees, checked=checked, at=at,
    )  # fmt: skip


__all__ = ["pages"]
