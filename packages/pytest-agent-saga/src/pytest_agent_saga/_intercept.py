"""A log store that lets the chaos runner act between log writes.

It wraps any :class:`agent_saga.LogStore` and delegates everything to it. Before and after each
``append`` it calls hooks with the entries or the sealed records, so a fault can be injected at
an exact point of a transaction: before a step's intent is written (the step's effect has not
run), after its outcome is written (the effect ran), or at any write when a child process is
to be killed. It only uses the public store protocol; the engine cannot tell it from the store
it wraps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_saga import Entry, LogStore, Record, VerifyReport
    from agent_saga._log.store import Lease

BeforeHook = Callable[[int, "Sequence[Entry]"], None]
"""Called with the 1-based number of the write about to happen and its entries."""
AfterHook = Callable[[int, "list[Record]"], None]
"""Called with the number of the write that just completed and the records it sealed."""


class InterceptingStore:
    """Delegates to ``inner``; calls ``before`` and ``after`` around every append.

    A hook that raises makes the append raise: before the write, nothing of that call is
    stored; after it, the records are stored and the caller still sees the exception.
    """

    def __init__(
        self,
        inner: LogStore,
        *,
        before: BeforeHook | None = None,
        after: AfterHook | None = None,
    ) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.owner_id = inner.owner_id
        self.before = before
        self.after = after
        self.writes = 0
        """Appends that completed."""
        self.last: Record | None = None
        """The last record this store appended."""

    def append(self, entries: Sequence[Entry], *, sync: bool) -> list[Record]:
        number = self.writes + 1
        if self.before is not None:
            self.before(number, entries)
        records = self.inner.append(entries, sync=sync)
        self.writes = number
        if records:
            self.last = records[-1]
        if self.after is not None:
            self.after(number, records)
        return records

    def sync(self) -> None:
        self.inner.sync()

    def records(self) -> Iterator[Record]:
        return self.inner.records()

    def verify(self) -> VerifyReport:
        return self.inner.verify()

    def health(self) -> list[str]:
        return self.inner.health()

    def describe(self) -> dict[str, object]:
        return self.inner.describe()

    def owner_alive(self, owner_id: str) -> bool:
        return self.inner.owner_alive(owner_id)

    def lease(self, name: str, *, ttl: float) -> Lease | None:
        return self.inner.lease(name, ttl=ttl)

    def close(self) -> None:
        self.inner.close()
