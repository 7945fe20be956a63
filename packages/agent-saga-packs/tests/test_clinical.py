"""The clinical pack against the SQLite order book: doses in any unit, duplicates, cancels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
from agent_saga import (
    AgentKit,
    CompensatorRegistry,
    FakeClock,
    GateRefused,
    Range,
    SagaRolledBack,
    ToolCall,
)
from agent_saga import Semantics as S
from agent_saga_packs.clinical import (
    ClinicalPack,
    DoseError,
    DoseLimit,
    DoseRange,
    dose_in_mg,
    order_rules,
)
from agent_saga_packs.testing import SQLiteOrderBook
from pytest_agent_saga import ChaosRunner

if TYPE_CHECKING:
    from pathlib import Path

LIMITS = {"gentamicin": (20.0, 500.0), "paracetamol": (100.0, 1_000.0), "morphine": (0.1, 50.0)}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_800_000_000.0)


@pytest.fixture
def orders(tmp_path: Path, clock: FakeClock) -> SQLiteOrderBook:
    return SQLiteOrderBook(tmp_path / "orders.db", clock=clock.now)


@pytest.fixture
def ward(
    tmp_path: Path, orders: SQLiteOrderBook, clock: FakeClock
) -> tuple[AgentKit, ClinicalPack]:
    kit = AgentKit(
        home=tmp_path / "agent",
        registry=CompensatorRegistry(),
        rules=order_rules(LIMITS, recent_orders=orders.recent_orders, clock=clock.now),
    )
    return kit, ClinicalPack(kit, orders)


@pytest.mark.parametrize(
    ("dose", "unit", "weight", "mg"),
    [
        (0.5, "g", None, 500.0),
        (5, "mg", None, 5.0),
        (250, "ug", None, 0.25),
        (250, "mcg", None, 0.25),
        (250, "\u00b5g", None, 0.25),  # the micro sign
        (250, "\u03bcg", None, 0.25),  # the Greek mu
        (7, "mg/kg", 80, 560.0),
        (15, "MCG/KG", 70, 1.05),
        (0.01, "g/kg", 10, 100.0),
    ],
)
def test_doses_are_normalised_to_milligrams(
    dose: float, unit: str, weight: float | None, mg: float
) -> None:
    assert math.isclose(dose_in_mg(dose, unit, weight), mg)


@pytest.mark.parametrize(
    ("unit", "weight", "problem"),
    [
        ("mL", None, "unit 'mL' is not one of g, mg, ug, mcg, µg, g/kg"),
        ("mg/kg", None, "a dose in mg/kg needs the patient's weight in kg, got None"),
        ("mg/kg", 0, "needs the patient's weight in kg, got 0"),
        ("mg/kg", 900, "needs the patient's weight in kg, got 900"),
        ("mg/kg", float("nan"), "got nan"),
    ],
)
def test_doses_that_cannot_be_converted(unit: str, weight: float | None, problem: str) -> None:
    with pytest.raises(DoseError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        dose_in_mg(5, unit, weight)


def call(drug: object, dose: object, unit: object = "mg", weight: object = None) -> ToolCall:
    args = {"patient": "p-1", "drug": drug, "dose": dose, "unit": unit, "weight_kg": weight}
    return ToolCall("clinical.order", S.COMPENSABLE, args, "saga", 1)


REFUSALS = [
    (call("morphine", 500), "morphine 500 mg is above the limit of 50 mg for morphine (0.1-50 mg)"),
    (
        call("morphine", 0.05),
        "morphine 0.05 mg is below the minimum of 0.1 mg for morphine (0.1-50 mg)",
    ),
    (
        call("Morphine", 0.06, "g"),
        "Morphine 0.06 g = 60 mg is above the limit of 50 mg for Morphine (0.1-50 mg)",
    ),
    (call("fentanyl", 50, "mcg"), "fentanyl: no dose range is configured for this drug"),
    (
        call("gentamicin", 7, "mg/kg", 80),
        "gentamicin 7 mg/kg x 80 kg = 560 mg is above the limit of 500 mg for gentamicin "
        "(20-500 mg)",
    ),
    (
        call("gentamicin", 7, "mg/kg"),
        "gentamicin 7 mg/kg: a dose in mg/kg needs the patient's weight in kg, got None; "
        "limit 20-500 mg",
    ),
    (call("morphine", "5"), "morphine: dose '5' is not a number; limit 0.1-50 mg"),
    (call("morphine", 5, "tablets"), "morphine 5 tablets: unit 'tablets' is not one of"),
    (call("", 5), "drug='' names no drug"),
]


@pytest.mark.parametrize(("order", "reason"), REFUSALS)
def test_refusals_name_the_drug_the_dose_and_the_limit(order: ToolCall, reason: str) -> None:
    decision = DoseRange(LIMITS).evaluate(order)
    assert decision.rank == 2
    assert reason in decision.reason  # type: ignore[union-attr]


UNKNOWN_DRUGS = [
    "Morphine.",  # a stray full stop
    "m\u043erphine",  # a Cyrillic o
    "morphine\u200b",  # a zero-width space
    "fentanyl",  # a microgram-dose drug nobody listed
    "ketamine",
]


@pytest.mark.parametrize("drug", UNKNOWN_DRUGS)
def test_a_drug_not_in_the_table_is_refused_by_default(drug: str, orders: SQLiteOrderBook) -> None:
    order = call(drug, 0.2)
    by_default = DoseRange({"morphine": (0.1, 50)}).evaluate(order)
    assert by_default.reason == f"{drug}: no dose range is configured for this drug"  # type: ignore[union-attr]
    rules = order_rules({"morphine": (0.1, 50)}, recent_orders=orders.recent_orders)
    assert [rule.evaluate(order).rank for rule in rules] == [2, 0]


def test_drug_names_compare_case_folded_and_nfkc_normalised() -> None:
    table = DoseRange({"Morphine": (0.1, 50), "\uff27entamicin": (20, 500)})  # a full-width G
    assert table.evaluate(call(" MORPHINE ", 10)).rank == 0
    assert table.evaluate(call("\uff4dorphine", 10)).rank == 0  # a full-width m
    assert table.evaluate(call("gentamicin", 100)).rank == 0
    assert table.evaluate(call("GENTAMICIN", 600)).rank == 2
    assert "gentamicin 20-500 mg" in table.describe()


def test_doses_within_range_pass_and_unlisted_drugs_can_be_refused() -> None:
    assert DoseRange(LIMITS).evaluate(call("gentamicin", 5, "mg/kg", 80)).rank == 0
    assert DoseRange(default=(0.1, 50)).evaluate(call("morphine", 5000, "mcg")).rank == 0
    strict = DoseRange({"morphine": DoseLimit(0.5, 20)}, default=None)
    refused = strict.evaluate(call("ketamine", 5))
    assert refused.reason == "ketamine: no dose range is configured for this drug"  # type: ignore[union-attr]
    assert strict.evaluate(call("MORPHINE ", 10)).rank == 0
    other = ToolCall("labs.order", S.COMPENSABLE, {"drug": "x"}, "saga", 1)
    assert strict.evaluate(other).rank == 0
    with pytest.raises(ValueError, match="is not a range"):
        DoseLimit(10, 1)


def test_an_order_within_range_is_placed_with_its_dose_in_mg(
    ward: tuple[AgentKit, ClinicalPack], orders: SQLiteOrderBook
) -> None:
    kit, pack = ward
    with kit, kit.transaction("admission"):
        placed = pack.order("p-104", "gentamicin", 5, "mg/kg", weight_kg=72, route="iv")
        with pytest.raises(GateRefused) as refused:
            pack.order("p-104", "morphine", 500, "mg")
    assert (placed["dose_mg"], placed["route"]) == (360.0, "iv")
    assert str(refused.value) == (
        "clinical.order: refused by dose_range: morphine 500 mg is above the limit of 50 mg "
        "for morphine (0.1-50 mg)"
    )
    assert orders.active() == [("p-104", "gentamicin", 360.0)]


def test_a_second_order_of_the_same_drug_is_refused_until_the_window_passes(
    ward: tuple[AgentKit, ClinicalPack], orders: SQLiteOrderBook, clock: FakeClock
) -> None:
    kit, pack = ward
    with kit:
        with kit.transaction("morning round"):
            pack.order("p-104", "paracetamol", 1, "g")
        clock.advance(2 * 3_600)
        with kit.transaction("afternoon round"):
            with pytest.raises(GateRefused) as refused:
                pack.order("p-104", "Paracetamol", 500, "mg")
            pack.order("p-105", "paracetamol", 500, "mg")  # another patient
        clock.advance(5 * 3_600)
        with kit.transaction("evening round"):
            pack.order("p-104", "paracetamol", 500, "mg")
    assert refused.value.rule == "duplicate_order"
    assert refused.value.reason == (
        "an order with patient='p-104', drug='Paracetamol' was already made within the last "
        "6 hours (ord_0001)"
    )
    assert [a[:2] for a in orders.active()] == [
        ("p-104", "paracetamol"),
        ("p-105", "paracetamol"),
        ("p-104", "paracetamol"),
    ]


def test_a_name_the_dose_table_takes_for_a_listed_drug_is_that_drug_for_duplicates(
    ward: tuple[AgentKit, ClinicalPack], orders: SQLiteOrderBook
) -> None:
    kit, pack = ward
    with kit, kit.transaction("round"):
        pack.order("p-104", "paracetamol", 1, "g")
        for written in ("\uff50aracetamol", "PARACETAMO\uff2c"):  # full-width p, full-width L
            with pytest.raises(GateRefused) as refused:
                pack.order("p-104", written, 500, "mg")
            assert refused.value.rule == "duplicate_order"
    assert orders.active() == [("p-104", "paracetamol", 1000.0)]


def test_a_cancelled_order_is_not_a_duplicate(
    ward: tuple[AgentKit, ClinicalPack], orders: SQLiteOrderBook
) -> None:
    kit, pack = ward
    with kit:
        with pytest.raises(SagaRolledBack), kit.transaction("wrong patient"):
            pack.order("p-104", "morphine", 5, "mg")
            raise RuntimeError("wristband does not match")
        with kit.transaction("right patient"):
            pack.order("p-104", "morphine", 5, "mg")
    assert orders.active() == [("p-104", "morphine", 5.0)]
    assert orders.cancellations() == ["ord_0001"]


def test_a_failure_mid_round_cancels_the_orders_newest_first(
    ward: tuple[AgentKit, ClinicalPack], orders: SQLiteOrderBook
) -> None:
    kit, pack = ward
    with kit, pytest.raises(SagaRolledBack) as failed, kit.transaction("ward round"):
        pack.order("p-104", "paracetamol", 1, "g")
        pack.order("p-104", "morphine", 2500, "mcg")
        pack.order("p-104", "gentamicin", 5, "mg/kg", weight_kg=72)
        raise RuntimeError("pharmacy system went read-only")
    assert [step.ordinal for step in failed.value.report.compensated] == [3, 2, 1]
    assert orders.cancellations() == ["ord_0003", "ord_0002", "ord_0001"]
    assert orders.active() == []


def test_the_core_range_still_fits_plain_numbers(tmp_path: Path, orders: SQLiteOrderBook) -> None:
    rules = [Range("weight_kg", 0.3, 350, tools="clinical.order", unit="kg", name="weight")]
    with AgentKit(home=tmp_path / "a", registry=CompensatorRegistry(), rules=rules) as kit:
        pack = ClinicalPack(kit, orders)
        with kit.transaction("t"), pytest.raises(GateRefused, match=r"weight_kg=720 is outside"):
            pack.order("p-1", "gentamicin", 5, "mg/kg", weight_kg=720)


def test_every_fault_point_of_a_ward_round(
    tmp_path: Path, saga_kit: AgentKit, saga_chaos: ChaosRunner
) -> None:
    orders = SQLiteOrderBook(tmp_path / "chaos-orders.db")
    pack = ClinicalPack(saga_kit, orders)

    def ward_round() -> None:
        pack.order("p-104", "paracetamol", 1, "g")
        pack.order("p-104", "gentamicin", 5, "mg/kg", weight_kg=72, route="iv")

    report = saga_chaos.run(ward_round, world=orders.active, reset=orders.reset, name="round")
    assert {point.kind for point in report.results} == {
        "exception",
        "compensation",
        "kill",
        "duplicate",
    }
    assert report.ok
