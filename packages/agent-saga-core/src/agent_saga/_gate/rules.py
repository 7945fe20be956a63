"""The rule library: ranges, allow and deny lists, rate limits and conditional approval.

Every rule here has a name (reported in the refusal) and a reason that states the value it saw
and the bound it applied, so an agent can correct the call. A rule that cannot check a call (the
argument is missing, not a number, not comparable) refuses it: a bound that cannot be checked
does not allow anything. Amount caps are :class:`~agent_saga.MaxValue`, the deny list of tools
is :class:`~agent_saga.DenyTools`; type checks from hints are in ``_typecheck``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Literal

from .decisions import ALLOW, Decision, Deny, RequireApproval, ToolCall


def tool_scope(tools: Iterable[str] | str | None) -> frozenset[str] | None:
    """The set of tools a rule applies to (``None``: every tool). A bare string is one tool."""
    if tools is None:
        return None
    if isinstance(tools, str):
        return frozenset({tools})
    scope = frozenset(tools)
    if not all(isinstance(name, str) for name in scope):
        raise TypeError(f"tools must be names (str), got {sorted(map(repr, scope))}")
    return scope


def describe_scope(tools: frozenset[str] | None) -> str:
    return ", ".join(sorted(tools)) if tools is not None else "every tool"


def is_number(value: object) -> bool:
    """A real, finite number (``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


class Range:
    """Refuse calls whose numeric argument at ``path`` is outside ``[low, high]``.

    ``Range("dose_mg", 0.1, 50, tools="prescribe", unit="mg")`` is a clinical dose range;
    ``Range("angle_deg", -90, 90, tools="arm.move")`` an actuator bound. Either bound may be
    ``None`` (open). A missing, non-numeric, infinite or NaN value is refused.
    """

    kind = "rule"

    def __init__(
        self,
        path: str,
        low: float | None = None,
        high: float | None = None,
        *,
        tools: Iterable[str] | str | None = None,
        unit: str = "",
        name: str = "range",
    ) -> None:
        if low is None and high is None:
            raise ValueError("Range needs a low or a high bound")
        for bound in (low, high):
            if bound is not None and not is_number(bound):
                raise ValueError(f"Range bounds must be finite numbers, got {bound!r}")
        if low is not None and high is not None and low > high:
            raise ValueError(f"Range low bound {low} is above its high bound {high}")
        self.path, self.low, self.high = path, low, high
        self.tools = tool_scope(tools)
        self.unit = f" {unit}" if unit else ""
        self.name = name

    def _bounds(self) -> str:
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"{low}..{high}{self.unit}"

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        value = call.arg(self.path)
        if not is_number(value):
            return Deny(
                self.name,
                f"{self.path}={value!r} is not a finite number; allowed range is {self._bounds()}",
            )
        if (self.low is not None and value < self.low) or (
            self.high is not None and value > self.high
        ):
            return Deny(self.name, f"{self.path}={value!r} is outside {self._bounds()}")
        return ALLOW

    def describe(self) -> str:
        return f"{self.path} in {self._bounds()} on {describe_scope(self.tools)}"

    def __repr__(self) -> str:
        return f"Range({self.path!r}, {self.low!r}, {self.high!r}, name={self.name!r})"


class AllowTools:
    """Refuse every call to a tool that is not on the allow list."""

    kind = "rule"

    def __init__(self, tools: Iterable[str] | str, *, name: str = "allow_tools") -> None:
        scope = tool_scope(tools)
        assert scope is not None
        self.tools = scope
        self.name = name

    def evaluate(self, call: ToolCall) -> Decision:
        if call.tool in self.tools:
            return ALLOW
        return Deny(self.name, f"tool {call.tool} is not on the allow list")

    def describe(self) -> str:
        return f"only {describe_scope(self.tools)}"


def _same(value: object, listed: object) -> bool:
    """Equality that does not confuse ``True`` with ``1`` (a list of ids is not a list of flags)."""
    return (type(value) is bool) == (type(listed) is bool) and bool(value == listed)


class _ValueListRule:
    """A rule on whether the argument at ``path`` is one of ``values`` (``True`` is never ``1``)."""

    kind = "rule"
    default_name = ""

    def __init__(
        self,
        path: str,
        values: Iterable[object],
        *,
        tools: Iterable[str] | str | None = None,
        name: str | None = None,
    ) -> None:
        self.path, self.values = path, tuple(values)
        self.tools = tool_scope(tools)
        self.name = name or self.default_name

    def _listed(self, call: ToolCall) -> tuple[bool, object]:
        """Whether the call's value is listed, and the value (``None`` when missing)."""
        value = call.arg(self.path)
        return any(_same(value, listed) for listed in self.values), value

    def _in_scope(self, call: ToolCall) -> bool:
        return self.tools is None or call.tool in self.tools


class AllowValues(_ValueListRule):
    """Refuse calls whose argument at ``path`` is not one of ``values`` (missing: refused).

    ``AllowValues("currency", ["EUR", "USD"], tools="bank.transfer")``.
    """

    default_name = "allow_values"

    def evaluate(self, call: ToolCall) -> Decision:
        if not self._in_scope(call):
            return ALLOW
        listed, value = self._listed(call)
        if listed:
            return ALLOW
        return Deny(self.name, f"{self.path}={value!r} is not one of {list(self.values)!r}")

    def describe(self) -> str:
        return f"{self.path} in {list(self.values)!r} on {describe_scope(self.tools)}"


class DenyValues(_ValueListRule):
    """Refuse calls whose argument at ``path`` is one of ``values`` (missing: not refused).

    ``DenyValues("to", ["ACC-OFFSHORE-1"], tools="bank.transfer")``.
    """

    default_name = "deny_values"

    def evaluate(self, call: ToolCall) -> Decision:
        if not self._in_scope(call):
            return ALLOW
        listed, value = self._listed(call)
        if listed:
            return Deny(self.name, f"{self.path}={value!r} is on the deny list")
        return ALLOW

    def describe(self) -> str:
        return f"{self.path} not in {list(self.values)!r} on {describe_scope(self.tools)}"


RateScope = Literal["tool", "saga", "all"]


class RateLimit:
    """At most ``calls`` calls in any ``seconds``-long sliding window (in this process).

    ``per="tool"`` counts each tool apart, ``"saga"`` each saga apart, ``"all"`` every call
    together. A call counts once this rule has let it through, even if a later rule refuses
    it: the limit can only be reached sooner, never later. Windows use the monotonic clock
    (``monotonic`` may be injected for tests).
    """

    kind = "rule"
    _PRUNE_AT = 10_000

    def __init__(
        self,
        calls: int,
        seconds: float,
        *,
        tools: Iterable[str] | str | None = None,
        per: RateScope = "tool",
        monotonic: Callable[[], float] | None = None,
        name: str = "rate_limit",
    ) -> None:
        if calls < 1 or not seconds > 0:
            raise ValueError(f"RateLimit needs calls >= 1 and seconds > 0, got {calls}, {seconds}")
        if per not in ("tool", "saga", "all"):
            raise ValueError(f"per must be 'tool', 'saga' or 'all', got {per!r}")
        self.calls, self.seconds, self.per = calls, seconds, per
        self.tools = tool_scope(tools)
        self.name = name
        self._monotonic = monotonic or time.monotonic
        self._stamps: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _key(self, call: ToolCall) -> str:
        return {"tool": call.tool, "saga": call.saga_id, "all": ""}[self.per]

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        now = self._monotonic()
        horizon = now - self.seconds
        with self._lock:
            if len(self._stamps) > self._PRUNE_AT:
                self._stamps = {k: d for k, d in self._stamps.items() if d and d[-1] > horizon}
            stamps = self._stamps.setdefault(self._key(call), deque(maxlen=self.calls))
            while stamps and stamps[0] <= horizon:
                stamps.popleft()
            if len(stamps) >= self.calls:
                wait = stamps[0] - horizon
                return Deny(
                    self.name,
                    f"{call.tool}: {self.calls} calls per {self.seconds:g} s reached "
                    f"(per {self.per}); retry in {wait:.1f} s",
                )
            stamps.append(now)
        return ALLOW

    def describe(self) -> str:
        return (
            f"at most {self.calls} calls per {self.seconds:g} s per {self.per} "
            f"on {describe_scope(self.tools)}"
        )


class ApprovalWhen:
    """Require a human approval for calls where ``when(call)`` is ``True``.

    The predicate must return a ``bool``: anything else, or an exception, refuses the call.
    Made by :func:`require_approval`.
    """

    kind = "rule"

    def __init__(
        self,
        when: Callable[[ToolCall], bool],
        *,
        reason: str,
        tools: frozenset[str] | None,
        name: str,
        approvers: tuple[str, ...] = (),
        quorum: int = 1,
    ) -> None:
        if quorum < 1 or (approvers and quorum > len(approvers)):
            raise ValueError(f"quorum must be between 1 and the number of approvers, got {quorum}")
        self.when, self.reason, self.tools, self.name = when, reason, tools, name
        self.approvers, self.quorum = approvers, quorum

    def evaluate(self, call: ToolCall) -> Decision:
        if self.tools is not None and call.tool not in self.tools:
            return ALLOW
        answer: Any = self.when(call)
        if answer is True:
            return RequireApproval(
                self.name, f"{call.tool}: {self.reason}", self.approvers, self.quorum
            )
        if answer is False:
            return ALLOW
        return Deny(self.name, f"approval condition returned {answer!r}, not True or False")

    def describe(self) -> str:
        condition = getattr(self.when, "__name__", type(self.when).__name__)
        return f"approval required when {condition} on {describe_scope(self.tools)}: {self.reason}"


def require_approval(
    when: Callable[[ToolCall], bool],
    *,
    reason: str = "needs a human approval",
    tools: Iterable[str] | str | None = None,
    name: str = "require_approval",
    approvers: Iterable[str] = (),
    quorum: int = 1,
) -> ApprovalWhen:
    """A rule that turns matching calls into :class:`RequireApproval`.

    ``require_approval(lambda c: c.arg("amount", 0) > 10_000, tools="bank.wire")``. Until an
    approval channel is configured, the engine refuses such calls (with this reason).
    ``approvers`` and ``quorum`` are carried on the decision for that channel.
    """
    return ApprovalWhen(
        when,
        reason=reason,
        tools=tool_scope(tools),
        name=name,
        approvers=tuple(approvers),
        quorum=quorum,
    )


__all__ = [
    "AllowTools",
    "AllowValues",
    "ApprovalWhen",
    "DenyValues",
    "Range",
    "RateLimit",
    "describe_scope",
    "is_number",
    "require_approval",
    "tool_scope",
]
