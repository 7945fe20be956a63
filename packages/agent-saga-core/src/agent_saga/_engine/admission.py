"""Whether a step may run: the gate half of a running saga.

:class:`SagaAdmission` is the part of a :class:`~agent_saga._engine.saga.Saga` that decides on a
call before its intent is logged: the call's kit, the kill switch, an earlier failure that
dooms the saga, the gate's rules and approvals, the compensation, and budget reservations. Every
refusal is logged as ``gate.refused`` and raised; the tool's body never runs. A saga that has
ended (or been suspended) takes no more steps: :meth:`SagaAdmission.check_open` raises
:class:`SagaEndedError` and logs nothing, since a record after the saga's end would itself be a
finding for ``certify``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from .._errors import ArgumentsRefused, GateRefused, HaltedError, SagaEndedError
from .._gate.decisions import Deny, RequireApproval, ToolCall
from .._log.codec import JSONValue
from .._log.records import Kind, Semantics
from .approval import ask_approval
from .compensation import resolve_compensator
from .report import StepRef
from .runtime import Runtime
from .spec import ToolSpec
from .state import SagaState
from .steps import Doom, Step


class SagaAdmission(SagaState):
    """A saga's gate: decides on each call, logs refusals. Not built directly (see ``Saga``)."""

    def __init__(self, runtime: Runtime, saga_id: str, name: str) -> None:
        super().__init__(runtime, saga_id, name)
        self._doom = Doom()
        self._halt_state = runtime.kill_switch.state
        self._gatekeeper = runtime.gate
        self.closed: str | None = None
        """Why the saga takes no more steps (``None`` while it is open): it ended or was
        suspended. Set when its transaction starts to leave, before any end record."""

    def check_open(self, tool: str) -> None:
        """Raise :class:`SagaEndedError` when the saga takes no more steps (nothing is logged)."""
        if self.closed is not None:
            raise SagaEndedError(
                f"{tool} was not run: saga {self.id} ({self.name!r}) has {self.closed}; a run "
                "that outlives its transaction cannot add steps to it"
            )

    def _gate(self, step: Step, jsonable_args: JSONValue) -> Callable[..., Any] | None:
        """Decide on the call; returns the resolved compensator. Raises on any refusal."""
        spec, ref = step.spec, step.ref
        owner = spec.owner
        if owner is not None and owner is not self.runtime.tools:
            reason = (
                f"it was declared on kit {owner.label!r} but called in a transaction of kit "
                f"{self.runtime.tools.label!r}; a tool runs only under its own kit's gate, "
                "kill switch and log"
            )
            self._refuse(ref, spec, jsonable_args, "kit", reason)
        halt = self._halt_state()
        if halt.halted:
            self._refuse(ref, spec, jsonable_args, "kill_switch", halt.reason)
        if self._doom.cause is not None:
            cause = self._doom.refuses(step.scopes)
            if cause is not None:
                reason = f"an earlier step failed ({type(cause).__name__}: {cause}); rolling back"
                self._refuse(ref, spec, jsonable_args, "saga_failed", reason)
        gate = self._gatekeeper
        if not gate.rules and spec.semantics is not Semantics.IRREVERSIBLE:
            if spec.compensation is None:  # no compensation to resolve
                return None
            return self._resolve_compensation(step, jsonable_args)  # nothing could refuse it
        call = ToolCall(
            spec.name, spec.semantics, step.args, self.id, ref.ordinal, spec, self._gate_record
        )
        decision = gate.evaluate(call)
        if isinstance(decision, Deny):
            self._refuse(ref, spec, jsonable_args, decision.rule, decision.reason)
        if isinstance(decision, RequireApproval):
            denied = ask_approval(self, step, decision, jsonable_args)
            if denied is not None:
                self._refuse(ref, spec, jsonable_args, *denied)
        compensation = self._resolve_compensation(step, jsonable_args)
        if gate.reservers:  # last: a reservation is taken only for a call that will run
            holds, refusal = gate.reserve(call)
            if refusal is not None:
                self._refuse(ref, spec, jsonable_args, refusal.rule, refusal.reason)
            self.holds.add(ref.ordinal, holds)
        return compensation

    def _gate_record(self, kind: str, data: dict[str, JSONValue]) -> None:
        """Lets a rule log into this saga (a validator's vote), buffered with the step."""
        self.log(Kind(kind), data, durable=False)

    def _resolve_compensation(
        self, step: Step, jsonable_args: JSONValue
    ) -> Callable[..., Any] | None:
        spec = step.spec
        func, problem = resolve_compensator(
            spec.compensation, spec.signature.parameters, self.runtime.registry
        )
        if problem is not None:
            self._refuse(step.ref, spec, jsonable_args, "compensation", problem)
        return func

    def _refuse(
        self, ref: StepRef, spec: ToolSpec, args: JSONValue, rule: str, reason: str
    ) -> NoReturn:
        """Log the refusal of the call (with the tool's declared semantics and compensation:
        a refused call has no intent record to carry them) and raise its error."""
        if self.events is not None:
            self.events.gate_refused(self, ref, rule, reason)
        self.log(
            Kind.GATE_REFUSED,
            {
                "ordinal": ref.ordinal,
                "tool": ref.tool,
                "rule": rule,
                "reason": reason,
                "args": args,
                "semantics": spec.semantics_value,
                "compensation": spec.compensation_json,
            },
            durable=False,
        )
        if rule == "kill_switch":
            raise HaltedError(ref.tool, reason)
        if rule == "signature":
            raise ArgumentsRefused(ref.tool, rule, reason)
        raise GateRefused(ref.tool, rule, reason)
