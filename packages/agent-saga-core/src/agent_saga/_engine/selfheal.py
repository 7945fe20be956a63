"""A bounded correction loop: the gate's refusal goes back to the agent as text it can act on.

:class:`SelfHealingLoop` runs an agent step (a function that proposes and makes a tool call,
given the feedback from the previous refusal) inside the current transaction. On a gate refusal
it logs the attempt, waits with exponential backoff on the saga's clock (an injected fake clock
in tests, so no real sleep), and retries with the refusal's reason as feedback. After the last
attempt it logs an escalation (durably), hands an :class:`Escalation` to the human channel, and
raises :class:`SelfHealingExhausted`. A halt (kill switch) is not something the agent can
correct: it is raised at once. Other exceptions propagate unchanged.

Every attempt is a ``selfheal.attempt`` record in the saga, the escalation a
``selfheal.escalated`` record; the refusals themselves are the gate's own ``gate.refused``
records.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .._clock import Clock, SystemClock
from .._errors import ConfigurationError, GateRefused, HaltedError
from .._log.codec import JSONValue
from .._log.records import Kind
from .saga import Saga, current_saga

T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    """One refused attempt."""

    attempt: int
    tool: str
    rule: str
    reason: str


@dataclass(frozen=True)
class Escalation:
    """What the human channel receives when the agent could not correct its call."""

    saga_id: str
    saga_name: str
    attempts: int
    refusals: tuple[Refusal, ...]

    def summary(self) -> str:
        last = self.refusals[-1]
        return (
            f"saga {self.saga_name} ({self.saga_id}): {last.tool} still refused by {last.rule} "
            f"after {self.attempts} attempts: {last.reason}"
        )


class SelfHealingExhausted(GateRefused):
    """Every attempt was refused; the case went to the human channel.

    Attributes:
        escalation: the attempts and their refusals, as handed to the channel.
        channel_error: why the channel itself failed, if it did.
    """

    def __init__(self, escalation: Escalation, channel_error: str | None = None) -> None:
        last = escalation.refusals[-1]
        super().__init__(
            last.tool,
            last.rule,
            f"still refused after {escalation.attempts} attempts; escalated: {last.reason}",
        )
        self.escalation = escalation
        self.channel_error = channel_error


def feedback_text(refusal: GateRefused, attempt: int, attempts: int) -> str:
    """The refusal as an instruction the agent can act on."""
    return (
        f"Your call to {refusal.tool} was refused by the rule '{refusal.rule}': "
        f"{refusal.reason}. Change the call so that it satisfies this rule and try again "
        f"(attempt {attempt + 1} of {attempts})."
    )


class SelfHealingLoop:
    """Retry an agent step with the gate's feedback, then escalate to a human.

    Args:
        attempts: how many times the step may run (at least 1).
        backoff: seconds to wait after the first refusal; each later wait is ``factor`` times
            longer, capped at ``max_delay``.
        escalate: the human channel, called with an :class:`Escalation` after the last refusal.
        clock: the clock to wait on; by default the saga's own (the kit's ``clock=``).
        feedback: turns a refusal into the text given to the next attempt.
    """

    def __init__(
        self,
        *,
        attempts: int = 3,
        backoff: float = 1.0,
        factor: float = 2.0,
        max_delay: float = 60.0,
        escalate: Callable[[Escalation], object] | None = None,
        clock: Clock | None = None,
        feedback: Callable[[GateRefused, int, int], str] = feedback_text,
    ) -> None:
        if attempts < 1:
            raise ConfigurationError(f"attempts must be at least 1, got {attempts}")
        if backoff < 0 or factor < 1 or max_delay < 0:
            raise ConfigurationError("backoff and max_delay must be >= 0 and factor >= 1")
        self.attempts, self.backoff, self.factor, self.max_delay = (
            attempts,
            backoff,
            factor,
            max_delay,
        )
        self.escalate, self.clock, self.feedback = escalate, clock, feedback

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th refusal."""
        return float(min(self.max_delay, self.backoff * self.factor ** (attempt - 1)))

    def _saga(self) -> Saga:
        saga = current_saga()
        if saga is None:
            raise ConfigurationError(
                "SelfHealingLoop runs inside a transaction: outside one, tools are not gated"
            )
        return saga

    def _refused(
        self, saga: Saga, refusal: GateRefused, attempt: int, seen: list[Refusal]
    ) -> float:
        seen.append(Refusal(attempt, refusal.tool, refusal.rule, refusal.reason))
        last = attempt == self.attempts
        delay = 0.0 if last else self.delay(attempt)
        saga.log(
            Kind.SELFHEAL_ATTEMPT,
            {
                "attempt": attempt,
                "outcome": "refused",
                "tool": refusal.tool,
                "rule": refusal.rule,
                "reason": refusal.reason,
                "retry_in": None if last else delay,
            },
            durable=False,
        )
        return delay

    def _succeeded(self, saga: Saga, attempt: int) -> None:
        saga.log(Kind.SELFHEAL_ATTEMPT, {"attempt": attempt, "outcome": "succeeded"}, durable=False)

    def _escalate(self, saga: Saga, seen: list[Refusal]) -> SelfHealingExhausted:
        escalation = Escalation(saga.id, saga.name, self.attempts, tuple(seen))
        channel_error = None
        if self.escalate is not None:
            try:
                self.escalate(escalation)
            except Exception as exc:  # the escalation record says the channel failed
                channel_error = f"{type(exc).__name__}: {exc}"
        data: dict[str, JSONValue] = {
            "attempts": self.attempts,
            "summary": escalation.summary(),
            "channel": "none" if self.escalate is None else "called",
            "channel_error": channel_error,
        }
        saga.log(Kind.SELFHEAL_ESCALATED, data, durable=True)
        return SelfHealingExhausted(escalation, channel_error)

    def run(self, step: Callable[[str | None], T]) -> T:
        """Run ``step(feedback)`` until the gate lets it through or the attempts run out.

        ``feedback`` is ``None`` on the first attempt, then the text of the last refusal.

        Raises:
            SelfHealingExhausted: every attempt was refused (after escalating).
            HaltedError: the kill switch is engaged (not retried).
            ConfigurationError: no transaction is open.
        """
        saga = self._saga()
        clock = self.clock or saga.runtime.clock
        seen: list[Refusal] = []
        feedback: str | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                result = step(feedback)
            except HaltedError:
                raise
            except GateRefused as refusal:
                delay = self._refused(saga, refusal, attempt, seen)
                if attempt < self.attempts:
                    feedback = self.feedback(refusal, attempt, self.attempts)
                    clock.sleep(delay)
                continue
            self._succeeded(saga, attempt)
            return result
        raise self._escalate(saga, seen)

    async def arun(self, step: Callable[[str | None], Awaitable[T]]) -> T:
        """:meth:`run` for an async step; waits with ``asyncio.sleep`` on the real clock."""
        import asyncio

        saga = self._saga()
        clock = self.clock or saga.runtime.clock
        seen: list[Refusal] = []
        feedback: str | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                result = await step(feedback)
            except HaltedError:
                raise
            except GateRefused as refusal:
                delay = self._refused(saga, refusal, attempt, seen)
                if attempt < self.attempts:
                    feedback = self.feedback(refusal, attempt, self.attempts)
                    if isinstance(clock, SystemClock):
                        await asyncio.sleep(delay)
                    else:
                        clock.sleep(delay)
                continue
            self._succeeded(saga, attempt)
            return result
        raise self._escalate(saga, seen)


__all__ = [
    "Escalation",
    "Refusal",
    "SelfHealingExhausted",
    "SelfHealingLoop",
    "feedback_text",
]
