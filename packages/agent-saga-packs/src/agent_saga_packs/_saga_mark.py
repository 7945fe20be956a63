"""Which saga made an effect: a digest of the running saga's id, kept next to the step's key.

A step's idempotency key names one step; it does not say which saga the step belongs to. A
compensation that finds leftovers in a container it undoes (an object in a bucket, a policy on
a role, a commit on a branch) removes them only when they carry the same saga mark as the
container: the saga's own effects whose undo failed go with it; another saga's, committed and
relied upon, stay, and the saga waits for a human.
"""

from __future__ import annotations

import hashlib

from agent_saga import current_saga


def saga_mark() -> str | None:
    """A 32-hex digest of the running saga's id (``None`` outside any saga)."""
    saga = current_saga()
    if saga is None:
        return None
    return hashlib.sha256(f"agent-saga-packs\x00{saga.id}".encode()).hexdigest()[:32]
