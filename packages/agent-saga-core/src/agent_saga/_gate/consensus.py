"""N-of-M consensus: independent validators vote on a call before it runs.

Only an explicit approval counts: a validator approves by returning ``True`` (or ``Allow()``);
anything else is a refusal, and so is an exception or no answer within ``timeout``. Validators
run in parallel, each in its own daemon thread, so one that hangs costs the call at most
``timeout`` and cannot block the others (its thread is abandoned, not killed: Python cannot
stop a thread). Each vote is written to the saga's log as a ``gate.vote`` record before the
decision is returned, so the log shows who approved what.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._log.records import Kind
from .decisions import ALLOW, Allow, Decision, Deny, ToolCall
from .rules import describe_scope, tool_scope

Validator = Callable[[ToolCall], object]
_DETAIL = 300


def _named(
    validators: Sequence[Validator] | Mapping[str, Validator],
) -> list[tuple[str, Validator]]:
    if isinstance(validators, Mapping):
        pairs = [(str(name), func) for name, func in validators.items()]
    else:
        pairs = [
            (str(getattr(v, "name", None) or getattr(v, "__name__", type(v).__name__)), v)
            for v in validators
        ]
    seen: dict[str, int] = {}
    out = []
    for name, func in pairs:
        if not callable(func):
            raise TypeError(f"validator {name!r} is not callable")
        seen[name] = seen.get(name, 0) + 1
        out.append((name if seen[name] == 1 else f"{name}#{seen[name]}", func))
    return out


def _vote(answer: object) -> tuple[bool, str]:
    """``(approved, detail)`` for a validator's answer."""
    if answer is True or isinstance(answer, Allow):
        return True, "approved"
    if answer is False:
        return False, "refused"
    if isinstance(answer, Deny):
        return False, answer.reason[:_DETAIL]
    if isinstance(answer, str):
        return False, answer[:_DETAIL]
    return False, f"answered {answer!r}"[:_DETAIL]


class Consensus:
    """Refuse a call unless ``required`` of the validators approve it.

    Args:
        validators: callables ``call -> True`` to approve (a mapping names them; otherwise
            their ``name`` or ``__name__`` does).
        required: approvals needed (default: all of them).
        when: only calls for which this returns ``True`` are put to a vote (others pass this
            rule); it must return a ``bool``.
        tools: the tools this rule applies to (``None``: every tool).
        timeout: seconds to wait for all votes; a missing vote is a refusal.
    """

    kind = "consensus"

    def __init__(
        self,
        validators: Sequence[Validator] | Mapping[str, Validator],
        *,
        required: int | None = None,
        when: Callable[[ToolCall], bool] | None = None,
        tools: Iterable[str] | str | None = None,
        timeout: float = 5.0,
        name: str = "consensus",
    ) -> None:
        self.validators = _named(validators)
        if not self.validators:
            raise ValueError("Consensus needs at least one validator")
        self.required = len(self.validators) if required is None else required
        if not 1 <= self.required <= len(self.validators):
            raise ValueError(
                f"required must be between 1 and {len(self.validators)}, got {self.required}"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self.when, self.timeout, self.name = when, timeout, name
        self.tools = tool_scope(tools)

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        if self.when is not None:
            due: Any = self.when(call)
            if due is False:
                return ALLOW
            if due is not True:
                return Deny(self.name, f"vote condition returned {due!r}, not True or False")
        votes = self._collect(call)
        approvals = sum(1 for _, approved, _ in votes if approved)
        for validator, approved, detail in votes:
            if call.record is not None:
                call.record(
                    Kind.GATE_VOTE.value,
                    {
                        "ordinal": call.ordinal,
                        "tool": call.tool,
                        "rule": self.name,
                        "validator": validator,
                        "vote": "approve" if approved else "refuse",
                        "detail": detail,
                    },
                )
        if approvals >= self.required:
            return ALLOW
        refusals = "; ".join(f"{v}: {d}" for v, ok, d in votes if not ok)
        return Deny(
            self.name,
            f"{approvals} of {len(votes)} validators approved, {self.required} required "
            f"({refusals})",
        )

    def _collect(self, call: ToolCall) -> list[tuple[str, bool, str]]:
        answers: dict[int, tuple[bool, str]] = {}
        lock = threading.Lock()

        def run(index: int, func: Validator) -> None:
            try:
                vote = _vote(func(call))
            except Exception as exc:
                vote = (False, f"raised {type(exc).__name__}: {exc}"[:_DETAIL])
            with lock:
                answers[index] = vote

        threads = [
            threading.Thread(
                target=run, args=(i, func), name=f"agent-saga-vote-{name}", daemon=True
            )
            for i, (name, func) in enumerate(self.validators)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + self.timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with lock:
            got = dict(answers)
        missing = (False, f"no vote within {self.timeout:g} s")
        return [(name, *got.get(i, missing)) for i, (name, _) in enumerate(self.validators)]

    def health(self) -> list[str]:
        """Problems reported by validators that have a ``health()`` probe (unreachable, ...)."""
        problems: list[str] = []
        for name, func in self.validators:
            check = getattr(func, "health", None)
            if not callable(check):
                continue
            try:
                found = check()
            except Exception as exc:
                found = [f"health check raised {type(exc).__name__}: {exc}"]
            problems.extend(f"validator {name}: {problem}" for problem in found)
        return problems

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.validators)
        condition = (
            f" when {getattr(self.when, '__name__', 'a condition')}"
            if self.when is not None
            else ""
        )
        return (
            f"{self.required} of {len(self.validators)} validators ({names}) must approve"
            f"{condition} on {describe_scope(self.tools)}; timeout {self.timeout:g} s"
        )


__all__ = ["Consensus", "Validator"]
