"""What a chaos run found: each fault point's outcome and the invariants it broke, in words."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._invariants import Violation

MAX_SHOWN = 20
"""Failing fault points shown in full in a failure message."""


@dataclass
class PointResult:
    """One fault point's run: what the saga ended as, and the invariants it broke."""

    kind: str
    label: str
    outcome: str
    violations: list[Violation]
    notes: list[str] = field(default_factory=list)


@dataclass
class ChaosReport:
    """Every fault point run for one transaction."""

    transaction: str
    results: list[PointResult] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """``(point, reason)`` for points that could not be exercised."""

    @property
    def failures(self) -> list[PointResult]:
        return [r for r in self.results if r.violations]

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """The failures in plain words: which fault point broke which invariant, and how."""
        failed = self.failures
        lines = [
            f"agent-saga chaos: {len(failed)} of {len(self.results)} fault point(s) broke an "
            f"invariant of transaction {self.transaction!r}"
        ]
        for result in failed[:MAX_SHOWN]:
            lines.append(f"- fault point: {result.label} (saga: {result.outcome})")
            for violation in result.violations:
                lines.append(f"    broke: {violation.invariant}")
                lines.append(f"      {violation.detail}")
            lines += [f"    note: {note}" for note in result.notes]
        if len(failed) > MAX_SHOWN:
            lines.append(
                f"- and {len(failed) - MAX_SHOWN} more fault point(s); report.failures lists all"
            )
        for point, reason in self.skipped:
            lines.append(f"- not exercised: {point}: {reason}")
        return "\n".join(lines)
