"""The kit's side of predictive pre-execution: ``speculate``, ``aspeculate``, ``redeem``,
``aredeem`` (see :mod:`agent_saga._engine.speculation.ledger` for what they guarantee).

Lease keys and redeemed leases live in the home (``keys/leases/``, ``speculation/spent/``) for
a kit on a durable store, and in the process for a kit on the memory store. The speculation
modules load on first use, so ``import agent_saga`` stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._engine.runtime import Runtime

if TYPE_CHECKING:
    from .._engine.speculation.lease import Lease
    from .._engine.speculation.ledger import Speculation


SPECULATION_BEFORE = (
    "a step run ahead of confirmation (speculate) is REVERSIBLE only, gated and logged like any "
    "step; its result counts once, for the same saga, tool and arguments before its lease "
    "expires (a keyed BLAKE2s MAC under a key id, keys rotated); anything else is refused with the "
    "reason logged, and the call runs normally"
)
SPECULATION_NOT_CLAIMED = (
    "a step run ahead of confirmation takes effect before the model confirms it; one never "
    "redeemed is undone when its saga ends, but not after a crash (like any REVERSIBLE step)",
    "a result run ahead is held by its process: a lease presented after a restart, or in "
    "another process, yields nothing (its redemption mark still makes it single-use)",
    "a call through a framework adapter takes a result run ahead only through the one-phase "
    "seam (ToolCallGuard.run or arun, as the LangChain adapter calls it); a two-phase call "
    "(ToolCallGuard.begin) runs normally",
)
MEMORY_LEASES = (
    "leases of a kit on the memory store are single-use within its process only: their keys "
    "and redemption marks are not on disk"
)


class SpeculationMethods:
    """Mixed into :class:`~agent_saga.AgentKit`."""

    runtime: Runtime
    home: Path
    _speculation: Speculation | None = None

    @property
    def speculation(self) -> Speculation:
        """This kit's lease keys, redeemed leases and lease lifetime (``ttl``, seconds)."""
        if self._speculation is None:
            from .._engine.speculation.keys import FileLeaseKeys, MemoryLeaseKeys
            from .._engine.speculation.ledger import Speculation
            from .._engine.speculation.spent import FileSpentLeases, MemorySpentLeases

            if self.runtime.store.describe().get("durable"):
                self._speculation = Speculation(
                    self.runtime, FileLeaseKeys(self.home), FileSpentLeases(self.home)
                )
            else:
                self._speculation = Speculation(
                    self.runtime, MemoryLeaseKeys(), MemorySpentLeases()
                )
        return self._speculation

    def speculation_manifest(self, manifest: dict[str, Any]) -> None:
        """Add to ``manifest`` what speculation enforces and does not claim."""
        manifest["enforced_before_effect"].append(SPECULATION_BEFORE)
        manifest["not_claimed"].extend(SPECULATION_NOT_CLAIMED)
        if not self.runtime.store.describe().get("durable"):
            manifest["not_claimed"].append(MEMORY_LEASES)

    def speculate(self, tool: Any, /, *args: Any, **kwargs: Any) -> Lease:
        """Run a sync REVERSIBLE tool now, ahead of the model's confirmation; its lease.

        ``tool`` is a ``@tool`` function, or a framework tool whose adapter lets it run ahead
        (``agent_saga_langchain.saga_tool``), called with named arguments.

        The step is gated and logged like any step of the current transaction. The confirmed
        call (the tool called again with the same arguments in the same transaction, through
        its adapter for a framework tool, or :meth:`redeem` with the lease) gets its result
        once, while the lease holds
        (``kit.speculation.ttl`` seconds, 60 by default); a step never redeemed is undone
        when the transaction ends.

        Raises:
            SpeculationError: the tool is not REVERSIBLE (or not a tool, or async), there is
                no transaction of this kit, or its arguments cannot be bound by a lease.
        """
        from .._engine.speculation.run import speculate

        return speculate(self.speculation, tool, args, kwargs)

    async def aspeculate(self, tool: Any, /, *args: Any, **kwargs: Any) -> Lease:
        """:meth:`speculate` for an async tool."""
        from .._engine.speculation.run import aspeculate

        return await aspeculate(self.speculation, tool, args, kwargs)

    def redeem(self, lease: object, tool: Any, /, *args: Any, **kwargs: Any) -> Any:
        """Make the confirmed call of a sync tool, presenting ``lease``.

        Returns the speculated result when the lease holds for exactly this call (same saga,
        tool and arguments, unexpired, never redeemed); otherwise the call runs normally and
        the reason is logged (``speculation.refused``).
        """
        from .._engine.speculation.run import redeem

        return redeem(self.speculation, lease, tool, args, kwargs)

    async def aredeem(self, lease: object, tool: Any, /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`redeem` for an async tool."""
        from .._engine.speculation.run import aredeem

        return await aredeem(self.speculation, lease, tool, args, kwargs)
