"""A recorded saga drawn as BPMN 2.0: what happened, left to right.

The records are read the way ``agent-saga replay`` reads them (the core's
:func:`agent_saga.build_history`): one service task per step (done, failed, refused, unknown),
a user task before a step a human was asked to approve, a compensation boundary event and a
compensation task under each step that declared a compensation (its label says whether it ran),
and an end event for how the saga ended (a compensation end event for a rollback). Each task
carries ``saga:tool`` (name, semantics, compensator: the design it ran) and ``saga:step``
(ordinal, outcome, compensation state: what happened), so
:func:`~agent_saga_bpmn.parse_flow` reads the drawing back as the flow that ran.

Invariants: nothing here runs a tool, a compensator or writes anything; the output depends only
on the records; status is always in the labels' text, never only in a colour.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_saga import CompensationState, Record, SagaStatus, SagaView, StepOutcome, StepView
from agent_saga import build_history as _build_history

from ._draw import Handler, Shape, render
from ._model import BpmnError

MAX_STEPS = 2000
"""The most steps drawn: a diagram of more is not read by anyone (and its document would
approach :data:`~agent_saga_bpmn._xmlread.MAX_DOCUMENT_BYTES`)."""
_NCNAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_RAN = frozenset(
    {CompensationState.COMPENSATED, CompensationState.FAILED, CompensationState.STARTED}
)


def _record(raw: Mapping[str, Any], index: int) -> Record:
    """A :class:`~agent_saga.Record` from its JSON form (``Record.to_json()``)."""
    if not isinstance(raw, Mapping):
        raise BpmnError(f"record {index}: a record is a JSON object, not {type(raw).__name__}")
    kind, saga, data = raw.get("kind"), raw.get("saga"), raw.get("data", {})
    seq, ts = raw.get("seq", index), raw.get("ts", 0)
    if not isinstance(kind, str) or not (saga is None or isinstance(saga, str)):
        raise BpmnError(f"record {index}: 'kind' must be text and 'saga' text or null")
    if not isinstance(data, dict):
        raise BpmnError(f"record {index}: 'data' must be a JSON object")
    if type(seq) is not int or type(ts) is not int:
        raise BpmnError(f"record {index}: 'seq' and 'ts' must be integers")
    return Record(
        seq=seq,
        ts=ts,
        kind=kind,
        saga=saga,
        data=data,
        prev=str(raw.get("prev", "")),
        hash=str(raw.get("hash", "")),
    )


def _ncname(text: str) -> str:
    return _NCNAME_UNSAFE.sub("_", text)[:64]


def _step_label(step: StepView) -> str:
    label = f"{step.ordinal}. {step.tool}"
    return label if step.outcome is StepOutcome.DONE else f"{label} ({step.outcome.value})"


def _step_doc(step: StepView) -> str | None:
    parts = []
    if step.refusal is not None:
        parts.append(f"refused by {step.refusal.rule}: {step.refusal.reason}")
    if step.error is not None:
        parts.append(f"raised {step.error}")
    if step.probe is not None:
        parts.append(f"probe: {step.probe}")
    if step.compensation_error is not None:
        parts.append(f"compensation raised {step.compensation_error}")
    return "; ".join(parts) or None


def _handler(step: StepView) -> Handler | None:
    if step.compensation is None:
        return None
    state = step.compensation_state
    ran = "ran" if state in _RAN else "did not run"
    label = f"undo {step.ordinal}: {step.compensation} ({state.value.replace('_', ' ')})"
    return Handler(
        id=f"step_{step.ordinal}_undo_task",
        name=label,
        tool={"name": step.compensation},
        step={"ordinal": str(step.ordinal), "compensation": state.value},
        documentation=f"compensation of step {step.ordinal}: {ran}"
        + (f"; raised {step.compensation_error}" if step.compensation_error else ""),
    )


def _step_shapes(step: StepView) -> list[Shape]:
    shapes = []
    if step.approval is not None:
        shapes.append(
            Shape(
                f"step_{step.ordinal}_approval",
                "userTask",
                f"approval of {step.ordinal}",
                documentation=step.approval,
            )
        )
    tool = {"name": step.tool}
    if step.semantics is not None:
        tool["semantics"] = step.semantics.upper()
    if step.compensation is not None:
        tool["compensator"] = step.compensation
    shapes.append(
        Shape(
            f"step_{step.ordinal}",
            "serviceTask",
            _step_label(step),
            tool=tool,
            step={
                "ordinal": str(step.ordinal),
                "outcome": step.outcome.value,
                "compensation": step.compensation_state.value,
            },
            documentation=_step_doc(step),
            handler=_handler(step),
        )
    )
    return shapes


def _end(view: SagaView) -> Shape | None:
    cause = f": {view.cause}" if view.cause is not None else ""
    if view.status is SagaStatus.COMMITTED:
        return Shape("saga_end", "endEvent", "committed")
    if view.status is SagaStatus.ROLLED_BACK:
        return Shape("saga_end", "endEvent", f"rolled back{cause}", compensate_event=True)
    if view.status is SagaStatus.NEEDS_HUMAN:
        return Shape(
            "saga_end",
            "endEvent",
            f"needs a human{cause}",
            compensate_event=True,
            documentation=view.settled,
        )
    return None  # running or suspended: no end is drawn where none was logged


def draw_saga(view: SagaView) -> str:
    """The diagram of one saga's view (see the module docstring)."""
    if len(view.steps) > MAX_STEPS:
        raise BpmnError(
            f"saga {view.id} has {len(view.steps):,} steps; at most {MAX_STEPS:,} are drawn"
        )
    shapes = [Shape("saga_start", "startEvent", view.name)]
    for step in view.steps:
        shapes += _step_shapes(step)
    end = _end(view)
    if end is not None:
        shapes.append(end)
    return render(f"saga_{_ncname(view.id)}", f"{view.name} ({view.status.value})", shapes)


def saga_to_bpmn(records: Sequence[Mapping[str, Any]]) -> str:
    """One recorded saga as BPMN 2.0 XML with diagram interchange (a left-to-right layout).

    ``records`` are the saga's records in log order, each as ``Record.to_json()`` gives it
    (records of no saga, such as ``control.halt``, are skipped). Nothing is run or written.

    Raises:
        BpmnError: a record is not shaped like one, the records hold no saga or more than one,
            or the saga has more than :data:`MAX_STEPS` steps.
    """
    history = _build_history(_record(raw, index) for index, raw in enumerate(records))
    if len(history.sagas) != 1:
        ids = ", ".join(v.id for v in history.sagas[:3])
        raise BpmnError(
            f"the records hold {len(history.sagas)} sagas{f' ({ids})' if ids else ''}; "
            "give the records of one saga"
        )
    return draw_saga(history.sagas[0])
