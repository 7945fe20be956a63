"""The Designer tab in chromium: a compensation flow built on bpmn-js's canvas, edited in the
properties form, exported and imported again; a recorded saga opened as a diagram.

The first task is placed from bpmn-js's palette with the mouse (click the palette's task entry,
click the canvas); the rest of the flow (service tasks, sequence flows, compensation boundary
events, compensation tasks and their associations) is built through the modeler's own services
(``elementFactory``, ``modeling``) in ``page.evaluate``, since dragging connections and boundary
attachments by pixel is brittle. The agent-saga attributes are typed into the page's properties
form like a user would.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pytest
from agent_saga import REVERSIBLE, AgentKit, SagaRolledBack
from agent_saga_server.dashboard.designer import BPMN_JS_VERSION
from browser_kit import Dashboard, Guard, Snap, axe_violations
from playwright.sync_api import FilePayload, Page, expect

SAGA_TOOL = re.compile(r"<saga:tool [^>]*/>")
EXAMPLES = Path(__file__).resolve().parents[3] / "agent-saga-bpmn/examples"

BUILD = """
(tasks) => {
  const modeler = window.sagaDesigner.modeler;
  const registry = modeler.get("elementRegistry");
  const factory = modeler.get("elementFactory");
  const modeling = modeler.get("modeling");
  const bpmnReplace = modeler.get("bpmnReplace");
  const root = modeler.get("canvas").getRootElement();
  const [start] = registry.filter((e) => e.type === "bpmn:StartEvent");
  const [drawn] = registry.filter((e) => e.type === "bpmn:Task");
  let previous = start;
  const ids = [];
  tasks.forEach((task, i) => {
    let shape;
    if (i === 0) {
      const dx = 330 - drawn.x - drawn.width / 2;
      modeling.moveElements([drawn], {x: dx, y: 180 - drawn.y - drawn.height / 2});
      shape = bpmnReplace.replaceElement(drawn, {type: "bpmn:ServiceTask"});
    } else {
      const made = factory.createShape({type: task.type});
      shape = modeling.createShape(made, {x: 330 + 200 * i, y: 180}, root);
    }
    modeling.updateLabel(shape, task.label);
    modeling.connect(previous, shape);
    previous = shape;
    const entry = {task: shape.id};
    if (task.compensation) {
      const boundary = factory.createShape({
        type: "bpmn:BoundaryEvent", eventDefinitionType: "bpmn:CompensateEventDefinition"});
      const at = {x: shape.x + shape.width - 20, y: shape.y + shape.height};
      const attached = modeling.createShape(boundary, at, shape, {attach: true});
      const undo = modeling.createShape(
        factory.createShape({type: "bpmn:ServiceTask", isForCompensation: true}),
        {x: shape.x + shape.width / 2 + 60, y: 340}, root);
      modeling.updateLabel(undo, task.compensation);
      modeling.connect(attached, undo);
      entry.undo = undo.id;
    }
    ids.push(entry);
  });
  const end = modeling.createShape(
    factory.createShape({type: "bpmn:EndEvent"}), {x: 330 + 200 * tasks.length, y: 180}, root);
  modeling.connect(previous, end);
  return ids;
}
"""

FLOW = [
    {"type": "bpmn:ServiceTask", "label": "Hold the room", "compensation": "Release the room",
     "tool": "hotel.hold", "semantics": "COMPENSABLE", "compensator": "hotel.release"},
    {"type": "bpmn:ServiceTask", "label": "Charge the card", "compensation": "Refund the card",
     "tool": "card.charge", "semantics": "COMPENSABLE", "compensator": "card.refund",
     "redact": "card.number,card.cvv"},
    {"type": "bpmn:ServiceTask", "label": "Book the flight", "compensation": "Cancel the flight",
     "tool": "flight.book", "semantics": "COMPENSABLE", "compensator": "flight.cancel"},
]  # fmt: skip


def edit_task(page: Page, element_id: str, values: dict[str, str]) -> None:
    """Select a task on the canvas (a click on its shape) and type its agent-saga attributes.
    (A click on the one selected element deselects it, as in bpmn-js: the selection is cleared
    first.) A click that selected nothing is made again, as a user would, at most twice more: in
    one fresh clone in several runs the first click on a task just built left the panel empty
    (cause not found; the click reached the shape)."""
    target = page.locator("#properties-target")
    for attempt in range(3):
        page.evaluate("() => sagaDesigner.modeler.get('selection').select(null)")
        page.locator(f'.djs-element[data-element-id="{element_id}"] > .djs-hit').first.click()
        try:
            expect(target).to_contain_text(element_id, timeout=1500 if attempt < 2 else 5000)
            break
        except AssertionError:
            if attempt == 2:
                raise
    for field, value in values.items():
        control = page.locator(f"#designer-properties [name={field}]")
        if field == "semantics":
            control.select_option(value)
        else:
            control.fill(value)
            control.press("Tab")  # the change event


def ready(page: Page) -> None:
    page.locator("#designer[data-ready=yes]").wait_for(timeout=20_000)


def test_a_flow_drawn_edited_exported_and_imported_again_keeps_its_tasks_without_warnings(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap, tmp_path: Path
) -> None:
    page, _ = guarded
    dashboard.login(page)
    page.get_by_role("link", name="Designer", exact=True).click()
    ready(page)
    expect(page.locator(".bjs-powered-by")).to_be_visible()  # the licence's watermark
    box = page.locator("#designer-canvas").bounding_box()
    assert box is not None
    page.locator('.djs-palette [data-action="create.task"]').click()
    page.mouse.move(box["x"] + 330, box["y"] + 180)
    page.mouse.click(box["x"] + 330, box["y"] + 180)
    assert page.evaluate("() => sagaDesigner.modeler.get('elementRegistry').filter("
                         "(e) => e.type === 'bpmn:Task').length") == 1  # fmt: skip
    ids = page.evaluate(BUILD, FLOW)
    for spec, made in zip(FLOW, ids, strict=True):
        keys = ("tool", "semantics", "compensator", "redact")
        edit_task(
            page, made["task"], {k.replace("tool", "name"): spec[k] for k in keys if k in spec}
        )
        edit_task(page, made["undo"], {"name": spec["compensator"]})
    edit_task(page, ids[2]["task"], {"redact": ""})  # a cleared field drops the attribute
    with page.expect_download() as exported:
        page.get_by_role("button", name="Export BPMN").click()
    saved = tmp_path / "flow.bpmn"
    exported.value.save_as(saved)
    xml = saved.read_text()
    tools = SAGA_TOOL.findall(xml)
    assert len(tools) == 6, tools
    assert '<saga:tool name="card.charge" semantics="COMPENSABLE" compensator="card.refund" ' \
        'redact="card.number,card.cvv" />' in tools  # fmt: skip
    assert (
        '<saga:tool name="flight.book" semantics="COMPENSABLE" compensator="flight.cancel" />'
        in tools
    )
    assert xml.count("<bpmn:serviceTask") == 6
    assert xml.count('isForCompensation="true"') == 3
    assert xml.count("<bpmn:compensateEventDefinition") == 3
    assert xml.count("<bpmn:association") == 3
    assert xml.count("<bpmn:sequenceFlow") == 4
    assert xml.count("<bpmndi:BPMNShape") == 11  # start, end, 6 tasks, 3 boundary events

    page.evaluate("() => sagaDesigner.blank()")
    assert SAGA_TOOL.findall(page.evaluate("() => sagaDesigner.xml()")) == []
    page.locator("#designer-import").set_input_files(saved)
    expect(page.locator("#designer-status")).to_have_text("Imported flow.bpmn: 0 import warnings")
    assert page.evaluate("() => sagaDesigner.warnings") == []
    assert SAGA_TOOL.findall(page.evaluate("() => sagaDesigner.xml()")) == tools
    edit_task(page, ids[1]["task"], {})
    expect(page.locator("#saga-redact")).to_have_value("card.number,card.cvv")

    tools_checked = page.locator("#designer-check-tools")  # other tests' sagas recorded tools
    if tools_checked.count():
        tools_checked.uncheck()  # these tools are new: no agent has run them
    page.get_by_role("button", name="Validate").click()
    expect(page.locator("#designer-status")).not_to_have_text(re.compile("Loading|Imported"))
    status = page.locator("#designer-status").inner_text()
    assert status == "No problems found.", status
    with page.expect_download() as python:
        page.get_by_role("button", name="Export Python").click()
    source = Path(python.value.path()).read_text()
    assert python.value.suggested_filename == "flow.py"
    for name in ("hotel.hold", "card.charge", "flight.book", "card.refund", "@saga_scope"):
        assert name in source
    snap(page, "designer")  # also: axe-core finds no serious or critical violation
    assert BPMN_JS_VERSION in page.locator(".designer-credit").inner_text()


def test_validation_problems_are_listed_and_select_their_element(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    page, _ = guarded
    dashboard.login(page)
    page.goto(f"{dashboard.url}/ui/designer")
    ready(page)
    task = page.evaluate(
        """() => {
          const m = sagaDesigner.modeler;
          const shape = m.get("modeling").createShape(
            m.get("elementFactory").createShape({type: "bpmn:ServiceTask"}), {x: 400, y: 200},
            m.get("canvas").getRootElement());
          return shape.id;
        }"""
    )
    edit_task(page, task, {"name": "wire.send", "semantics": "COMPENSABLE"})
    page.get_by_role("button", name="Validate").click()
    problem = page.locator(f'#designer-problems button[data-element="{task}"]').first
    expect(problem).to_be_visible()
    assert "wire.send" in page.evaluate("() => sagaDesigner.xml()")
    page.locator(".djs-container svg").first.click(position={"x": 700, "y": 500})  # deselect
    expect(page.locator("#properties-target")).to_have_text("Select a task in the diagram.")
    problem.click()
    expect(page.locator("#properties-target")).to_contain_text(task)
    assert page.locator(f'.djs-element.saga-problem[data-element-id="{task}"]').count() == 1
    found = axe_violations(page)
    assert found == [], found


def hold_room(room: str) -> str:
    return room


def release_room(room: str) -> None:
    return None


def charge_card(card: str) -> str:
    raise RuntimeError("card declined")


def refund_card(card: str) -> None:
    return None


def run_a_rolled_back_saga(home: Path) -> None:
    """Hold a room, then fail to charge the card: the hold is compensated."""
    kit = AgentKit(home=home)
    try:
        hold = kit.tool(name="room.hold", compensate="room.release")(hold_room)
        kit.compensator("room.release", release_room)
        charge = kit.tool(name="card.charge", compensate=refund_card)(charge_card)
        with pytest.raises(SagaRolledBack), kit.transaction("designer-trip"):
            hold(room="12")
            charge(card="4111")
    finally:
        kit.close()


def test_a_recorded_saga_opens_as_a_diagram_without_warnings(
    dashboard: Dashboard, guarded: tuple[Page, Guard], snap: Snap
) -> None:
    page, _ = guarded
    run_a_rolled_back_saga(dashboard.home)
    dashboard.login(page)
    deadline = time.monotonic() + 15
    while not page.locator("#sagas a", has_text="designer-trip").count():
        assert time.monotonic() < deadline, "the saga was never listed"
        time.sleep(0.2)
        page.goto(f"{dashboard.url}/ui/sagas?origin=local")
    page.locator("#sagas a", has_text="designer-trip").click()
    page.get_by_role("link", name="Diagram", exact=True).click()
    ready(page)
    expect(page.locator("#designer-status")).to_have_text("The recorded saga: 0 import warnings")
    assert page.evaluate("() => sagaDesigner.warnings") == []
    xml = page.evaluate("() => sagaDesigner.xml()")
    assert (
        '<saga:tool name="room.hold" semantics="COMPENSABLE" compensator="room.release" />' in xml
    )
    assert xml.count("<bpmn:compensateEventDefinition") >= 2  # the boundary event, the end
    edit_task(page, "step_1", {})
    expect(page.locator("#saga-tool")).to_have_value("room.hold")
    expect(page.locator("#properties-recorded")).to_have_text(
        "Recorded: step 1, outcome done, compensation compensated."
    )
    edit_task(page, "step_2", {})
    expect(page.locator("#properties-recorded")).to_contain_text("outcome failed")
    snap(page, "saga-diagram")


HOSTILE = {
    "img": "<img src=x onerror=alert(1)>",
    "svg": '"><svg onload=alert(2)>',
    "script": "</text><script>alert(3)</script>",
}
"""Markup a visitor might hope the page renders: each must show as text and never run."""
ACTIVE = "() => document.querySelectorAll('main img, main script, [onerror], [onload]').length"


def hostile_trip() -> bytes:
    """The trip example with markup in its names, tool names and documentation, and colours
    that point at another host (bpmn-js draws ``bioc`` colours on the shapes)."""
    xml = (EXAMPLES / "trip.bpmn").read_text(encoding="utf-8")
    xml = xml.replace('name="Book a trip"', f"name={quoteattr(HOSTILE['img'])}")
    xml = xml.replace('name="Book the flight"', f"name={quoteattr(HOSTILE['script'])}")
    xml = xml.replace('saga:tool name="hotels.book"', f"saga:tool name={quoteattr(HOSTILE['svg'])}")
    xml = xml.replace(
        'xmlns:saga="', 'xmlns:bioc="http://bpmn.io/schema/bpmn/biocolor/1.0" xmlns:saga="', 1
    )
    far = quoteattr("url(http://evil.example/fill.svg#x)")
    xml = xml.replace(
        '<bpmndi:BPMNShape id="BookFlight_di"',
        f'<bpmndi:BPMNShape bioc:fill={far} bioc:stroke={far} id="BookFlight_di"',
    )
    link = escape('<a href="javascript:alert(4)">docs</a>')
    return xml.replace(
        '<bpmn:startEvent id="Start" name="trip requested" />',
        f'<bpmn:startEvent id="Start"><bpmn:documentation>{link}</bpmn:documentation>'
        "</bpmn:startEvent>",
    ).encode()


def run_a_hostile_saga(home: Path) -> str:
    """A saga whose tool names, arguments and error are markup, rolled back; its id."""
    kit = AgentKit(home=home)
    try:
        hold = kit.tool(name=HOSTILE["img"], semantics=REVERSIBLE)(hold_room)
        charge = kit.tool(name=HOSTILE["svg"], semantics=REVERSIBLE)(charge_card)
        with pytest.raises(SagaRolledBack) as rolled, kit.transaction("designer-hostile"):
            hold(room=HOSTILE["script"])
            charge(card=HOSTILE["img"])
    finally:
        kit.close()
    return rolled.value.saga_id


def test_markup_in_a_recorded_saga_or_an_imported_diagram_is_text_and_never_runs(
    dashboard: Dashboard, guarded: tuple[Page, Guard]
) -> None:
    """The guard fails the test on a dialog, a console error (a CSP violation is one) or a
    request to another host, but for the one the CSP blocks: the imported diagram's colours
    point at another host, bpmn-js sets them on its shapes, and the page's ``img-src 'self'``
    refuses the load (Playwright reports such a request although it never left the browser;
    a probe with a real server on another port of 127.0.0.1 saw no hit)."""
    page, guard = guarded
    blocked = "Loading the image 'http://evil.example/fill.svg' violates the following Content"
    guard.expected.append(blocked)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    saga = run_a_hostile_saga(dashboard.home)
    dashboard.login(page)
    diagram = f"{dashboard.url}/ui/sagas/local/{saga}/diagram.bpmn"
    deadline = time.monotonic() + 15
    while not page.request.get(diagram).ok:  # the ui ships the home's log in the background
        assert time.monotonic() < deadline, "the saga never reached the dashboard"
        time.sleep(0.2)
    page.goto(f"{dashboard.url}/ui/sagas/local/{saga}")
    page.get_by_role("link", name="Diagram", exact=True).click()
    ready(page)
    expect(page.locator("#designer-status")).to_contain_text("The recorded saga")
    edit_task(page, "step_1", {})
    expect(page.locator("#saga-tool")).to_have_value(HOSTILE["img"])
    assert page.evaluate(ACTIVE) == 0

    page.locator("#designer-import").set_input_files(
        files=[FilePayload(name="hostile.bpmn", mimeType="application/xml", buffer=hostile_trip())]
    )
    expect(page.locator("#designer-status")).to_contain_text("Imported hostile.bpmn")
    expect(page.locator(".djs-label", has_text=HOSTILE["script"])).to_have_count(1)
    assert any(text.startswith(blocked) for text in console)
    assert set(guard.foreign) == {"http://evil.example/fill.svg"}
    guard.foreign.clear()
    page.get_by_role("button", name="Validate").click()
    problem = page.locator("#designer-problems button", has_text=HOSTILE["svg"]).first
    expect(problem).to_be_visible()
    assert page.evaluate(ACTIVE) == 0
