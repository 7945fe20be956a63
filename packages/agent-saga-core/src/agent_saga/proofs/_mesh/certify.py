"""certify on a merged log: every origin re-checked, every saga, and the conflicts.

The findings are those of certify on one log (:func:`~agent_saga.proofs._certify.certify_records`)
over the merged view, plus the conflicts of :mod:`.conflicts`. A saga still running at its
device's last sync is a WARNING: a device's processes cannot be checked from a merged copy of its
log. The certificate is signed with the mesh directory's own key (``keys/checkpoint.key`` in the
mesh, created on first use); no checkpoint of the merged view is published, since its order can
change as more records arrive.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..._history.build import build_history
from ..._log.store import VerifyReport
from .._certify import Finding, certificate, certify_records
from .._note import NoteVerifier
from .._signing import home_signer
from .conflicts import FleetBudget, find_conflicts, saga_origins
from .view import merged_view

__all__ = ["certify_merged"]


def certify_merged(
    directory: str | os.PathLike[str],
    *,
    budgets: Sequence[FleetBudget] = (),
    key: bytes | None = None,
    trusted: Collection[NoteVerifier] | None = None,
) -> tuple[dict[str, Any], list[Finding]]:
    """Check the mesh at ``directory``; returns the signed certificate and its findings.

    ``budgets`` are fleet-wide limits to check the effects of every origin against.

    Raises:
        ConfigurationError: ``directory`` is not a mesh directory.
    """
    mesh = Path(directory)
    view = merged_view(mesh, key=key, trusted=trusted)
    records = view.renumbered()
    history = build_history(records)
    origins = saga_origins(view.records)
    findings = find_conflicts(view, history.sagas, budgets)
    chain = VerifyReport(True, len(records))
    for found in certify_records(records, chain, None, lambda _: True):
        if found.check == "in_progress" and found.saga is not None:
            where = ", ".join(origins.get(found.saga, ["?"]))
            message = (
                f"saga was still running on origin {where} at its last sync (a device's "
                "process cannot be checked from a merged log)"
            )
            found = replace(found, message=message)  # noqa: PLW2901 - the same finding, reworded
        findings.append(found)
    cert = certificate(records, findings, None, home_signer(mesh), int(time.time()))
    return cert, findings
