"""Conflicts between origins in a merged view: found and escalated, never resolved.

Each is a CRITICAL certify finding, so ``agent-saga certify`` on a mesh exits non-zero until a
human looks:

* ``rejected``: records (or a checkpoint) a mesh holds that no longer verify: changed after the
  merge, or a key that does not speak for the origin;
* ``equivocation``: an origin signed two histories (a cloned device, a rewritten log);
* ``double_compensation``: two origins compensated the same external effect (the same
  idempotency key), so it may have been undone twice;
* ``effect_after_halt``: an origin logged a COMPENSABLE or IRREVERSIBLE step after a fleet halt
  in the merged order (the latest ``control.halt`` or ``control.resume`` of any origin decides),
  saying whether its device had seen the halt when it acted (it had when its latest
  ``mesh.seen`` reached the halt record);
* ``budget_overspent``: the effects still standing across every origin spend more from a fleet
  budget than its limit, although each device stayed within what it could see.

A saga whose records come from two origins is a WARNING (``saga_on_two_origins``): it is
allowed, but each device ran it without the other's steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ..._history.views import CompensationState, SagaView, StepOutcome
from ..._log.codec import JSONValue
from ..._log.records import Kind, Semantics
from .._certify import CRITICAL, WARNING, Finding
from .clock import SEEN_KIND, MeshRecord, seen_frontier
from .view import MeshView

__all__ = ["FleetBudget", "find_conflicts", "saga_origins"]

_EFFECTS = frozenset({Semantics.COMPENSABLE.value, Semantics.IRREVERSIBLE.value})


@dataclass(frozen=True)
class FleetBudget:
    """A limit on what the whole fleet may spend: the sum of the numeric argument at ``amount``
    (a dotted path) over every effect of the ``tools`` (``None``: every tool) still standing,
    whichever origin made it."""

    name: str
    limit: Decimal
    amount: str = "amount"
    tools: frozenset[str] | None = None

    @classmethod
    def parse(cls, text: str) -> FleetBudget:
        """``NAME=LIMIT[:AMOUNT_PATH[:TOOL,TOOL...]]``, as the command line takes it.

        Raises:
            ValueError: the text does not read that way; the message says what is wrong.
        """
        name, sep, rest = text.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"a fleet budget reads NAME=LIMIT[:AMOUNT[:TOOLS]], got {text!r}")
        limit_text, _, tail = rest.partition(":")
        amount, _, tools = tail.partition(":")
        try:
            limit = Decimal(limit_text)
        except InvalidOperation:
            raise ValueError(
                f"the limit of budget {name!r} is not a number: {limit_text!r}"
            ) from None
        if not limit.is_finite() or limit < 0:
            raise ValueError(f"the limit of budget {name!r} must be a finite number >= 0")
        scope = frozenset(t for t in tools.split(",") if t) if tools else None
        return cls(name.strip(), limit, amount or "amount", scope)


def saga_origins(records: Iterable[MeshRecord]) -> dict[str, list[str]]:
    """saga id -> the names of the origins with records of it, in the order they appear."""
    found: dict[str, list[str]] = {}
    for item in records:
        saga = item.record.saga
        if saga is not None and item.origin not in found.setdefault(saga, []):
            found[saga].append(item.origin)
    return found


def find_conflicts(
    view: MeshView, sagas: Sequence[SagaView], budgets: Sequence[FleetBudget] = ()
) -> list[Finding]:
    """Every conflict of the view (see the module docstring); ``sagas`` are its saga views."""
    findings = [Finding(CRITICAL, "rejected", str(rejection)) for rejection in view.rejected]
    for fork in view.forks:
        sizes = ", ".join(str(s) for s in fork.sizes)
        findings.append(
            Finding(
                CRITICAL,
                "equivocation",
                f"origin {fork.origin} signed {len(fork.sizes)} different histories "
                f"({sizes} records) that agree only on their first {fork.common} records; "
                "the view holds those",
            )
        )
    origins = saga_origins(view.records)
    for saga, names in origins.items():
        if len(names) > 1:
            message = f"saga has records from several origins: {', '.join(names)}"
            findings.append(Finding(WARNING, "saga_on_two_origins", message, saga))
    findings.extend(_double_compensations(view.records))
    findings.extend(_effects_after_halt(view.records))
    for budget in budgets:
        findings.extend(_overspent(budget, sagas, origins))
    return findings


def _double_compensations(records: Sequence[MeshRecord]) -> list[Finding]:
    by_key: dict[str, dict[str, str]] = {}
    for item in records:
        record = item.record
        key = record.data.get("idempotency_key")
        if record.kind == Kind.COMP_INTENT and isinstance(key, str) and record.saga:
            by_key.setdefault(key, {}).setdefault(item.origin, record.saga)
    findings = []
    for key, origins in by_key.items():
        if len(origins) > 1:
            who = ", ".join(f"{name} (saga {saga})" for name, saga in origins.items())
            message = (
                f"the effect with idempotency key {key.removesuffix('/compensate')} was "
                f"compensated by {len(origins)} origins: {who}; it may have been undone twice"
            )
            findings.append(
                Finding(CRITICAL, "double_compensation", message, list(origins.values())[-1])
            )
    return findings


def _effects_after_halt(records: Sequence[MeshRecord]) -> list[Finding]:
    halt: MeshRecord | None = None
    seen: dict[str, dict[str, tuple[int, str]]] = {}
    findings = []
    for item in records:
        record = item.record
        if record.kind == Kind.HALT:
            halt = item
        elif record.kind == Kind.RESUME:
            halt = None
        elif record.kind == SEEN_KIND:
            seen[item.origin_id] = seen_frontier(record)
        elif (
            record.kind == Kind.STEP_INTENT
            and halt is not None
            and record.data.get("semantics") in _EFFECTS
        ):
            had_seen = halt.origin_id == item.origin_id or (
                seen.get(item.origin_id, {}).get(halt.origin_id, (0, ""))[0] >= halt.record.seq
            )
            why = halt.record.data.get("reason")
            knew = "had seen it" if had_seen else "had not yet seen it"
            message = (
                f"{record.data.get('tool')} ran on origin {item.origin} after a fleet halt "
                f"({why!r}, origin {halt.origin} record {halt.record.seq}); the device {knew}"
            )
            ordinal = record.data.get("ordinal")
            findings.append(
                Finding(
                    CRITICAL,
                    "effect_after_halt",
                    message,
                    record.saga,
                    ordinal if type(ordinal) is int else None,
                    str(record.data.get("tool")),
                )
            )
    return findings


def _amount(args: JSONValue, path: str) -> Decimal | None:
    value = args
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount.is_finite() else None


def _overspent(
    budget: FleetBudget, sagas: Sequence[SagaView], origins: dict[str, list[str]]
) -> list[Finding]:
    spent: dict[str, Decimal] = {}
    for saga in sagas:
        where = (origins.get(saga.id) or ["?"])[0]
        for step in saga.steps:
            standing = step.outcome in (StepOutcome.DONE, StepOutcome.UNKNOWN) and (
                step.compensation_state is not CompensationState.COMPENSATED
            )
            if not standing or (budget.tools is not None and step.tool not in budget.tools):
                continue
            amount = _amount(step.args, budget.amount)
            if amount is not None:
                spent[where] = spent.get(where, Decimal(0)) + amount
    total = sum(spent.values(), Decimal(0))
    if total <= budget.limit:
        return []
    parts = ", ".join(f"{name}: {value}" for name, value in sorted(spent.items()))
    message = (
        f"fleet budget {budget.name} overspent across devices: {total} spent of {budget.limit} "
        f"({parts})"
    )
    return [Finding(CRITICAL, "budget_overspent", message)]
