"""The pre-flight gate: a closed set of decisions, composed so that the strictest one wins.

Monotonicity is structural: :meth:`Gate.evaluate` returns the strictest decision of all rules
(``Deny`` > ``RequireApproval`` > ``Allow``), a rule that raises or returns something that is not
a decision counts as ``Deny``, and there is no decision that overrides another. Adding a rule
can therefore only make the outcome stricter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from math import isfinite
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from .._log.records import Semantics

if TYPE_CHECKING:
    from .._log.codec import JSONValue

RecordSink = Callable[[str, "dict[str, JSONValue]"], None]
"""Appends a record of the given kind to the calling saga's log (votes, for instance)."""


@dataclass(frozen=True)
class Allow:
    """The call may run."""

    rank: int = field(default=0, init=False, repr=False)


@dataclass(frozen=True)
class RequireApproval:
    """The call may run only once approved by a human."""

    rule: str
    reason: str
    approvers: tuple[str, ...] = ()
    quorum: int = 1
    rank: int = field(default=1, init=False, repr=False)


@dataclass(frozen=True)
class Deny:
    """The call must not run."""

    rule: str
    reason: str
    rank: int = field(default=2, init=False, repr=False)


Decision = Allow | RequireApproval | Deny
ALLOW = Allow()


def strictest(first: Decision, second: Decision) -> Decision:
    """The stricter of two decisions (the first on a tie, so the earliest rule is reported).

    Two approval requirements combine: the approval must satisfy both (see :func:`_both`).
    """
    if isinstance(first, RequireApproval) and isinstance(second, RequireApproval):
        return _both(first, second)
    return second if second.rank > first.rank else first


def _both(first: RequireApproval, second: RequireApproval) -> Decision:
    """One approval satisfying two rules: only approvers both allow (an empty list allows the
    kit's approvers), the larger quorum; ``Deny`` when no approval could satisfy both."""
    if first == second:
        return first
    rule = first.rule if first.rule == second.rule else f"{first.rule}+{second.rule}"
    if first.approvers and second.approvers:
        approvers = tuple(a for a in first.approvers if a in second.approvers)
        if not approvers:
            return Deny(rule, "no approver is allowed by every rule that requires an approval")
    else:
        approvers = first.approvers or second.approvers
    quorum = max(first.quorum, second.quorum)
    if approvers and quorum > len(approvers):
        return Deny(rule, f"a quorum of {quorum} from {len(approvers)} allowed approver(s)")
    return RequireApproval(rule, f"{first.reason}; {second.reason}", approvers, quorum)


class ToolSignature(Protocol):
    """What a rule may read of a tool's declaration (the engine's ``ToolSpec`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def func(self) -> Callable[..., Any]: ...

    @property
    def signature(self) -> inspect.Signature: ...


class ToolCall(NamedTuple):
    """A call as the gate sees it, before it runs (immutable)."""

    tool: str
    semantics: Semantics
    args: Mapping[str, Any]
    saga_id: str
    ordinal: int
    spec: ToolSignature | None = None
    """The tool's declaration (signature, type hints), when the engine built the call."""
    record: RecordSink | None = None
    """Writes a record into the saga's log; ``None`` when the call is evaluated outside a saga."""

    def arg(self, path: str, default: Any = None) -> Any:
        """The argument at a dotted path (``"card.amount"``, ``"items.0.qty"``), or ``default``."""
        current: Any = self.args
        for part in path.split("."):
            if type(current) is dict:  # the common case, without the ABC check
                if part not in current:
                    return default
                current = current[part]
            elif isinstance(current, Mapping) and part in current:
                current = current[part]
            elif isinstance(current, list | tuple) and part.isdigit() and int(part) < len(current):
                current = current[int(part)]
            else:
                return default
        return current


@runtime_checkable
class Rule(Protocol):
    """A named check of one call; returns a decision and never runs the tool."""

    @property
    def name(self) -> str: ...

    def evaluate(self, call: ToolCall) -> Decision: ...


class Hold(Protocol):
    """Something a rule set aside for a call (a budget reservation), settled when the saga ends.

    Both methods are idempotent; after either one the other does nothing.
    """

    def commit(self) -> None:
        """The effect stands: make the reservation final."""
        ...

    def release(self) -> None:
        """The effect was undone or never happened: give the reservation back."""
        ...


@runtime_checkable
class Reserving(Protocol):
    """A rule that also reserves something atomically once every rule has allowed the call."""

    @property
    def name(self) -> str: ...

    def evaluate(self, call: ToolCall) -> Decision: ...

    def reserve(self, call: ToolCall) -> Hold | Deny | None:
        """Reserve for ``call`` (durably, before the effect); ``Deny`` when it does not fit."""
        ...


class Gate:
    """The rules every call passes, plus the built-in check that IRREVERSIBLE needs approval.

    Rules that also reserve (budgets) are asked to reserve only after :meth:`evaluate` allowed
    the call, through :meth:`reserve`; a reservation can refuse the call, never allow it.
    """

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        for rule in self.rules:
            if not isinstance(rule, Rule):
                raise TypeError(f"{rule!r} is not a gate rule (needs .name and .evaluate(call))")
        self.reservers: tuple[Reserving, ...] = tuple(
            rule for rule in self.rules if isinstance(rule, Reserving)
        )

    def with_rule(self, rule: Rule) -> Gate:
        """A new gate with ``rule`` added (never weaker than this one)."""
        return Gate((*self.rules, rule))

    def evaluate(self, call: ToolCall) -> Decision:
        """The strictest decision over the built-in check and every rule."""
        decision: Decision = ALLOW
        if call.semantics is Semantics.IRREVERSIBLE:
            decision = RequireApproval(
                "irreversible", f"{call.tool} is IRREVERSIBLE and needs a human approval"
            )
        for rule in self.rules:
            decision = strictest(decision, _run_rule(rule, call))
            if isinstance(decision, Deny):
                return decision
        return decision

    def reserve(self, call: ToolCall) -> tuple[list[Hold], Deny | None]:
        """Ask every reserving rule to reserve for an allowed call.

        Returns the holds taken, or ``([], Deny)`` when one reservation refused or failed; the
        holds taken before it are released then. A reserving rule that raises or returns
        something else than a hold, ``Deny`` or ``None`` refuses the call (fail closed).
        """
        holds: list[Hold] = []
        for rule in self.reservers:
            try:
                outcome: object = rule.reserve(call)
            except Exception as exc:
                outcome = Deny(rule.name, f"reservation failed: {type(exc).__name__}: {exc}")
            if outcome is None:
                continue
            if isinstance(outcome, Allow | RequireApproval) or not (
                isinstance(outcome, Deny) or _is_hold(outcome)
            ):
                outcome = Deny(rule.name, f"reserve returned {outcome!r}, which is not a hold")
            if isinstance(outcome, Deny):
                release_all(holds)
                return [], outcome
            holds.append(outcome)  # type: ignore[arg-type]
        return holds, None

    def health(self) -> list[str]:
        """Problems reported now by rules that depend on something outside the process."""
        problems: list[str] = []
        for rule in self.rules:
            check = getattr(rule, "health", None)
            if not callable(check):
                continue
            try:
                found = check()
            except Exception as exc:
                found = [f"health check raised {type(exc).__name__}: {exc}"]
            problems.extend(f"{rule.name}: {problem}" for problem in found)
        return problems

    def describe(self) -> list[dict[str, str]]:
        return [
            {
                "name": rule.name,
                "type": type(rule).__name__,
                "kind": str(getattr(rule, "kind", "rule")),
                "describes": _describe(rule),
            }
            for rule in self.rules
        ]


def _is_hold(value: object) -> bool:
    return callable(getattr(value, "commit", None)) and callable(getattr(value, "release", None))


def release_all(holds: Iterable[Hold]) -> list[str]:
    """Release every hold; returns the errors (a failed release leaves its hold counted)."""
    return _settle(holds, commit=False)


def commit_all(holds: Iterable[Hold]) -> list[str]:
    """Commit every hold; returns the errors (a failed commit leaves its hold counted)."""
    return _settle(holds, commit=True)


def _settle(holds: Iterable[Hold], *, commit: bool) -> list[str]:
    errors: list[str] = []
    for hold in holds:
        try:
            hold.commit() if commit else hold.release()
        except Exception as exc:
            errors.append(f"{hold!r}: {type(exc).__name__}: {exc}")
    return errors


def _run_rule(rule: Rule, call: ToolCall) -> Decision:
    try:
        decision: object = rule.evaluate(call)
    except Exception as exc:  # a broken rule fails closed
        name = getattr(rule, "name", type(rule).__name__)
        return Deny(name, f"rule raised {type(exc).__name__}: {exc}")
    if type(decision) in _DECISIONS or isinstance(decision, Allow | RequireApproval | Deny):
        return decision  # type: ignore[return-value]
    name = getattr(rule, "name", type(rule).__name__)
    return Deny(name, f"rule returned {decision!r}, which is not Allow, Deny or RequireApproval")


_DECISIONS = frozenset({Allow, RequireApproval, Deny})


def _describe(rule: Rule) -> str:
    describe = getattr(rule, "describe", None)
    return str(describe()) if callable(describe) else repr(rule)


@dataclass(frozen=True)
class MaxValue:
    """Deny calls whose numeric argument at ``path`` exceeds ``limit`` (an amount cap).

    A value that is missing, not a number, infinite or NaN is denied too: a cap that cannot be
    checked does not allow the call (``-inf`` is no amount). The limit must be finite.
    """

    limit: float
    path: str = "amount"
    tools: frozenset[str] | None = None
    name: str = "max_value"

    def __post_init__(self) -> None:
        limit = self.limit
        if isinstance(limit, bool) or not isinstance(limit, int | float) or not isfinite(limit):
            raise ValueError(f"MaxValue needs a finite number as its limit, got {limit!r}")

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        value = call.arg(self.path)
        if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
            return Deny(
                self.name, f"{self.path}={value!r} is not a finite number; cap is {self.limit}"
            )
        if not value <= self.limit:
            return Deny(self.name, f"{self.path}={value} exceeds the cap of {self.limit}")
        return ALLOW

    def describe(self) -> str:
        scope = ", ".join(sorted(self.tools)) if self.tools is not None else "every tool"
        return f"{self.path} <= {self.limit} on {scope}"


@dataclass(frozen=True)
class DenyTools:
    """Deny every call to the named tools."""

    tools: frozenset[str]
    name: str = "deny_tools"

    def evaluate(self, call: ToolCall) -> Decision:
        if call.tool in self.tools:
            return Deny(self.name, f"tool {call.tool} is on the deny list")
        return ALLOW

    def describe(self) -> str:
        return f"deny {', '.join(sorted(self.tools))}"
