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
  top when the answer arrives (LlamaIndex). Exceptions listed in ``pauses`` are neither a failure
  nor a new step: the re-run continues the same step, with the same idempotency key.
* **Two phases.** :meth:`ToolCallGuard.begin` gates and logs the intent;
  :meth:`PendingCall.run` / :meth:`PendingCall.arun` run the effect later, from another hook.

Outside any transaction every call runs untouched.
"""

from __future__ import annotations

import inspect
import keyword
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypedDict, TypeVar

from .._errors import AgentSagaError, GateRefused
from .._log.codec import canonical, to_jsonable
from .._log.records import Semantics
from .compensation import DEFAULT_REGISTRY, CompensatorRegistry
from .report import StepRef
from .saga import PreparedCall, Saga, current_saga
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
    """How a framework tool's effect is undone: the keyword arguments of :class:`ToolCallGuard`
    (and of each adapter's ``saga_tool``) that describe it."""

    semantics: Semantics | str
    compensate: object
    probe: Callable[..., Any]


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


class ToolFailed(AgentSagaError):
    """A framework reported a tool call as failed without raising (an error value).

    Also stands for a tool interrupted by something that is not an ``Exception`` (a timeout's
    cancellation) when its framework went on.
    """


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
        spec = make_spec(effect, name=name, semantics=semantics, compensate=compensate, probe=probe)
        if probe is not None:
            (registry or DEFAULT_REGISTRY).register_probe(spec.name, probe)
        self.spec: ToolSpec = _ExternalSpec(
            spec.name, effect, spec.semantics, spec.compensation, spec.signature, False
        )
        self.on_refusal = on_refusal
        self.pauses = pauses

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
        continues one suspended by a pause returns that call again, not a new step.

        ``arguments`` come from the model: an ``idempotency_key`` among them is ignored (the
        step's key is derived from its saga and ordinal, and the effect gets it from
        :attr:`PendingCall.step`), so a model cannot make a step share another saga's key.
        """
        saga = current_saga()
        if saga is None:
            return None
        kwargs = dict(arguments)
        kwargs.pop("idempotency_key", None)
        parked = _Parked.of(saga)
        key = _call_key(self.spec.name, kwargs) if self.pauses else None
        if key is not None:
            resumed = parked.take(key)
            if resumed is not None:
                return PendingCall(self, saga, resumed, key)
        try:
            prepared = saga._prepare(self.spec, (), kwargs)
        except GateRefused as exc:
            if exc.rule == "kill_switch" or self.on_refusal == "rollback":
                saga.doom(exc)
            return RefusedCall(exc.tool, exc.rule, exc.reason)
        return PendingCall(self, saga, prepared, key)

    async def abegin(self, arguments: Mapping[str, Any]) -> PendingCall | RefusedCall | None:
        """:meth:`begin` for async code: when the gate may wait for a human (an approval set-up),
        it waits in a worker thread, not on the event loop."""
        saga = current_saga()
        if saga is None or saga.runtime.approvals is None:
            return self.begin(arguments)
        import asyncio  # the running loop has loaded it already

        return await asyncio.to_thread(self.begin, arguments)

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
        pending = await self.abegin(arguments)
        if pending is None:
            return await effect(None)
        if isinstance(pending, RefusedCall):
            return pending
        return await pending.arun(effect, result_of=result_of, error_of=error_of)


class PendingCall:
    """A gated call whose intent is logged; its effect runs once through :meth:`run`."""

    def __init__(
        self, guard: ToolCallGuard, saga: Saga, prepared: PreparedCall, key: str | None
    ) -> None:
        self._guard = guard
        self.saga = saga
        self._prepared = prepared
        self._key = key

    @property
    def step(self) -> StepRef:
        """The step's identity: ordinal, tool name and idempotency key."""
        return self._prepared.step.ref

    def run(
        self,
        effect: Callable[[StepRef | None], T],
        *,
        result_of: Callable[[T], Any] | None = None,
        error_of: Callable[[T], BaseException | None] | None = None,
    ) -> T:
        """Run the effect and record its outcome.

        Args:
            effect: performs the call; receives the step's identity.
            result_of: the step's result as logged and given to the compensator (default: the
                effect's return value).
            error_of: tells a failure the framework returned as a value; the step is then
                recorded as failed with that error, the saga doomed, and the value returned.

        An exception from the effect is recorded, dooms the saga and propagates; a pause is
        neither (see the module docstring).
        """
        try:
            value = effect(self.step)
        except BaseException as exc:
            self._raised(exc)
            raise
        return self._returned(value, result_of, error_of)

    async def arun(
        self,
        effect: Callable[[StepRef | None], Awaitable[T]],
        *,
        result_of: Callable[[T], Any] | None = None,
        error_of: Callable[[T], BaseException | None] | None = None,
    ) -> T:
        """:meth:`run` for an async effect."""
        try:
            value = await effect(self.step)
        except BaseException as exc:
            self._raised(exc)
            raise
        return self._returned(value, result_of, error_of)

    def _raised(self, exc: BaseException) -> None:
        if self._key is not None and isinstance(exc, self._guard.pauses):
            _Parked.of(self.saga).put(self._key, self._prepared)
            return
        self.saga._failed(self._prepared, exc)
        self.saga.doom(_as_exception(exc, self.step.tool))

    def _returned(
        self,
        value: T,
        result_of: Callable[[T], Any] | None,
        error_of: Callable[[T], BaseException | None] | None,
    ) -> T:
        error = error_of(value) if error_of is not None else None
        if error is not None:
            self.saga._failed(self._prepared, error)
            self.saga.doom(_as_exception(error, self.step.tool))
            return value
        self.saga._done(self._prepared, result_of(value) if result_of is not None else value)
        return value


def _as_exception(exc: BaseException, tool: str) -> Exception:
    if isinstance(exc, Exception):
        return exc
    return ToolFailed(f"{tool} was interrupted by {type(exc).__name__}: {exc}")


def _call_key(tool: str, arguments: dict[str, Any]) -> str:
    return f"{tool}\x00{canonical(to_jsonable(arguments)).decode()}"


class _Parked:
    """Calls of one saga suspended by a pause, by tool and arguments, awaiting their re-run."""

    _by_saga: ClassVar[weakref.WeakKeyDictionary[Saga, _Parked]] = weakref.WeakKeyDictionary()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self.calls: dict[str, list[PreparedCall]] = {}

    @classmethod
    def of(cls, saga: Saga) -> _Parked:
        with cls._lock:
            parked = cls._by_saga.get(saga)
            if parked is None:
                parked = cls._by_saga[saga] = _Parked()
            return parked

    def put(self, key: str, prepared: PreparedCall) -> None:
        with self._lock:
            self.calls.setdefault(key, []).append(prepared)

    def take(self, key: str) -> PreparedCall | None:
        with self._lock:
            waiting = self.calls.get(key)
            return waiting.pop(0) if waiting else None


__all__ = [
    "OnRefusal",
    "PendingCall",
    "RefusedCall",
    "ToolCallGuard",
    "ToolDeclaration",
    "ToolFailed",
    "declarations_for",
]
