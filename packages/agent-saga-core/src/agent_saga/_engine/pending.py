"""A gated call of a framework tool, waiting for its effect: the second phase of the seam.

:class:`PendingCall` runs the effect once and records its outcome; what a failure does depends
on the tool's declaration (:class:`CallPolicy`, a :class:`~agent_saga.ToolCallGuard`): a pause
parks the call to be continued by its re-run, an argument refusal is logged refused, a
retryable failure parks it for a retry and dooms the saga only if none succeeds, anything else
dooms it (see :mod:`agent_saga._engine.adapt`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .._errors import AgentSagaError
from .._log.codec import canonical, to_jsonable
from .report import StepRef
from .saga import PreparedCall, Saga

T = TypeVar("T")


class CallPolicy(Protocol):
    """What a tool's declaration says about failures (:class:`ToolCallGuard` is one)."""

    pauses: tuple[type[BaseException], ...]
    invalid_call: tuple[type[BaseException], ...]
    idempotent: bool


class ToolFailed(AgentSagaError):
    """A framework reported a tool call as failed without raising (an error value).

    Also stands for a tool interrupted by something that is not an ``Exception`` (a timeout's
    cancellation) when its framework went on.
    """


class PendingCall:
    """A gated call whose intent is logged; its effect runs once through :meth:`run`."""

    def __init__(
        self,
        guard: CallPolicy,
        saga: Saga,
        prepared: PreparedCall,
        arguments: dict[str, Any],
        continued: str | None,
    ) -> None:
        self._guard = guard
        self.saga = saga
        self._prepared = prepared
        self._arguments = arguments
        self._continued = continued
        """The parking key when this call continues a paused or failed one."""

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

        An exception from the effect is recorded, dooms the saga and propagates; a pause, an
        argument refusal and a retryable failure do not doom it (see the module docstring).
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

    def unknown(self, exc: BaseException) -> None:
        """Record that the call's outcome is unknown (a transport failure after the request was
        sent): the step is logged failed, the saga doomed, and its rollback asks the tool's
        probe whether the call landed (compensating it if so)."""
        self.saga._failed(self._prepared, exc)
        self.saga.doom(_as_exception(exc, self.step.tool))

    def _key(self) -> str:
        return self._continued or call_key(self.step.tool, self._arguments)

    def _raised(self, exc: BaseException) -> None:
        guard, saga = self._guard, self.saga
        if isinstance(exc, guard.pauses):
            saga.park(self._key(), self._prepared, paused=True)
            return
        if isinstance(exc, guard.invalid_call) and self._continued is None:
            saga._rejected(self._prepared, exc)
            return
        self._failure(exc)

    def _failure(self, exc: BaseException) -> None:
        saga = self.saga
        if self._guard.idempotent and isinstance(exc, Exception):
            key = self._key()
            saga._failed(self._prepared, exc, retryable=True)
            saga.park(key, self._prepared, paused=False)
            saga.doom_unless_retried(key, exc)
            return
        saga._failed(self._prepared, exc)
        saga.doom(_as_exception(exc, self.step.tool))

    def _returned(
        self,
        value: T,
        result_of: Callable[[T], Any] | None,
        error_of: Callable[[T], BaseException | None] | None,
    ) -> T:
        error = error_of(value) if error_of is not None else None
        if error is not None:
            self._failure(error)
            return value
        self.saga._done(self._prepared, result_of(value) if result_of is not None else value)
        if self._continued is not None:
            self.saga.retried(self._continued)
        return value


def _as_exception(exc: BaseException, tool: str) -> Exception:
    if isinstance(exc, Exception):
        return exc
    return ToolFailed(f"{tool} was interrupted by {type(exc).__name__}: {exc}")


def call_key(tool: str, arguments: dict[str, Any]) -> str:
    """What identifies a call to be continued: its tool and its arguments, canonically."""
    return f"{tool}\x00{canonical(to_jsonable(arguments)).decode()}"


__all__ = ["CallPolicy", "PendingCall", "ToolFailed", "call_key"]
