"""The kit's side of offline mesh sagas: ``sync`` (see :mod:`agent_saga.proofs._mesh.sync`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import configured_chain_key, find_config
from .._engine.runtime import Runtime
from .._errors import ConfigurationError

if TYPE_CHECKING:
    from ..proofs._checkpoint import Checkpoint
    from ..proofs._mesh.sync import SyncReport


MESH_AFTER = (
    "merging devices' logs (agent-saga merge, kit.sync) keeps every record its origin's key "
    "signed, in any merge order, and rejects with the reason what does not verify; conflicts "
    "between devices (a double compensation, an effect after a fleet halt, a fleet budget "
    "overspent, a device that signed two histories) are listed by certify, never resolved"
)
MESH_NOT_CLAIMED = (
    "between devices that had not seen each other's records, the merged order is that of "
    "their clocks: a device whose clock is wrong moves its records among the others' (never "
    "before records it had seen)",
    "without a list of trusted origin keys (--trust), merge accepts any origin whose log and "
    "checkpoints agree with its own key: a made-up device is merged as a new origin (never as "
    "an existing one)",
    "a device's records after its latest checkpoint are merged only once it signs another "
    "(kit.sync and the kit's close do)",
    "devices sync through files; each merge reads every origin's log in full",
)


def mesh_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with what merging devices' logs guarantees and does not claim."""
    manifest["guaranteed_after"].append(MESH_AFTER)
    manifest["not_claimed"].extend(MESH_NOT_CLAIMED)
    return manifest


class MeshMethods:
    """Mixed into :class:`~agent_saga.AgentKit`."""

    runtime: Runtime
    home: Path
    _chain_key: bytes | None
    checkpoint: Callable[[], Checkpoint]

    def sync(self, directory: str | os.PathLike[str]) -> SyncReport:
        """Sync this device with a mesh directory: sign a checkpoint of the log, merge the log
        into the mesh, then record durably what the device has now seen of the other origins
        (a ``mesh.seen`` record). When the merged view ends in a fleet halt, this kit's kill
        switch is engaged.

        Raises:
            ConfigurationError: the kit's log is not the file store in its home, or
                checkpoints are off.
        """
        from ..proofs._mesh.sync import sync_home

        if self.runtime.store.kind != "file":
            raise ConfigurationError("sync needs the file store in the home (a device's log)")
        self.checkpoint()
        key = self._chain_key or configured_chain_key(find_config())
        runtime = self.runtime
        return sync_home(
            directory,
            home=self.home,
            store=runtime.store,
            kill_switch=runtime.kill_switch,
            clock=runtime.clock,
            key=key,
        )
