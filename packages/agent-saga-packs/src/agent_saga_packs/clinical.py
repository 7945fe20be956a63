"""Clinical orders: dose limits in any unit, duplicate-order detection, orders undone by cancel.

* :class:`DoseRange` normalises a dose to milligrams before comparing it with the drug's range:
  ``g``, ``mg``, ``ug`` / ``mcg`` / ``µg``, and per-kilogram doses (``mg/kg``, ``ug/kg``,
  ``mcg/kg``, ``g/kg``) multiplied by the patient's weight. A drug not in its table is refused
  (unless a default range is given). A refusal names the drug, the dose as written and in
  milligrams, and the limit. The core's ``Range`` compares one number with
  fixed bounds; it cannot convert units or look up a range per drug, hence this rule.
* :class:`~agent_saga_packs.DuplicateWithin` refuses a second active order of the same drug for
  the same patient within a window (from the order system's own list: a cancelled order does
  not count).
* ``clinical.order`` is COMPENSABLE: ``clinical.cancel_order`` cancels it, and its probe asks the
  order system whether the order with the step's key was placed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_saga import COMPENSABLE, Allow, Decision, Deny, Rule, ToolCall

from ._declare import Declarer
from ._duplicates import DuplicateWithin, text_key
from ._scope import describe_scope, finite_number, in_scope, tool_scope

if TYPE_CHECKING:
    from agent_saga import AgentKit

MG_PER_UNIT: dict[str, float] = {"g": 1000.0, "mg": 1.0, "ug": 0.001, "mcg": 0.001, "µg": 0.001}
"""Milligrams in one of each mass unit (``ug``, ``mcg`` and ``µg`` are the same microgram)."""
MAX_WEIGHT_KG = 500.0


class DoseError(ValueError):
    """A dose that cannot be converted to milligrams (unknown unit, missing weight)."""


def dose_in_mg(dose: float, unit: str, weight_kg: float | None = None) -> float:
    """``dose`` in ``unit`` as milligrams; per-kilogram units need the patient's weight.

    Raises:
        DoseError: the unit is unknown, or a per-kilogram dose comes without a plausible
            weight (a finite number above 0 and at most 500 kg).
    """
    if not isinstance(unit, str):
        raise DoseError(f"unit {unit!r} is not a unit")
    name = unit.strip().lower().replace("\u03bc", "\u00b5")  # the Greek mu as the micro sign
    per_kg = name.endswith("/kg")
    mass = name.removesuffix("/kg")
    if mass not in MG_PER_UNIT:
        known = ", ".join([*MG_PER_UNIT, *(f"{u}/kg" for u in MG_PER_UNIT)])
        raise DoseError(f"unit {unit!r} is not one of {known}")
    mg = dose * MG_PER_UNIT[mass]
    if not per_kg:
        return mg
    if not finite_number(weight_kg) or not 0 < weight_kg <= MAX_WEIGHT_KG:  # type: ignore[operator]
        raise DoseError(f"a dose in {unit} needs the patient's weight in kg, got {weight_kg!r}")
    return mg * float(weight_kg)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DoseLimit:
    """A drug's allowed single dose, in milligrams."""

    low_mg: float
    high_mg: float

    def __post_init__(self) -> None:
        if not (finite_number(self.low_mg) and finite_number(self.high_mg)):
            raise ValueError(f"dose limits must be finite numbers, got {self}")
        if not 0 <= self.low_mg <= self.high_mg:
            raise ValueError(f"dose limit {self.low_mg}..{self.high_mg} mg is not a range")

    def describe(self) -> str:
        return f"{self.low_mg:g}-{self.high_mg:g} mg"


def _mg(value: float) -> str:
    return f"{value:.6g} mg"


def drug_key(name: str) -> str:
    """``name`` as the dose table compares it: NFKC-normalised, case-folded, stripped.

    Full-width letters and a ligature compare equal to plain ones; anything else that differs
    (a stray full stop, a Cyrillic letter that looks Latin, an invisible character) does not,
    so such a name finds no range and the order is refused. The duplicate-order check
    compares names the same way, so a name the table takes for a listed drug is that drug.
    """
    return text_key(name)


class DoseRange:
    """Refuse an order whose dose, converted to milligrams, is outside the drug's range.

    ``DoseRange({"morphine": (0.1, 50)})`` allows only the drugs it lists: any other name
    (misspelled, or a drug nobody gave a range, such as a microgram-dose opioid) is refused.
    A ``default`` range applies to every unlisted name instead; opt in to it knowingly. Drug
    names compare after :func:`drug_key` (NFKC, case-folded). A dose that is missing, not a
    finite number, in an unknown unit, or per kilogram without a weight is refused.

    Args:
        limits: drug name -> ``(low_mg, high_mg)`` or a :class:`DoseLimit`.
        default: the range for drugs not in ``limits`` (``None``, the default: refuse them).
        tools: the ordering tools this rule applies to.
        drug, dose, unit, weight: the argument paths of the call.
    """

    kind = "rule"

    def __init__(
        self,
        limits: Mapping[str, tuple[float, float] | DoseLimit] | None = None,
        *,
        default: tuple[float, float] | DoseLimit | None = None,
        tools: Iterable[str] | str | None = "clinical.order",
        drug: str = "drug",
        dose: str = "dose",
        unit: str = "unit",
        weight: str = "weight_kg",
        name: str = "dose_range",
    ) -> None:
        self.limits: dict[str, DoseLimit] = {}
        for drug_name, bounds in (limits or {}).items():
            key = drug_key(str(drug_name))
            if key in self.limits:
                raise ValueError(f"dose table: {drug_name!r} names a drug listed twice")
            self.limits[key] = _limit(bounds)
        self.default = None if default is None else _limit(default)
        self.tools = tool_scope(tools)
        self.paths = (drug, dose, unit, weight)
        self.name = name

    def limit_for(self, drug: str) -> DoseLimit | None:
        """The drug's range (``default`` for a name not in the table, ``None``: refuse)."""
        return self.limits.get(drug_key(drug), self.default)

    def evaluate(self, call: ToolCall) -> Decision:
        if not in_scope(self.tools, call.tool):
            return Allow()
        drug_path, dose_path, unit_path, weight_path = self.paths
        drug, dose = call.arg(drug_path), call.arg(dose_path)
        unit, weight = call.arg(unit_path), call.arg(weight_path)
        if not isinstance(drug, str) or not drug.strip():
            return Deny(self.name, f"{drug_path}={drug!r} names no drug")
        limit = self.limit_for(drug)
        if limit is None:
            return Deny(self.name, f"{drug}: no dose range is configured for this drug")
        if not finite_number(dose):
            return Deny(
                self.name, f"{drug}: dose {dose!r} is not a number; limit {limit.describe()}"
            )
        written = f"{drug} {dose:g} {unit}"
        try:
            mg = dose_in_mg(dose, unit, weight)
        except DoseError as problem:
            return Deny(self.name, f"{written}: {problem}; limit {limit.describe()}")
        shown = written if _is_mg(unit) else f"{written} = {_mg(mg)}"
        if str(unit).strip().lower().endswith("/kg"):
            shown = f"{written} x {weight:g} kg = {_mg(mg)}"
        if mg > limit.high_mg:
            return Deny(
                self.name,
                f"{shown} is above the limit of {limit.high_mg:g} mg for {drug} "
                f"({limit.describe()})",
            )
        if mg < limit.low_mg:
            return Deny(
                self.name,
                f"{shown} is below the minimum of {limit.low_mg:g} mg for {drug} "
                f"({limit.describe()})",
            )
        return Allow()

    def describe(self) -> str:
        listed = ", ".join(f"{d} {lim.describe()}" for d, lim in sorted(self.limits.items()))
        other = "refused" if self.default is None else self.default.describe()
        ranges = f"{listed}; other drugs {other}" if listed else f"every drug {other}"
        return f"dose in mg (g, mg, ug/mcg, per kg) within {ranges} on {describe_scope(self.tools)}"


def _is_mg(unit: object) -> bool:
    return isinstance(unit, str) and unit.strip().lower() == "mg"


def _limit(bounds: tuple[float, float] | DoseLimit) -> DoseLimit:
    if isinstance(bounds, DoseLimit):
        return bounds
    low, high = bounds
    return DoseLimit(float(low), float(high))


class OrderSystem(Protocol):
    """What the pack needs from the order system (CPOE). Idempotent on ``idempotency_key``."""

    def place(
        self,
        patient: str,
        drug: str,
        dose: float,
        unit: str,
        dose_mg: float,
        route: str,
        *,
        idempotency_key: str,
    ) -> Mapping[str, Any]:
        """Returns at least ``order_id``."""
        ...

    def cancel(self, order_id: str, *, idempotency_key: str) -> Mapping[str, Any]: ...

    def find(self, idempotency_key: str) -> Mapping[str, Any] | None: ...

    def recent_orders(self, since: float) -> Iterable[Mapping[str, Any]]:
        """Orders placed at or after ``since`` and not cancelled (``patient``, ``drug``)."""
        ...


class ClinicalPack:
    """The ordering tool, declared on ``kit`` (or process-wide when ``kit`` is ``None``).

    ``order(patient, drug, dose, unit, weight_kg=None, route="oral")`` is COMPENSABLE: the
    compensation cancels the order. The dose is stored as written and in milligrams.
    """

    def __init__(
        self, kit: AgentKit | None, orders: OrderSystem, *, prefix: str = "clinical"
    ) -> None:
        self.orders = orders
        declare = Declarer(kit, prefix)
        self.tool_names = {"order": declare.name("order")}
        declare.compensator("cancel_order", self._cancel)
        self.order: Callable[..., dict[str, Any]] = declare.tool(
            self._order, "order", COMPENSABLE, compensate="cancel_order", probe=self._landed
        )

    def _order(
        self,
        patient: str,
        drug: str,
        dose: float,
        unit: str,
        weight_kg: float | None = None,
        route: str = "oral",
        *,
        idempotency_key: str,
    ) -> dict[str, Any]:
        """Order ``dose`` ``unit`` of ``drug`` for ``patient``."""
        mg = dose_in_mg(dose, unit, weight_kg)
        placed = self.orders.place(
            patient, drug, dose, unit, mg, route, idempotency_key=idempotency_key
        )
        return dict(placed)

    def _landed(self, idempotency_key: str) -> dict[str, Any] | bool:
        found = self.orders.find(idempotency_key)
        return False if found is None else dict(found)

    def _cancel(self, result: Mapping[str, Any], idempotency_key: str) -> None:
        self.orders.cancel(str(result["order_id"]), idempotency_key=idempotency_key)


def order_rules(
    limits: Mapping[str, tuple[float, float] | DoseLimit] | None = None,
    *,
    recent_orders: Callable[[float], Iterable[Mapping[str, Any]]],
    default: tuple[float, float] | DoseLimit | None = None,
    duplicate_window: float = 6 * 3_600.0,
    clock: Callable[[], float] | None = None,
    tool: str = "clinical.order",
) -> list[Rule]:
    """:class:`DoseRange` and duplicate-order detection (same patient and drug) for ``tool``.

    A drug not in ``limits`` is refused unless ``default`` gives a range for every such drug.
    """
    extra = {} if clock is None else {"clock": clock}
    return [
        DoseRange(limits, default=default, tools=tool),
        DuplicateWithin(
            ("patient", "drug"),
            duplicate_window,
            recent=recent_orders,
            tools=tool,
            what="order",
            name="duplicate_order",
            **extra,
        ),
    ]


__all__ = [
    "MG_PER_UNIT",
    "ClinicalPack",
    "DoseError",
    "DoseLimit",
    "DoseRange",
    "DuplicateWithin",
    "OrderSystem",
    "dose_in_mg",
    "drug_key",
    "order_rules",
]
