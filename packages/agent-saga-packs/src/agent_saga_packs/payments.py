"""Payments: charges undone by refunds, and wires that cannot be undone.

* ``payments.charge`` is COMPENSABLE: its compensation ``payments.refund`` refunds the charge in
  full, with its own idempotency key, and its probe asks the bank whether the charge with the
  step's key landed (so a crash between the charge and its log record is recovered).
* ``payments.wire`` is IRREVERSIBLE: once sent, money is gone. The core asks a human for every
  IRREVERSIBLE call; :func:`wire_rules` adds three-of-three validator consensus, a larger
  approval quorum above a threshold and duplicate-wire detection, and an optional cap.

The pack talks to the bank through :class:`Bank`; ``agent_saga_packs.testing.LedgerBank`` is a
SQLite stand-in that keeps its promises (idempotency keys, refunds at most once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agent_saga import (
    COMPENSABLE,
    IRREVERSIBLE,
    Consensus,
    MaxValue,
    Rule,
    ToolCall,
    require_approval,
)

from ._declare import Declarer
from ._duplicates import DuplicateWithin

if TYPE_CHECKING:
    from agent_saga import AgentKit


class Bank(Protocol):
    """What the pack needs from a payment provider. Amounts are integers in minor units.

    Every call with an ``idempotency_key`` must be idempotent on it: a second call with the
    same key returns the first result and moves no money.
    """

    def charge(
        self, customer: str, amount: int, currency: str, *, idempotency_key: str
    ) -> Mapping[str, Any]:
        """Returns at least ``charge_id``."""
        ...

    def find_charge(self, idempotency_key: str) -> Mapping[str, Any] | None: ...

    def refund(self, charge_id: str, *, idempotency_key: str) -> Mapping[str, Any]:
        """Refund in full; a charge is refunded at most once."""
        ...

    def wire(
        self, beneficiary: str, amount: int, currency: str, reference: str, *, idempotency_key: str
    ) -> Mapping[str, Any]: ...

    def find_wire(self, idempotency_key: str) -> Mapping[str, Any] | None: ...

    def recent_wires(self, since: float) -> Iterable[Mapping[str, Any]]:
        """Wires sent at or after ``since`` (epoch seconds), with ``beneficiary``/``amount``."""
        ...


class PaymentsPack:
    """The payment tools, declared on ``kit`` (or process-wide when ``kit`` is ``None``).

    Tools (names under ``prefix``): ``charge(customer, amount, currency)`` (COMPENSABLE, undone
    by ``refund``) and ``wire(beneficiary, amount, currency, reference)`` (IRREVERSIBLE). Both
    pass the step's idempotency key to the bank, so a retried or redelivered call moves money
    once.
    """

    def __init__(self, kit: AgentKit | None, bank: Bank, *, prefix: str = "payments") -> None:
        self.bank = bank
        declare = Declarer(kit, prefix)
        self.tool_names = {action: declare.name(action) for action in ("charge", "wire")}
        declare.compensator("refund", self._refund)
        self.charge: Callable[..., dict[str, Any]] = declare.tool(
            self._charge, "charge", COMPENSABLE, compensate="refund", probe=self._charge_landed
        )
        self.wire: Callable[..., dict[str, Any]] = declare.tool(
            self._wire, "wire", IRREVERSIBLE, probe=self._wire_landed
        )

    def _charge(
        self, customer: str, amount: int, currency: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Charge ``amount`` (minor units) in ``currency`` to ``customer``."""
        return dict(self.bank.charge(customer, amount, currency, idempotency_key=idempotency_key))

    def _charge_landed(self, idempotency_key: str) -> dict[str, Any] | bool:
        found = self.bank.find_charge(idempotency_key)
        return False if found is None else dict(found)

    def _refund(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        self.bank.refund(str(result["charge_id"]), idempotency_key=idempotency_key)

    def _wire(
        self, beneficiary: str, amount: int, currency: str, reference: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Wire ``amount`` (minor units) in ``currency`` to ``beneficiary``. Final."""
        return dict(
            self.bank.wire(
                beneficiary, amount, currency, reference, idempotency_key=idempotency_key
            )
        )

    def _wire_landed(self, idempotency_key: str) -> dict[str, Any] | bool:
        found = self.bank.find_wire(idempotency_key)
        return False if found is None else dict(found)


def wire_rules(
    validators: Sequence[Callable[[ToolCall], object]] | Mapping[str, Callable[[ToolCall], object]],
    *,
    recent_wires: Callable[[float], Iterable[Mapping[str, Any]]],
    approval_above: int,
    quorum_above: int = 2,
    approvers: Iterable[str] = (),
    duplicate_window: float = 86_400.0,
    max_amount: int | None = None,
    clock: Callable[[], float] | None = None,
    tool: str = "payments.wire",
) -> list[Rule]:
    """The gate rules for wires, from the core's library plus duplicate detection.

    * :class:`agent_saga.Consensus`: every validator must approve every wire (three of three
      with three validators); a refusal, an exception or a timeout is a "no", and every vote
      is a record in the saga's log.
    * :func:`agent_saga.require_approval`: above ``approval_above`` a quorum of
      ``quorum_above`` humans (from ``approvers``, else the kit's) must approve. Below it, the
      core's own rule still asks one human, as for every IRREVERSIBLE call.
    * :class:`~agent_saga_packs.DuplicateWithin`: no two wires of the same amount to the same
      beneficiary within ``duplicate_window`` seconds, from the bank's own list of wires.
    * :class:`agent_saga.MaxValue` when ``max_amount`` is given: a hard cap.
    """
    if len(validators) < 1:
        raise ValueError("wire_rules needs validators: every one of them must approve a wire")

    def above_threshold(call: ToolCall) -> bool:
        amount = call.arg("amount")
        return not isinstance(amount, int) or amount > approval_above

    extra = {} if clock is None else {"clock": clock}
    rules: list[Rule] = [
        Consensus(validators, tools=tool, name="wire_consensus"),
        require_approval(
            above_threshold,
            reason=f"a wire above {approval_above} needs {quorum_above} approvers",
            tools=tool,
            name="wire_approval",
            approvers=approvers,
            quorum=quorum_above,
        ),
        DuplicateWithin(
            ("beneficiary", "amount"),
            duplicate_window,
            recent=recent_wires,
            tools=tool,
            what="wire",
            name="duplicate_wire",
            **extra,
        ),
    ]
    if max_amount is not None:
        rules.append(MaxValue(max_amount, path="amount", tools=frozenset({tool})))
    return rules


__all__ = ["Bank", "DuplicateWithin", "PaymentsPack", "wire_rules"]
