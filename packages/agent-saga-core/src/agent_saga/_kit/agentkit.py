"""AgentKit: the one-object SDK (the default kit behind the module-level API is in ``defaults``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._clock import Clock, IdSource, RandomIds, SystemClock
from .._config import find_config, resolve_home
from .._engine.compensation import DEFAULT_REGISTRY, CompensatorRegistry
from .._engine.events import Observers
from .._engine.observe import Observer
from .._engine.runtime import Runtime, StepApprover
from .._engine.saga import Saga
from .._engine.spec import ToolRegistry
from .._engine.tool import _declare
from .._engine.transaction import Transaction
from .._errors import AgentSagaError, ConfigurationError
from .._gate.decisions import Gate, Rule
from .._gate.killswitch import KillSwitch
from .._log.filestore import FileLogStore
from .._log.records import Entry, Kind, Semantics
from .._log.store import LogStore, VerifyReport
from .connect import Connection, connect, server_setting
from .manifest import Status, guarantees, status
from .mesh import MeshMethods, mesh_manifest
from .speculation import SpeculationMethods
from .stores import (
    configured_approvals,
    default_switch,
    open_store,
    passkey_setting,
    refuse_votes_without_passkey,
    trust_checkpoints,
)
from .version import __version__

if TYPE_CHECKING:
    from .._approvals.wait import Approvals
    from .._history.recovery import RecoveryReport
    from ..proofs._checkpoint import Checkpoint
    from ..proofs._checkpoints import Checkpointer

F = TypeVar("F", bound=Callable[..., Any])


class AgentKit(SpeculationMethods, MeshMethods):
    """Store, gate, kill switch and compensators in one object.

    With no arguments the log is the durable file store under the agent-saga home
    (``./.agent-saga`` unless ``AGENT_SAGA_HOME`` says otherwise) and the kill switch is the
    ``HALT`` file there. An in-memory store must be asked for: ``AgentKit(store="memory")``.

    Args:
        home: the agent-saga home (log, kill switch).
        store: ``"file"`` (the durable file store), ``"memory"``, a ``postgresql://`` URL
            (fleet mode; needs the ``postgres`` extra) or a :class:`LogStore`. ``None`` means
            ``$AGENT_SAGA_STORE``, else ``store`` in the project configuration, else ``"file"``.
        rules: gate rules; every call must pass all of them.
        kill_switch: defaults to the ``HALT`` file in the home (a row beside a PostgreSQL log).
        clock, ids: time and saga-id sources (inject fakes in tests).
        registry: compensators by name (defaults to the process-wide registry).
        fast_path: buffer REVERSIBLE steps' records until the next durable record.
        chain_key: makes the hash chain keyed (HMAC-SHA-256) for stores this kit opens.
            ``None`` means the key in the file named by ``$AGENT_SAGA_CHAIN_KEY_FILE`` or
            ``chain_key_file`` in the configuration, if either is set.
        tools: where the tools this kit declares are listed (the manifest and ``status()`` cover
            them and every tool that has run in this kit's sagas).
        checkpoints: publish signed checkpoints of a durable log in the background, every
            ``checkpoint_every`` records or ``checkpoint_interval`` seconds and at
            :meth:`close` (see ``docs/proofs.md``); ``False`` turns this off.
        approvals: how calls the gate marks ``RequireApproval`` wait for humans (see
            ``docs/approvals.md``). ``None``: enabled with the configuration's ``approvers``
            when it lists some, else such calls are refused.
        observers: told of every saga, step, refusal and compensation (tracing, metrics; see
            :class:`agent_saga.Observer`); more can be added with :meth:`observe`. An observer
            that raises never changes a transaction: the error is counted in
            ``kit.observers.errors``.
        name: how messages name this kit (default: its home). A tool declared with
            :meth:`tool` belongs to this kit: called inside another kit's transaction it is
            refused, and the refusal names both kits.
        server: a control plane's URL (``$AGENT_SAGA_SERVER`` when ``None``): the log stays
            local and is shipped there in the background; the kill switch, approvals and
            budgets come from the server (needs ``agent-saga-server``; see ``connect.py``).
        token: the agent token for ``server``.
        require_passkey: count only passkey (WebAuthn) votes, each checked against the arguments
            about to run: the control plane's approvals with ``server``, else
            ``Approvals(require_passkey=True)`` with the configuration's ``approvers``. ``None``:
            ``require_passkey`` in the configuration, else ``False``. Approvals given with
            ``approvals=`` must then count only passkey votes (:class:`ConfigurationError`).
    """

    def __init__(
        self,
        *,
        home: str | os.PathLike[str] | None = None,
        store: LogStore | str | None = None,
        rules: Iterable[Rule] = (),
        kill_switch: KillSwitch | None = None,
        clock: Clock | None = None,
        ids: IdSource | None = None,
        registry: CompensatorRegistry | None = None,
        fast_path: bool = True,
        chain_key: bytes | None = None,
        tools: ToolRegistry | None = None,
        checkpoints: bool = True,
        checkpoint_every: int = 1000,
        checkpoint_interval: float = 60.0,
        approvals: Approvals | None = None,
        observers: Iterable[Observer] = (),
        name: str | None = None,
        server: str | None = None,
        token: str | None = None,
        require_passkey: bool | None = None,
    ) -> None:
        self.home: Path = resolve_home(home)
        self.name = name or str(self.home)
        self._chain_key = chain_key
        clock = clock or SystemClock()
        config = functools.cache(find_config)  # the project's file is parsed once per kit
        url = server_setting(server, config)
        passkeys = passkey_setting(require_passkey, config)
        if passkeys and approvals is not None:
            refuse_votes_without_passkey(approvals)
        self.connection: Connection | None = (
            None
            if url is None
            else connect(url, token=token, home=self.home, require_passkey=passkeys)
        )
        try:
            opened = open_store(store, self.home, chain_key, config)
        except BaseException:
            if self.connection is not None:
                self.connection.close()  # its kill switch stream is already running
            raise
        trust_checkpoints(opened, self.home)
        approver: StepApprover | None = approvals
        if approver is None and self.connection is not None:
            approver = self.connection.approvals
        if approver is None:
            approver = configured_approvals(passkeys, config)
        if self.connection is not None:
            rules = self.connection.rules(list(rules))
            kill_switch = kill_switch or self.connection.kill_switch
        self._own_switch = kill_switch is None
        self.runtime = Runtime(
            store=opened,
            gate=Gate(rules),
            kill_switch=kill_switch or default_switch(opened, self.home),
            clock=clock,
            ids=ids or RandomIds(clock),
            registry=registry or DEFAULT_REGISTRY,
            tools=tools or ToolRegistry(self.name),
            fast_path=fast_path,
            approvals=approver,
            observers=Observers(observers),
        )
        self.checkpointer: Checkpointer | None = None
        # Checkpoints are files in the real home: not for a log in memory or on a simulated disk.
        simulated = isinstance(opened, FileLogStore) and not opened.on_real_files
        if checkpoints and opened.kind != "memory" and not simulated:
            from ..proofs._checkpoints import (
                Checkpointer,  # cryptography loads on the first checkpoint
            )

            poll = 1.0 if isinstance(opened, FileLogStore) else checkpoint_interval
            self.checkpointer = Checkpointer(
                self.home,
                opened,
                every=checkpoint_every,
                interval=checkpoint_interval,
                poll=min(poll, checkpoint_interval),
            )
            self.checkpointer.start()
        if self.connection is not None:
            try:
                self.connection.attach(opened, self.home)
            except BaseException:
                self.close()  # nothing of this kit stays open
                raise

    @property
    def store(self) -> LogStore:
        return self.runtime.store

    @property
    def observers(self) -> Observers:
        """This kit's observers, and how many of their calls raised (``errors``)."""
        return self.runtime.observers

    def observe(self, observer: Observer) -> Observer:
        """Tell ``observer`` about every saga of this kit started from now on; returns it."""
        self.runtime.observers.add(observer)
        return observer

    @overload
    def tool(self, func: F, /) -> F: ...
    @overload
    def tool(
        self,
        func: F,
        /,
        *,
        name: str | None = None,
        semantics: Semantics | str | None = None,
        compensate: object = None,
        probe: Callable[..., Any] | None = None,
        redact: Iterable[str] = (),
    ) -> F: ...
    @overload
    def tool(
        self,
        /,
        *,
        name: str | None = None,
        semantics: Semantics | str | None = None,
        compensate: object = None,
        probe: Callable[..., Any] | None = None,
        redact: Iterable[str] = (),
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        func: F | None = None,
        /,
        *,
        name: str | None = None,
        semantics: Semantics | str | None = None,
        compensate: object = None,
        probe: Callable[..., Any] | None = None,
        redact: Iterable[str] = (),
    ) -> F | Callable[[F], F]:
        """Declare a tool; same contract as :func:`agent_saga.tool`."""
        return _declare(
            func,
            self.runtime.tools,
            self.runtime.registry,
            name=name,
            semantics=semantics,
            compensate=compensate,
            probe=probe,
            redact=redact,
            owned=True,
        )

    @overload
    def compensator(self, name: str) -> Callable[[F], F]: ...
    @overload
    def compensator(self, name: str, func: F) -> F: ...

    def compensator(self, name: str, func: F | None = None) -> F | Callable[[F], F]:
        """Register a compensator by name in this kit's registry."""
        if func is None:
            return self.runtime.registry.compensator(name)
        return self.runtime.registry.compensator(name, func)

    @overload
    def transaction(self, name: F, /) -> F: ...
    @overload
    def transaction(
        self, name: str | None = None, /, *, resume: str | None = None
    ) -> Transaction: ...

    def transaction(
        self, name: str | F | None = None, /, *, resume: str | None = None
    ) -> Transaction | F:
        """A transaction: ``with kit.transaction("book"):``, ``async with``, or a decorator.

        ``resume=saga_id`` continues a saga a block left open with :meth:`Saga.suspend` (in
        an earlier request or another process) instead of starting one; see
        ``docs/guarantees.md``. Entering it raises :class:`ResumeError` when that saga does not
        exist, has ended, is running elsewhere or has expired.
        """
        runtime = self.runtime
        if callable(name):
            return Transaction(lambda: runtime)(name)
        return Transaction(lambda: runtime, name, resume=_resumer(resume))

    def halt(self, reason: str) -> None:
        """Engage the kill switch: every agent sharing this home refuses effects from now on."""
        self.runtime.kill_switch.halt(reason, at=self.runtime.clock.now())
        self._control(Kind.HALT, {"reason": reason})

    def resume(self) -> None:
        """Release the kill switch (after its record is durable, so no release goes unlogged)."""
        self._control(Kind.RESUME, {})
        self.runtime.kill_switch.resume()

    def _control(self, kind: Kind, data: dict[str, Any]) -> None:
        entry = Entry(kind.value, None, data, int(self.runtime.clock.now() * 1000))
        self.runtime.store.append([entry], sync=True)

    def recover(self, *, lease_ttl: float = 300.0) -> RecoveryReport:
        """Finish the rollback of every saga whose owner died (see ``docs/guarantees.md``).

        Compensators and probes are looked up by name in this kit's registry: import the
        modules that declare them first. ``lease_ttl`` bounds how long a saga stays claimed by
        a recovery worker that died mid-way on stores whose leases expire by time (PostgreSQL);
        on the file store a dead worker's claim ends with its process. Budget reservations left
        by dead processes are then settled from their sagas' outcome (``Budget.reconcile``).
        """
        from .._history.budgets import settle_abandoned
        from .._history.recovery import recover  # recovery is not needed to run transactions

        report = recover(self.runtime, lease_ttl=lease_ttl)
        # Reservations of the sagas just finished (or of sagas that ended before their
        # process could settle them) are committed or released from the log's verdict.
        settle_abandoned(self.runtime.gate.rules, self.runtime.store, self.home)
        return report

    def verify(self) -> VerifyReport:
        """Re-verify the whole log as stored now."""
        return self.runtime.store.verify()

    def status(self) -> Status:
        """Readiness, computed now: never ready when halted or when a signal cannot be read."""
        report = status(self.runtime, self.runtime.tools.specs())
        if self.connection is not None:
            problems = self.connection.health()
            checks = {**report.checks, "server": "; ".join(problems) or "ok"}
            report = Status(report.ready and not problems, (*report.reasons, *problems), checks)
        if self.checkpointer is None:
            return report
        health, problem = self.checkpointer.readiness()
        checks = {**report.checks, "checkpoints": health}
        if problem is None:
            return Status(report.ready, report.reasons, checks)
        return Status(False, (*report.reasons, problem), checks)

    def guarantees(self) -> dict[str, Any]:
        """The versioned, JSON-serialisable manifest of this configuration (see docs)."""
        manifest = guarantees(self.runtime, self.runtime.tools.specs(), __version__)
        approvals = self.runtime.approvals
        manifest["approvals"] = None if approvals is None else approvals.describe()
        if manifest["approvals"] is not None:  # what a vote rests on is a limit too
            manifest["not_claimed"].extend(manifest["approvals"].get("not_claimed", []))
        manifest["checkpoints"] = (
            None if self.checkpointer is None else self.checkpointer.describe()
        )
        self.speculation_manifest(manifest)
        if self.connection is not None:
            manifest["server"] = self.connection.describe()
            manifest["not_claimed"].extend(self.connection.not_claimed())
        return mesh_manifest(manifest)

    def checkpoint(self) -> Checkpoint:
        """Publish a signed checkpoint of every record so far (``checkpoints/latest.note``).

        Raises:
            ConfigurationError: checkpoints are off for this kit (or its store is in memory).
            ForkError: the log no longer extends the latest checkpoint (it was rewritten).
        """
        if self.checkpointer is None:
            raise ConfigurationError("checkpoints are off for this kit")
        self.runtime.store.sync()
        return self.checkpointer.checkpoint()

    def close(self) -> None:
        """Checkpoint, then flush and close the store (and the kill switch, when this kit
        opened it)."""
        try:
            if self.checkpointer is not None:
                try:
                    self.runtime.store.sync()  # the last checkpoint covers every record
                except (AgentSagaError, OSError):
                    self.checkpointer.close(final=False)  # closing the store reports it
                else:
                    self.checkpointer.close()
            if self.connection is not None:
                self.connection.close()  # after the last checkpoint, so it is shipped too
            self.runtime.store.close()
        finally:
            close_switch = getattr(self.runtime.kill_switch, "close", None)
            if self._own_switch and callable(close_switch):
                close_switch()

    def __enter__(self) -> AgentKit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resumer(saga_id: str | None) -> Callable[[Runtime], Saga] | None:
    """How a transaction made with ``resume=saga_id`` gets its saga (read from the log)."""
    if saga_id is None:
        return None
    if not isinstance(saga_id, str) or not saga_id:
        raise ConfigurationError(f"resume= takes a saga id, got {saga_id!r}")

    def resume(runtime: Runtime) -> Saga:
        from .._history.resume import resume_saga  # history loads on first use

        return resume_saga(runtime, saga_id)

    return resume
