"""The one seam every framework adapter translates onto.

An adapter knows a framework's tool object (its name, its argument schema, how to invoke it);
this module knows transactions. :class:`ToolCallGuard` runs one call of an externally described
tool as a saga step: gate and intent before the effect, outcome after, exactly as ``@tool``
does for a plain function. What frameworks add, and this seam absorbs so that no adapter has to:

* **Exceptions turned into text.** Frameworks catch a tool's exception and hand the model a
  string. The step is still recorded as failed and the saga is doomed (:meth:`Saga.doom`): the
  transaction rolls back when it ends even though the agent loop returned normally. A framework
  that reports a failure as a value (an error message object) is covered by ``error_of``.
* **Refusals as outcomes.** A gate refusal is logged and returned as a :class:`RefusedCall` the
  adapter turns into the framework's tool-error shape, so the model can correct itself; the body
  never runs. ``on_refusal="rollback"`` also dooms the saga. A halt (kill switch) always does.
* **Pauses.** A tool that waits for a human raises a framework exception and is re-run from the
  top when the answer arrives (LlamaIndex ``wait_for_event``, LangGraph ``interrupt``).
  Exceptions listed in ``pauses`` are neither a failure nor a new step: the re-run (same tool,
  same arguments) continues the same step, with the same idempotency key.
* **Retries.** A body that raised dooms the saga (its effect may have landed), except for a tool
  declared ``idempotent`` (or taking ``idempotency_key``): its failure is logged ``retryable``
  and the next call with the same arguments, from a retry middleware, a retry policy or the
  model, is the same step with the same key. The saga rolls back at its end only if no retry
  succeeded. A call that repeats a failed non-idempotent one is refused (``saga_failed``), so a
  framework's retry can never repeat its effect.
* **Arguments the framework refuses.** Exceptions listed in ``invalid_call`` mean the framework
  rejected the call's arguments before the tool's body ran (the model's most common mistake):
  the step is logged refused (rule ``arguments``), nothing is doomed, and the framework's own
  error reaches the model. Adapters whose framework validates before the seam is entered need
  none.
* **Two phases.** :meth:`ToolCallGuard.begin` gates and logs the intent;
  :meth:`PendingCall.run` / :meth:`PendingCall.arun` run the effect later, from another hook.
* **Steps run ahead.** :meth:`ToolCallGuard.run` / :meth:`ToolCallGuard.arun` first ask the
  saga's steps run ahead of confirmation, as a ``@tool`` function's call does: a step run ahead
  for this tool and these arguments (``AgentKit.speculate``) gives its result once, and the
  effect does not run. An adapter lets its tools run ahead by giving them ``guard`` (their
  :class:`ToolCallGuard`) and ``call_ahead(arguments)`` / ``acall_ahead(arguments)``: each
  checks the arguments (raising before anything is gated or logged) and returns the body, a
  function of the step (a coroutine function for ``acall_ahead``) that runs it as that step
  and returns ``(output, result)``: what the confirmed call gets, and the step's result as
  logged. The two-phase :meth:`ToolCallGuard.begin` never takes one.

Outside any transaction every call runs untouched.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar, cast

from .._errors import GateRefused
from .._log.records import Semantics
from .ahead import Claimed
from .compensation import DEFAULT_REGISTRY, CompensatorRegistry
from .pending import PendingCall, ToolFailed, call_key
from .report import StepRef
from .saga import current_saga
from .spec import ToolSpec
from .tool import make_spec

T = TypeVar("T")

OnRefusal = Literal["continue", "rollback"]
"""What a gate refusal does to the transaction: nothing more (the model is told and may go on),
or doom it so it rolls back when it ends."""


@dataclass(frozen=True)
class RefusedCall:
    """A call the gate refused: it was logged and its body did not run."""

    tool: str
    rule: str
    reason: str

    @property
    def halted(self) -> bool:
        """True when the kill switch refused the call."""
        return self.rule == "kill_switch"

    @property
    def message(self) -> str:
        """Text for the model: what was refused and why, so it can correct itself."""
        return f"Tool {self.tool} was refused and did not run: {self.rule}: {self.reason}"

    def error(self) -> GateRefused:
        """The refusal as the exception ``@tool`` would raise."""
        return GateRefused(self.tool, self.rule, self.reason)


class ToolDeclaration(TypedDict, total=False):
    """How a framework tool's effect is undone and logged: the keyword arguments of
    :class:`ToolCallGuard` (and of each adapter's ``saga_tool``) that describe it."""

    semantics: Semantics | str
    compensate: object
    probe: Callable[..., Any]
    idempotent: bool
    redact: Iterable[str]


def declarations_for(
    names: Iterable[str], declarations: Mapping[str, ToolDeclaration] | None
) -> list[ToolDeclaration]:
    """Each named tool's declaration, in order (empty when it has none).

    Raises:
        ValueError: ``declarations`` names a tool that is not among ``names`` (a typo would
            otherwise leave that tool IRREVERSIBLE without a word).
    """
    declared = dict(declarations or {})
    found = [declared.pop(name, ToolDeclaration()) for name in names]
    if declared:
        raise ValueError(f"declarations name tools that are not in the list: {sorted(declared)}")
    return found


class _ExternalSpec(ToolSpec):
    """A tool whose arguments arrive as a dict (from a framework), stored as they are."""

    __slots__ = ()

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in kwargs.items() if k != "idempotency_key"}


class ToolCallGuard:
    """One framework tool, described for the engine; each call becomes one saga step.

    Args:
        name: the tool's name in the log (the framework's tool name).
        semantics, compensate, probe: as for :func:`agent_saga.tool`. With no ``semantics``
            the tool is COMPENSABLE when ``compensate`` is given and IRREVERSIBLE otherwise.
        parameters: the tool's argument names (from its schema): a compensator may ask for any
            of them by name. Names that are not Python identifiers are ignored.
        on_refusal: ``"continue"`` (the model is told, the transaction goes on) or
            ``"rollback"`` (the model is told, the transaction rolls back when it ends).
        pauses: exception types by which the framework suspends a call to re-run it later.
        idempotent: the tool may run again with the same idempotency key without a second
            effect, so a failed call may be retried as the same step. Implied when
            ``parameters`` include ``idempotency_key``.
        redact: argument paths (``"card.cvv"``) masked before anything is logged, as for
            :func:`agent_saga.tool`.
        invalid_call: exception types by which the framework refuses a call's arguments
            before the tool's body runs (see the module docstring).
        registry: where ``probe`` is registered (default: the process-wide registry).

    Raises:
        ConfigurationError: for the same declaration mistakes as ``@tool``.
    """

    def __init__(
        self,
        name: str,
        *,
        semantics: Semantics | str | None = None,
        compensate: object = None,
        probe: Callable[..., Any] | None = None,
        parameters: Iterable[str] = (),
        on_refusal: OnRefusal = "continue",
        pauses: tuple[type[BaseException], ...] = (),
        idempotent: bool = False,
        redact: Iterable[str] = (),
        invalid_call: tuple[type[BaseException], ...] = (),
        registry: CompensatorRegistry | None = None,
    ) -> None:
        if on_refusal not in ("continue", "rollback"):
            raise ValueError(f"on_refusal must be 'continue' or 'rollback', got {on_refusal!r}")
        names = [p for p in parameters if p.isidentifier() and not keyword.iskeyword(p)]

        def effect(**arguments: Any) -> Any:  # pragma: no cover - never called
            raise AssertionError("an external tool runs through its framework")

        effect.__name__ = effect.__qualname__ = name
        effect.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in dict.fromkeys(names)]
        )
        spec = make_spec(
            effect,
            name=name,
            semantics=semantics,
            compensate=compensate,
            probe=probe,
            redact=redact,
        )
        if probe is not None:
            (registry or DEFAULT_REGISTRY).register_probe(spec.name, probe)
        self.spec: ToolSpec = _ExternalSpec(
            spec.name, effect, spec.semantics, spec.compensation, spec.signature, False, spec.redact
        )
        self.on_refusal = on_refusal
        self.pauses = pauses
        self.idempotent = idempotent or "idempotency_key" in names
        self.invalid_call = invalid_call

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def semantics(self) -> Semantics:
        return self.spec.semantics

    def begin(self, arguments: Mapping[str, Any]) -> PendingCall | RefusedCall | None:
        """Gate the call and log its intent (durably unless REVERSIBLE).

        Returns ``None`` outside any transaction, a :class:`RefusedCall` when the gate refused (the
        refusal is logged), or the :class:`PendingCall` whose effect may now run. A call that
        continues one suspended by a pause, or retries a failed idempotent one, returns that
        call again, not a new step.

        ``arguments`` come from the model: an ``idempotency_key`` among them is ignored (the
        step's key is derived from its saga and ordinal, and the effect gets it from
        :attr:`PendingCall.step`), so a model cannot make a step share another saga's key.

        Raises:
            SagaEndedError: the current saga has ended (a run that outlived its transaction).
        """
        saga = current_saga()
        if saga is None:
            return None
        kwargs = dict(arguments)
        kwargs.pop("idempotency_key", None)
        if saga.parked:
            key = call_key(self.spec.name, kwargs)
            resumed = saga.unpark(key)
            if resumed is not None:
                return PendingCall(self, saga, resumed, kwargs, key)
        try:
            prepared = saga._prepare(self.spec, (), kwargs)
        except GateRefused as exc:
            if exc.rule == "kill_switch" or self.on_refusal == "rollback":
                saga.doom(exc)
            return RefusedCall(exc.tool, exc.rule, exc.reason)
        return PendingCall(self, saga, prepared, kwargs, None)

    async def abegin(self, arguments: Mapping[str, Any]) -> PendingCall | RefusedCall | None:
        """:meth:`begin` for async code: when the gate may wait for a human (an approval set-up),
        it waits in a worker thread, not on the event loop."""
        saga = current_saga()
        if saga is None or saga.runtime.approvals is None:
            return self.begin(arguments)
        import asyncio  # the running loop has loaded it already

        return await asyncio.to_thread(self.begin, arguments)

    def _ahead(self, arguments: Mapping[str, Any]) -> Claimed | None:
        """The result of a step run ahead for exactly this call (see the module docstring)."""
        saga = current_saga()
        if saga is None or saga.ahead is None:
            return None
        kwargs = {k: v for k, v in arguments.items() if k != "idempotency_key"}
        return saga.ahead.claim(self.spec, (), kwargs)

    def run(
        self,
        arguments: Mapping[str, Any],
        effect: Callable[[StepRef | None], T],
        *,
        result_of: Callable[[T], Any] | None = None,
        error_of: Callable[[T], BaseException | None] | None = None,
    ) -> T | RefusedCall:
        """Gate, then run ``effect`` as the step (see :meth:`PendingCall.run`).

        Outside a transaction ``effect(None)`` runs untouched.
        """
        claimed = self._ahead(arguments)
        if claimed is not None:
            return cast(T, claimed.result)
        pending = self.begin(arguments)
        if pending is None:
            return effect(None)
        if isinstance(pending, RefusedCall):
            return pending
        return pending.run(effect, result_of=result_of, error_of=error_of)

    async def arun(
        self,
        arguments: Mapping[str, Any],
        effect: Callable[[StepRef | None], Awaitable[T]],
        *,
        result_of: Callable[[T], Any] | None = None,
        error_of: Callable[[T], BaseException | None] | None = None,
    ) -> T | RefusedCall:
        """:meth:`run` for an async effect (see :meth:`abegin` for the gate)."""
        claimed = self._ahead(arguments)
        if claimed is not None:
            return cast(T, claimed.result)
        pending = await self.abegin(arguments)
        if pending is None:
            return await effect(None)
        if isinstance(pending, RefusedCall):
            return pending
        return await pending.arun(effect, result_of=result_of, error_of=error_of)


__all__ = [
    "OnRefusal",
    "PendingCall",
    "RefusedCall",
    "ToolCallGuard",
    "ToolDeclaration",
    "ToolFailed",
    "declarations_for",
]
