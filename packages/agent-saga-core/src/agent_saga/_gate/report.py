"""What the gate contributes to the guarantees manifest and to ``status()``, read from its rules.

Nothing here is a constant: each line is derived from the rules the gate holds (their kind, their
own description, their health probe), so adding or removing a rule, budget or scorer changes
the manifest.
"""

from __future__ import annotations

from typing import Any

from .decisions import Gate


def _kind(rule: object) -> str:
    return str(getattr(rule, "kind", "rule"))


def gate_section(gate: Gate) -> dict[str, Any]:
    """The manifest's ``gate`` section: every rule, and the budgets, scorers, consensus apart."""
    rows = gate.describe()
    return {
        "rules": rows,
        "budgets": [row for row in rows if row["kind"] == "budget"],
        "scorers": [row for row in rows if row["kind"] == "scorer"],
        "consensus": [row for row in rows if row["kind"] == "consensus"],
        "irreversible": "refused",
    }


def gate_before(gate: Gate) -> list[str]:
    """Lines of ``enforced_before_effect`` for the gate."""
    kinds = [_kind(rule) for rule in gate.rules]
    lines = [
        f"gate: {len(gate.rules)} rule(s) ({kinds.count('budget')} budget(s), "
        f"{kinds.count('scorer')} scorer(s), {kinds.count('consensus')} consensus); "
        "the strictest decision wins, a rule that raises refuses"
    ]
    if "scorer" in kinds:
        lines.append("a risk score can only add approval or refusal; every rule still runs")
    if "budget" in kinds:
        lines.append(
            "budget amounts reserved atomically and durably before the effect; released when "
            "the step is undone or raised, committed when the saga commits"
        )
    if "consensus" in kinds:
        lines.append("consensus: validators vote before the effect; each vote is logged")
    return lines


def gate_not_claimed(gate: Gate) -> list[str]:
    """Honest limits that follow from the gate's rules."""
    kinds = {_kind(rule) for rule in gate.rules}
    types = {type(rule).__name__ for rule in gate.rules}
    lines = []
    if "budget" in kinds:
        lines.append(
            "a budget reservation of a process that died stays held (counted against the "
            "limit) until kit.recover() or agent-saga recover settles it from the log; "
            "reservations of sagas that need a human stay held"
        )
    if "memory" in {str(getattr(getattr(rule, "store", None), "kind", "")) for rule in gate.rules}:
        lines.append("budgets on the memory store are per process and lost when it ends")
    if "RateLimit" in types:
        lines.append("rate limits count the calls of this process only")
    if "consensus" in kinds:
        lines.append(
            "a validator that times out is counted as a refusal; its thread is left to finish"
        )
    if "scorer" in kinds:
        lines.append("a risk score is a similarity estimate, not a proof that a call is safe")
    return lines


def gate_status(gate: Gate) -> list[str]:
    """Problems of budget stores, validators and other outside dependencies, read now."""
    return gate.health()


__all__ = ["gate_before", "gate_not_claimed", "gate_section", "gate_status"]
