"""A gate rule that refuses a call repeating an effect already made within a time window.

The core has rate limits (how many calls) but nothing that recognises *the same* call: a wire
of the same amount to the same beneficiary an hour after the first, or a second order of the
same drug for the same patient. :class:`DuplicateWithin` asks the system of record for its
recent effects and compares the fields that make two effects the same.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent_saga import Allow, Decision, Deny, ToolCall

from ._scope import describe_scope, finite_number, in_scope, tool_scope

RecentEffects = Callable[[float], Iterable[Mapping[str, Any]]]
"""``recent(since)``: the effects made at or after ``since`` (epoch seconds), each a mapping
with the rule's field names (and optionally ``"id"``, named in the refusal)."""

_MISSING = object()
_SHOWN = 60


def text_key(text: str) -> str:
    """``text`` as rules compare it: NFKC-normalised, case-folded, stripped.

    Full-width letters and ligatures compare equal to plain ones (``\uff50aracetamol`` is
    ``paracetamol``); a letter from another script that merely looks the same does not."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return unicodedata.normalize("NFKC", folded).strip()


def _normal(value: object) -> object:
    """Strings compare as :func:`text_key`, numbers by value (``100 == 100.0``)."""
    if isinstance(value, str):
        return text_key(value)
    if finite_number(value):
        return float(value)  # type: ignore[arg-type]
    return value


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


class DuplicateWithin:
    """Refuse a call whose ``fields`` match an effect made within the last ``window`` seconds.

    ``DuplicateWithin(("beneficiary", "amount"), 86_400, recent=bank.recent_wires,
    tools="payments.wire")`` refuses a second wire of the same amount to the same beneficiary
    within a day.

    The earlier effects come from ``recent(since)``, the system of record's own list, not from
    a memory of calls this rule let through. So a call that a later rule refused, or whose
    saga was rolled back (a cancelled order is not listed), does not count; effects made by
    other processes and before a restart do. Text compares after :func:`text_key` (NFKC,
    case-folded, stripped), numbers by value.

    Fails closed: a call missing one of the fields, or a lookup that raises, is refused.
    Not atomic: two agents making the same call at the same instant can both pass (the
    system's idempotency keys still stop the same call being delivered twice).

    Args:
        fields: argument paths (dotted, as in ``ToolCall.arg``) that identify an effect.
        window: seconds to look back.
        recent: the system of record's lookup (see :data:`RecentEffects`).
        tools: the tools this rule applies to (``None``: every tool).
        clock: epoch seconds now (inject the system's clock in tests).
        what: how a refusal names the effect ("wire", "order").
    """

    kind = "rule"

    def __init__(
        self,
        fields: Sequence[str],
        window: float,
        *,
        recent: RecentEffects,
        tools: Iterable[str] | str | None = None,
        clock: Callable[[], float] = time.time,
        what: str = "call",
        name: str = "duplicate",
    ) -> None:
        if isinstance(fields, str) or not fields:
            raise ValueError("DuplicateWithin needs a list of one or more field names")
        if not finite_number(window) or window <= 0:
            raise ValueError(f"window must be a positive number of seconds, got {window!r}")
        if not callable(recent):
            raise TypeError("recent must be callable: recent(since) -> effects since then")
        self.fields = tuple(fields)
        self.window = float(window)
        self.recent = recent
        self.tools = tool_scope(tools)
        self.clock = clock
        self.what = what
        self.name = name

    def evaluate(self, call: ToolCall) -> Decision:
        if not in_scope(self.tools, call.tool):
            return Allow()
        values = {field: call.arg(field, _MISSING) for field in self.fields}
        missing = [field for field, value in values.items() if value is _MISSING]
        if missing:
            return Deny(
                self.name,
                f"cannot check for a duplicate {self.what}: no {', '.join(missing)} in the call",
            )
        wanted = {field: _normal(value) for field, value in values.items()}
        since = self.clock() - self.window
        for earlier in self.recent(since):
            if all(_normal(earlier.get(f, _MISSING)) == wanted[f] for f in self.fields):
                same = ", ".join(f"{f}={_show(values[f])}" for f in self.fields)
                made = f" ({earlier['id']})" if "id" in earlier else ""
                return Deny(
                    self.name,
                    f"{_article(self.what)} {self.what} with {same} was already made "
                    f"within the last {_window(self.window)}{made}",
                )
        return Allow()

    def describe(self) -> str:
        return (
            f"no two {self.what}s with the same {', '.join(self.fields)} within "
            f"{_window(self.window)} on {describe_scope(self.tools)}"
        )


def _window(seconds: float) -> str:
    for unit, size in (("day", 86_400.0), ("hour", 3_600.0), ("minute", 60.0)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"
