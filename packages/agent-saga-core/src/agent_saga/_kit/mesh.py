"""The kit's side of offline mesh sagas: ``sync`` through a mesh directory (see
:mod:`agent_saga.proofs._mesh.sync`) and ``sync_server`` through a control plane's ingest.

Through a control plane, the server keeps each origin's records as a grow-only set keyed by
``(origin, seq)`` (its ingest skips a record it holds when identical and refuses one that
differs), so any order of devices' syncs, repeated or partial, leaves it holding each device's
log up to its last sync, and certify runs there per origin. An agent token reads only its own
origin: a device learns a fleet halt from the server, not the other devices' records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import configured_chain_key, find_config
from .._engine.runtime import Runtime
from .._errors import ConfigurationError

if TYPE_CHECKING:
    from ..proofs._checkpoint import Checkpoint
    from ..proofs._mesh.sync import SyncReport
    from .connect import Connection


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
    "a merge through files reads every origin's log in full",
    "a device that syncs through a control plane (kit.sync_server, agent-saga sync --server) "
    "gives it its log and learns a fleet halt there, not the other devices' records",
)


@dataclass(frozen=True)
class ServerSyncReport:
    """What a sync through a control plane's ingest did."""

    server: str
    origin: str | None
    """The server's name for this device (its token's origin)."""
    records: int
    """Records of this device's log, all covered by the checkpoint it signed for the sync."""
    shipped: int
    """Records of it the server holds now."""
    checkpoint: int
    """The size of the latest checkpoint of it the server accepted."""
    problem: str | None
    """Why the server does not hold all of it (``None`` when it does)."""
    fleet_halt: str | None
    """The reason of the fleet halt in force on the server (this device is now halted)."""

    @property
    def ok(self) -> bool:
        return self.problem is None


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
    connection: Connection | None

    def sync_server(
        self, server: str, *, token: str | None = None, timeout: float = 30.0
    ) -> ServerSyncReport:
        """Sync this device through a control plane's ingest: sign a checkpoint of the log,
        ship every record and that checkpoint to the server (``POST /v1/origins/{origin}/
        records``, resuming where its copy ends), wait up to ``timeout`` seconds for it to hold
        them all, and engage this kit's kill switch when the fleet is halted there.

        ``token`` is an agent token (its origin names this device on the server); without it,
        the token file the configuration names is read, as for ``AgentKit(server=...)``.

        Raises:
            ConfigurationError: the kit's log is not the file store in its home, it already
                ships to a control plane, its chain is keyed, or the token is refused.
        """
        from .connect import connect

        if self.runtime.store.kind != "file":
            raise ConfigurationError("sync needs the file store in the home (a device's log)")
        if self.connection is not None:
            raise ConfigurationError("this kit already ships its log to a control plane")
        size = self.checkpoint().size
        connection = connect(server, token=token, home=self.home)
        try:
            connection.attach(self.runtime.store, self.home)
            state = connection.drain(size, timeout)
            halt = connection.kill_switch.state()
        finally:
            connection.close()
        problem = None
        if not state.get("drained"):
            why = state.get("problem") or state.get("last_error") or f"not within {timeout:g} s"
            problem = f"the server holds {state.get('shipped_seq', 0)} of {size} records: {why}"
        fleet_halt = halt.reason if halt.halted and halt.readable else None
        kill_switch = self.runtime.kill_switch
        if fleet_halt is not None and not kill_switch.state().halted:
            now = self.runtime.clock.now()
            kill_switch.halt(f"fleet halt (control plane {server}): {fleet_halt}", at=now)
        return ServerSyncReport(
            server,
            state.get("origin"),
            size,
            int(state.get("shipped_seq") or 0),
            int(state.get("server_checkpoint_size") or 0),
            problem,
            fleet_halt,
        )

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
