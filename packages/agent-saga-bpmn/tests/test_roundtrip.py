"""The round trip: diagram -> code -> run -> recorded saga -> diagram has the same tasks and
compensation pairs as the design."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent_saga_bpmn import Flow, parse_flow, saga_to_bpmn

if TYPE_CHECKING:
    from conftest import Run

TRIP = Path(__file__).resolve().parents[1] / "examples" / "trip.bpmn"


def _design(flow: Flow) -> tuple[list[str | None], dict[str | None, str | None]]:
    """The service tasks' tools in flow order, and each tool's compensator as drawn."""
    tools = [t.tool for t in flow.tasks if t.kind == "service"]
    pairs = {}
    for task_id, handler in flow.compensations.items():
        task, undo = flow.task(task_id), flow.task(handler)
        assert task is not None
        assert undo is not None
        pairs[task.tool] = undo.tool
    return tools, pairs


def test_the_recorded_saga_draws_the_design_back(trip_run: Run) -> None:
    design = parse_flow(TRIP.read_bytes())
    records = trip_run.records()
    drawn = parse_flow(saga_to_bpmn([r for r in records if r["saga"] is not None]))
    assert _design(drawn) == _design(design)
    assert _design(design) == (
        ["flights.book", "hotels.book", "payments.charge"],
        {
            "flights.book": "flights.cancel",
            "hotels.book": "hotels.cancel",
            "payments.charge": "payments.refund",
        },
    )
    # and what happened: the two booked steps were undone, the charge that failed was not
    states = {t.name for t in drawn.tasks if t.kind == "compensation"}
    assert states == {
        "undo 1: flights.cancel (compensated)",
        "undo 2: hotels.cancel (compensated)",
        "undo 3: payments.refund (not needed)",
    }
