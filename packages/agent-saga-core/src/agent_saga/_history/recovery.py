"""Recovery: finish the rollback of sagas whose process died.

A saga is recovered when its log has no ``saga.end`` and its owner is provably gone (the owner's
lock was released, or its lease expired). The recovering process takes an exclusive lease on the
saga, keeps renewing it while it works (``keep``), re-reads the log under it (another worker may
have finished it meanwhile), then, newest step first:

* a step that committed (``step.done``) and has not been compensated is compensated by its
  registered compensator, with the same idempotency key the original process would have used;
  a compensation whose intent is logged without an outcome (a crash during rollback) is run
  again with that same key, so compensators must be idempotent per key;
* a step whose intent is durable but whose outcome is not is *probed* (did the call with this
  idempotency key land?): landed means compensate, not landed means nothing to undo, and "cannot
  tell" or no probe at all means the step is escalated to a human, never assumed;
* a REVERSIBLE step without a registered compensator needs nothing: its effect was local to the
  process that died;
* a committed IRREVERSIBLE step, a compensation that is not registered here (import the module
  that declares it), one given as a plain callable, or arguments that were not stored exactly,
  are escalated.

A suspended saga (``saga.suspended``, see ``_history/resume.py``) has no owner on purpose: it is
left alone until it is resumed, or rolled back as above once its ``expires_at`` has passed.

Every record of a recovery is written through the lease, which fences it: a worker whose lease
lapsed (it stalled past the ttl) and was taken over writes nothing more, so it cannot log, and
so cannot start, another compensation; the saga is then reported ``claimed_elsewhere``. Every
recovered saga ends with a durable ``saga.end`` record (``recovered: true``), so a second
run finds nothing to do. A crash during recovery leaves the saga unfinished with its owner gone,
so the next run picks it up again.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._engine.calls import call_to_completion
from .._engine.compensation import compensator_kwargs
from .._engine.runtime import Runtime
from .._errors import LeaseLostError
from .._log.codec import JSONValue, is_restorable, to_jsonable
from .._log.records import IN_SAGA, Entry, Kind, SagaStatus
from .._log.store import Lease
from .build import CompensationState, SagaView, StepOutcome, StepView, sagas
from .keep import KeptLease
from .sagareads import own_records, unfinished_sagas

LEASE_TTL = 300.0


@dataclass(frozen=True)
class StepRecovery:
    """What recovery did with one step."""

    ordinal: int
    tool: str
    action: str
    """``compensated``, ``not landed``, ``local``, ``escalated`` or ``failed``."""
    detail: str = ""


@dataclass(frozen=True)
class RecoveredSaga:
    """One saga that recovery settled."""

    saga_id: str
    name: str
    status: SagaStatus
    steps: tuple[StepRecovery, ...]

    @property
    def needs_human(self) -> bool:
        return self.status is SagaStatus.NEEDS_HUMAN


@dataclass(frozen=True)
class RecoveryReport:
    """The outcome of one recovery pass."""

    recovered: tuple[RecoveredSaga, ...] = ()
    live: tuple[str, ...] = ()
    """Unfinished sagas whose owner is still alive (left alone)."""
    claimed_elsewhere: tuple[str, ...] = ()
    """Unfinished sagas another recovery worker holds the lease of."""
    suspended: tuple[str, ...] = ()
    """Suspended sagas whose expiry has not passed (left alone, waiting to be resumed)."""

    @property
    def needs_human(self) -> tuple[RecoveredSaga, ...]:
        return tuple(s for s in self.recovered if s.needs_human)

    @property
    def settled(self) -> bool:
        """True when no recovered saga needs a human."""
        return not self.needs_human


def recover(runtime: Runtime, *, lease_ttl: float = LEASE_TTL) -> RecoveryReport:
    """Run one recovery pass over the unfinished sagas of ``runtime.store`` (found through its
    saga index, or by its server, in time proportional to them; else by reading the log)."""
    store = runtime.store
    recovered: list[RecoveredSaga] = []
    live: list[str] = []
    elsewhere: list[str] = []
    suspended: list[str] = []
    for view in unfinished_sagas(store):
        wait = _left_alone(runtime, view)
        if wait == "suspended":
            suspended.append(view.id)
        elif wait == "live":
            live.append(view.id)
        if wait is not None:
            continue
        lease = store.lease(f"recover-{view.id}", ttl=lease_ttl)
        if lease is None:
            elsewhere.append(view.id)
            continue
        try:
            with KeptLease(lease, lease_ttl):
                own = own_records(store, view.id)
                current = sagas(own)
                # Re-read under the lease: another worker, or a resume, may have moved it on.
                if current and _left_alone(runtime, current[0]) is None:
                    work = _SagaRecovery(runtime, lease, current[0], view.owner, len(own))
                    recovered.append(work.run())
        except LeaseLostError:  # it lapsed while this worker stalled; another took it over
            elsewhere.append(view.id)
        finally:
            lease.release()
    return RecoveryReport(tuple(recovered), tuple(live), tuple(elsewhere), tuple(suspended))


def _left_alone(runtime: Runtime, view: SagaView) -> str | None:
    """Why recovery leaves ``view`` alone (``"ended"``, ``"live"``, ``"suspended"``), or
    ``None`` when it must finish its rollback."""
    if view.status is SagaStatus.SUSPENDED:
        expires = view.expires_at
        if expires is None or runtime.clock.now() * 1000 < expires:
            return "suspended"
        return None
    if view.status is not SagaStatus.RUNNING:
        return "ended"
    if view.owner is not None and runtime.store.owner_alive(view.owner):
        return "live"
    return None


class _SagaRecovery:
    def __init__(
        self,
        runtime: Runtime,
        lease: Lease,
        view: SagaView,
        dead_owner: str | None,
        written: int,
    ) -> None:
        self.runtime = runtime
        self.lease = lease
        """Every record is written through it: refused once the lease is lost."""
        self.view = view
        self.dead_owner = dead_owner
        self.steps: list[StepRecovery] = []
        self.written = written
        """Records of this saga in the log so far (the terminal record commits to the count)."""

    def log(self, kind: Kind | str, data: dict[str, JSONValue], *, durable: bool) -> None:
        if kind == Kind.SAGA_END:
            data["records"] = self.written
        data = {**data, IN_SAGA: self.written}  # its place in the saga (see IN_SAGA)
        entry = Entry(str(kind), self.view.id, data, int(self.runtime.clock.now() * 1000))
        self.lease.append([entry], sync=durable)
        self.written += 1

    def run(self) -> RecoveredSaga:
        by = self.runtime.store.owner_id
        self.log(Kind.RECOVERY_BEGIN, {"by": by, "dead_owner": self.dead_owner}, durable=True)
        for step in sorted(self.view.steps, key=lambda s: s.ordinal, reverse=True):
            self.settle(step)
        escalated = [s for s in self.steps if s.action in ("escalated", "failed")]
        status = SagaStatus.NEEDS_HUMAN if escalated else SagaStatus.ROLLED_BACK
        self.log(
            Kind.SAGA_END,
            {
                "status": status.value,
                "recovered": True,
                "by": by,
                "compensated": [s.ordinal for s in self.steps if s.action == "compensated"],
                "failed": [s.ordinal for s in escalated],
            },
            durable=True,
        )
        return RecoveredSaga(self.view.id, self.view.name, status, tuple(self.steps))

    def note(self, step: StepView, action: str, detail: str = "") -> None:
        self.steps.append(StepRecovery(step.ordinal, step.tool, action, detail))
        if action == "escalated":
            self.log(
                Kind.RECOVERY_ESCALATED,
                {"ordinal": step.ordinal, "tool": step.tool, "reason": detail},
                durable=False,
            )

    def settle(self, step: StepView) -> None:
        state = step.compensation_state
        if step.outcome is StepOutcome.DONE:
            if state in (CompensationState.COMPENSATED, CompensationState.NOT_NEEDED):
                return
            if state is CompensationState.NONE_DECLARED:
                self.note(step, "escalated", f"{step.semantics} step committed; nothing undoes it")
                return
            if step.semantics == "reversible" and self.compensator(step) is None:
                self.note(step, "local", "REVERSIBLE: its effect ended with the process")
                return
            self.compensate(step, step.result)
        elif step.outcome is StepOutcome.UNKNOWN:
            self.probe_then_settle(step)
        elif step.outcome is StepOutcome.FAILED and step.probe is None:
            # The tool raised, yet its effect may have landed (a timeout after the charge), and
            # the process died before its rollback asked: a tool with a probe is asked now;
            # without a probe the step is taken to have had no effect (the manifest says so).
            if step.semantics != "reversible" and self.runtime.registry.probe(step.tool):
                self.probe_then_settle(step)
        elif step.outcome is StepOutcome.FAILED and state is CompensationState.STARTED:
            self.compensate(step, step.result)  # the probe said landed; finish its undo

    def probe_then_settle(self, step: StepView) -> None:
        if step.semantics == "reversible":
            self.note(step, "local", "REVERSIBLE: its effect ended with the process")
            return
        probe = self.runtime.registry.probe(step.tool)
        if probe is None:
            self.note(step, "escalated", "outcome unknown and the tool has no probe")
            return
        if not self.restorable(step):
            return
        try:
            answer = call_to_completion(probe, self.arguments(step, probe, None))
        except Exception as exc:
            self.note(step, "escalated", f"probe raised {type(exc).__name__}: {exc}")
            return
        self.log(
            Kind.STEP_PROBED,
            {"ordinal": step.ordinal, "tool": step.tool, "landed": _landed(answer)},
            durable=False,
        )
        if answer is None:
            self.note(step, "escalated", "outcome unknown: the probe cannot tell")
        elif answer is False:
            self.note(step, "not landed", "the probe says the call did not land")
        elif step.semantics == "irreversible":
            self.note(step, "escalated", "an IRREVERSIBLE call landed; nothing undoes it")
        else:
            self.compensate(step, None if answer is True else to_jsonable(answer))

    def compensator(self, step: StepView) -> Callable[..., Any] | None:
        name = step.compensation
        if name is None or step.compensation_recoverable is False:
            return None
        return self.runtime.registry.get(name)

    def restorable(self, step: StepView) -> bool:
        if is_restorable(step.args):
            return True
        self.note(step, "escalated", "its arguments were not stored exactly")
        return False

    def arguments(
        self, step: StepView, func: Callable[..., Any], result: JSONValue
    ) -> dict[str, Any]:
        args = step.args if isinstance(step.args, dict) else {}
        return compensator_kwargs(func, args, result, str(step.idempotency_key))

    def compensate(self, step: StepView, result: JSONValue) -> None:
        func = self.compensator(step)
        if func is None:
            why = (
                "its compensation is an in-process callable"
                if step.compensation_recoverable is False
                else f"compensator {step.compensation!r} is not registered here "
                "(import the module that declares it)"
            )
            self.note(step, "escalated", why)
            return
        if not self.restorable(step):
            return
        if "result" in inspect.signature(func).parameters and not is_restorable(result):
            self.note(step, "escalated", "the compensator needs a result that was not stored")
            return
        key = f"{step.idempotency_key}/compensate"
        self.log(
            Kind.COMP_INTENT,
            {
                "ordinal": step.ordinal,
                "tool": step.tool,
                "compensation": {"name": step.compensation, "recoverable": True},
                "idempotency_key": key,
            },
            durable=True,
        )
        try:
            args = step.args if isinstance(step.args, dict) else {}
            call_to_completion(func, compensator_kwargs(func, args, result, key))
        except Exception as exc:
            self.log(
                Kind.COMP_FAILED,
                {
                    "ordinal": step.ordinal,
                    "tool": step.tool,
                    "error": {"type": type(exc).__qualname__, "message": str(exc)[:2000]},
                },
                durable=False,
            )
            self.note(step, "failed", f"{type(exc).__name__}: {exc}")
            return
        self.log(Kind.COMP_DONE, {"ordinal": step.ordinal, "tool": step.tool}, durable=False)
        self.note(step, "compensated")


def _landed(answer: object) -> bool | None:
    if answer is None:
        return None
    return answer is not False
