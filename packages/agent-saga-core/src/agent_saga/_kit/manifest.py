"""The guarantees manifest and the readiness report, both computed from the live configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._engine.runtime import Runtime
from .._engine.spec import ToolSpec
from .._gate.report import gate_before, gate_not_claimed, gate_section, gate_status
from .._log.records import Semantics

MANIFEST_VERSION = 1

VERIFIED = {
    "file": "agent-saga verify and certify re-check the file log from its first byte, every "
    "segment in turn and each sealed segment against its summary, and that the open segment "
    "does not end before its synced watermark, as opening the store does, then the log against "
    "the home's latest signed checkpoint.",
    "postgres": "agent-saga verify and certify re-check every row of the PostgreSQL log in seq "
    "order (a missing, edited or relabelled row is found), then the log against the latest "
    "signed checkpoint in the home they run with; rows removed from its end are found only by "
    "a checkpoint.",
}
"""What the commands check of each durable store's log (stated in ``docs/guarantees.md``)."""
BEYOND_CHECKPOINT = (
    "records appended after the latest signed checkpoint rest on the chain alone (and, in the "
    "file store, on the synced watermark while log.synced is intact): a full re-hash of the "
    "log by someone who can write it is found only against a checkpoint kept where they "
    "cannot write"
)

REDACTION_CHECKED = (
    "a value masked after it was written (agent-saga redact) counts only when a later "
    "log.redaction record signed by a trusted administrator key (admin_keys) names it; the "
    "masked record keeps its hash, and its kind, saga, seq, ts and every value not masked are "
    "still checked against it"
)
"""What a redaction may change (stated in ``docs/guarantees.md``)."""
REDACTION_LIMIT = (
    "whoever holds a trusted administrator key, or can change admin_keys or the key files it "
    "names, can mask any value under args, result, error or cause (not change anything "
    "else); records written before record version 2 and masked in place rest on that "
    "signature, not on their hash"
)


@dataclass(frozen=True)
class Status:
    """Readiness: ``ready`` only when every signal the engine needs was read and is healthy."""

    ready: bool
    reasons: tuple[str, ...] = ()
    checks: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "reasons": list(self.reasons), "checks": self.checks}


def status(runtime: Runtime, tools: list[ToolSpec]) -> Status:
    """Read every signal now; anything unreadable or unhealthy makes the answer "not ready"."""
    reasons: list[str] = []
    checks: dict[str, str] = {}
    try:
        problems = runtime.store.health()
    except Exception as exc:  # a health probe that breaks is itself a problem
        problems = [f"log store health could not be read: {exc}"]
    checks["log_store"] = "ok" if not problems else "; ".join(problems)
    reasons.extend(problems)
    try:
        halt = runtime.kill_switch.state()
    except Exception as exc:
        reasons.append(f"kill switch could not be read: {exc}")
        checks["kill_switch"] = "unreadable"
    else:
        if not halt.readable:
            checks["kill_switch"] = "unreadable"
            reasons.append(halt.reason)
        elif halt.halted:
            checks["kill_switch"] = f"halted: {halt.reason}"
            reasons.append(f"halted: {halt.reason}")
        else:
            checks["kill_switch"] = "not halted"
    missing = sorted(
        {
            spec.compensation.name
            for spec in tools
            if spec.compensation is not None
            and spec.compensation.name is not None
            and runtime.registry.get(spec.compensation.name) is None
        }
    )
    if missing:
        reasons.append(f"compensators not registered: {', '.join(missing)}")
    checks["compensators"] = "ok" if not missing else f"missing: {', '.join(missing)}"
    gate_problems = gate_status(runtime.gate)  # budget stores and validators, read now
    checks["gate"] = "ok" if not gate_problems else "; ".join(gate_problems)
    reasons.extend(gate_problems)
    return Status(not reasons, tuple(reasons), checks)


def guarantees(runtime: Runtime, tools: list[ToolSpec], version: str) -> dict[str, Any]:
    """What this configuration enforces and guarantees, and what it does not claim."""
    store = runtime.store.describe()
    durable = bool(store.get("durable"))
    tool_rows = [_tool_row(runtime, spec) for spec in tools]
    in_process = sorted(row["tool"] for row in tool_rows if row["compensation"] == "in-process")
    before = [
        "kill switch checked before every step; unreadable state refuses the step",
        *gate_before(runtime.gate),
        "IRREVERSIBLE steps refused (no approval channel is configured)",
        "a named compensation must be registered before its step may run",
        "a tool declared on a kit runs only in that kit's transactions (refused in another's)",
        "the tool receives the values that were gated, approved and logged: built-in "
        "containers among its arguments are copied once, before the gate",
    ]
    if durable:
        before.append("intent of COMPENSABLE and IRREVERSIBLE steps fsynced before the effect")
    probes = sorted(
        spec.name
        for spec in tools
        if spec.semantics is not Semantics.REVERSIBLE and runtime.registry.probe(spec.name)
    )
    after = [
        "on failure, committed steps compensated in reverse order, each at most once per process",
        "a saga whose process died is finished by `agent-saga recover` (or kit.recover()) once "
        "its owner's lock is released; each recovered saga gets a terminal record",
        "a failed compensation is recorded and the saga ends needs_human",
        "a savepoint compensates only the steps made inside it, in its own thread or task",
        "a step whose tool raised is compensated when its tool's probe says the effect landed; "
        "a probe that cannot tell makes the saga need a human",
        "a compensation interrupted by Ctrl-C, exit or cancellation stays pending (no terminal "
        "record); recovery finishes the rollback once the process is gone",
        "a store opened before os.fork() refuses to write in the child",
        "every record hash-chained; verify reports the first bad offset",
        REDACTION_CHECKED,
    ]
    if durable:
        after.append("terminal record of every transaction fsynced before it returns")
    if store.get("kind") in VERIFIED:
        after.append(VERIFIED[str(store.get("kind"))])
    not_claimed = [
        "a step whose tool raised, when its tool has no probe, is taken to have had no effect: "
        "it is not compensated and is listed as unknown in the rollback report",
        "arguments that are not built-in containers (objects, sessions) are passed by "
        "reference: a change made to one after the gate is seen by the tool, not by the log",
        "records of IRREVERSIBLE steps prove an attempt, not that the effect can be undone",
        "after a crash, a step whose outcome was not logged is compensated only if its tool's "
        "probe says it landed; with no probe it is escalated to a human",
        "compensators must be idempotent per idempotency key: recovery re-runs one whose "
        "outcome a crash left unlogged",
        BEYOND_CHECKPOINT,
        REDACTION_LIMIT,
        "compensators run even while halted: the kill switch stops new effects, not undo",
    ]
    if not durable:
        not_claimed.insert(0, f"the {store.get('kind')} store keeps nothing after the process ends")
    if runtime.fast_path:
        not_claimed.append(
            "records of REVERSIBLE steps are buffered until the next durable record; "
            "a crash may lose them (their effects are local by definition)"
        )
    if in_process:
        not_claimed.append(
            "compensations given as plain callables cannot run in another process: "
            + ", ".join(in_process)
        )
    if not store.get("keyed_chain"):
        not_claimed.append("the chain is unkeyed: anyone with write access can re-hash it")
    not_claimed.extend(gate_not_claimed(runtime.gate))
    return {
        "manifest_version": MANIFEST_VERSION,
        "agent_saga_version": version,
        "store": store,
        "enforced_before_effect": before,
        "guaranteed_after": after,
        "gate": gate_section(runtime.gate),
        "kill_switch": runtime.kill_switch.describe(),
        "compensators": {
            "registered": runtime.registry.names(),
            "probes": probes,
            "tools": tool_rows,
        },
        "not_claimed": not_claimed,
    }


def _tool_row(runtime: Runtime, spec: ToolSpec) -> dict[str, Any]:
    ref = spec.compensation
    if ref is None:
        kind = "none needed" if spec.semantics is Semantics.REVERSIBLE else "none"
    elif ref.name is None:
        kind = "in-process"
    elif runtime.registry.get(ref.name) is None:
        kind = "missing"
    else:
        kind = "by-name"
    return {
        "tool": spec.name,
        "semantics": spec.semantics.value,
        "compensation": kind,
        "compensator": ref.name if ref is not None else None,
        "recoverable": kind == "by-name",
    }
