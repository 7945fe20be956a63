"""The kit's side of offline mesh sagas: ``sync`` (see :mod:`agent_saga._mesh.sync`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .._config import configured_chain_key, find_config
from .._engine.runtime import Runtime
from .._errors import ConfigurationError

if TYPE_CHECKING:
    from .._mesh.sync import SyncReport
    from ..proofs._checkpoint import Checkpoint


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
        from .._mesh.sync import sync_home

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
