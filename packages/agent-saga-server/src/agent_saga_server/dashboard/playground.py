"""The playground page: the visitor types a wire amount, a dose or a servo angle and runs the
same scripted agent without agent-saga ("before") and through the real engine ("after"), or
both side by side (:mod:`.playground_runs`).

Runs are bounded: inputs are checked before anything runs; each person (a session's subject,
however many sessions they open) may start at most :data:`RUNS_PER_MINUTE` runs a minute and
the process at most :data:`AT_ONCE` at a time (429 otherwise); a run is a form post with the
session's CSRF token like every other action. Results are rendered by the server (escaped):
the page needs no script.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Annotated, Literal

from fastapi import APIRouter, Form
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from .playground_runs import BOUNDS, RunResult, check_input, run
from .web import FormViewer, PageViewer, render

pages = APIRouter()
RUNS_PER_MINUTE = 12
AT_ONCE = 2
DEFAULTS = {"wire": 120_000.0, "dose": 4_000.0, "servo": 135.0}
LABELS = {
    "wire": "Wire amount (cents)",
    "dose": "Paracetamol dose (mg)",
    "servo": "Elbow angle (degrees)",
}


class RunLimiter:
    """At most ``per_minute`` runs per key (a subject) in any 60 seconds, ``at_once`` at a
    time."""

    def __init__(self, per_minute: int, at_once: int) -> None:
        self.per_minute = per_minute
        self.slots = threading.BoundedSemaphore(at_once)
        self._lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {}

    def admit(self, key: str, now: float) -> bool:
        """Count a run for ``key`` if it is within its rate (it is then counted)."""
        with self._lock:
            if len(self._recent) > 10_000:  # bounded: forget idle subjects
                self._recent = {k: v for k, v in self._recent.items() if v and v[-1] > now - 60}
            recent = self._recent.setdefault(key, deque())
            while recent and recent[0] <= now - 60:
                recent.popleft()
            if len(recent) >= self.per_minute:
                return False
            recent.append(now)
            return True


LIMITER = RunLimiter(RUNS_PER_MINUTE, AT_ONCE)


def _page(
    viewer: PageViewer,
    status: int = 200,
    *,
    scenario: str = "wire",
    values: dict[str, float] | None = None,
    results: list[RunResult] | None = None,
    problem: str = "",
    side_by_side: bool = False,
) -> Response:
    return render(
        "playground.html", viewer, status, scenario=scenario, values=values or DEFAULTS,
        labels=LABELS, bounds=BOUNDS, results=results or [], problem=problem,
        side_by_side=side_by_side,
    )  # fmt: skip


@pages.get("/playground")
def playground_page(viewer: PageViewer) -> Response:
    return _page(viewer)


@pages.post("/playground")
async def playground_run(
    viewer: FormViewer,
    scenario: Annotated[Literal["wire", "dose", "servo"], Form()],
    run_mode: Annotated[Literal["before", "after"], Form(alias="run")],
    wire: Annotated[float, Form(allow_inf_nan=False)] = DEFAULTS["wire"],
    dose: Annotated[float, Form(allow_inf_nan=False)] = DEFAULTS["dose"],
    servo: Annotated[float, Form(allow_inf_nan=False)] = DEFAULTS["servo"],
    side_by_side: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Run the scenario ``before``, ``after``, or both when ``side_by_side`` is ticked."""
    values = {"wire": wire, "dose": dose, "servo": servo}
    value = values[scenario]
    problem = check_input(scenario, value)
    if problem is not None:
        return _page(viewer, 400, scenario=scenario, values=values, problem=problem)
    if not LIMITER.admit(viewer.subject, time.monotonic()):  # a pasted token opens many sessions
        problem = f"at most {RUNS_PER_MINUTE} runs a minute; wait a moment"
        return _page(viewer, 429, scenario=scenario, values=values, problem=problem)
    if not LIMITER.slots.acquire(blocking=False):
        problem = "the playground is busy with other runs; try again in a moment"
        return _page(viewer, 429, scenario=scenario, values=values, problem=problem)
    try:
        modes = [False, True] if side_by_side == "yes" else [run_mode == "after"]
        results = [await run_in_threadpool(run, scenario, value, engine=e) for e in modes]
    finally:
        LIMITER.slots.release()
    return _page(
        viewer, scenario=scenario, values=values, results=results, side_by_side=len(modes) == 2
    )


__all__ = ["LIMITER", "RunLimiter", "pages"]
