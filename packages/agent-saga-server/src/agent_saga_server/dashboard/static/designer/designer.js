// The Designer tab's script: bpmn-js's modeler (vendored, the global BpmnJS) with agent-saga's
// extension element (<saga:tool name semantics compensator redact/>, described to bpmn-js by
// agent_saga_bpmn's moddle descriptor, so it survives import and export), a properties form
// that edits that element through the modeler's moddle API (one undoable command per change),
// and the page's buttons. Server answers and file contents are only ever set as text, never
// parsed as HTML.
"use strict";

const FIELDS = ["name", "semantics", "compensator", "redact"];

function extensionOf(businessObject, type) {
  const values = (businessObject.extensionElements && businessObject.extensionElements.values) || [];
  return values.find((value) => value.$instanceOf(type)) || null;
}

function toolOf(businessObject) {
  return extensionOf(businessObject, "saga:Tool");
}

// A recorded saga's diagram: what happened to a step (<saga:step ordinal outcome compensation/>).
function recordedText(businessObject) {
  const step = extensionOf(businessObject, "saga:Step");
  if (!step) {
    return "";
  }
  const parts = [`step ${step.get("ordinal") || "?"}`];
  if (step.get("outcome")) { parts.push(`outcome ${step.get("outcome")}`); }
  if (step.get("compensation")) { parts.push(`compensation ${step.get("compensation")}`); }
  return `Recorded: ${parts.join(", ")}.`;
}

function isTask(element) {
  return Boolean(element && element.businessObject && element.businessObject.$instanceOf("bpmn:Task"));
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

async function postDiagram(url, csrf, xml) {
  const answer = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/xml", "X-CSRF-Token": csrf },
    body: xml,
    credentials: "same-origin",
  });
  if (!answer.ok) {
    let detail = `refused (${answer.status})`;
    try {
      detail = (await answer.json()).detail || detail;
    } catch (ignored) {
      // not JSON: keep the status
    }
    throw new Error(detail);
  }
  return answer;
}

class Designer {
  constructor(root, descriptor) {
    this.root = root;
    this.status = document.getElementById("designer-status");
    this.problems = document.getElementById("designer-problems");
    this.form = document.getElementById("designer-properties");
    this.target = document.getElementById("properties-target");
    this.recorded = document.getElementById("properties-recorded");
    this.selected = null;
    this.marked = [];
    this.warnings = [];
    this.modeler = new BpmnJS({
      container: document.getElementById("designer-canvas"),
      moddleExtensions: { saga: descriptor },
    });
    const events = this.modeler.get("eventBus");
    events.on("selection.changed", (event) => this.select(event.newSelection[0] || null));
    events.on("element.changed", (event) => {
      if (event.element === this.selected) { this.fillForm(); }
    });
    for (const field of FIELDS) {
      const input = this.form.elements.namedItem(field);
      input.addEventListener("change", () => this.setField(field, input.value.trim()));
    }
    this.form.addEventListener("submit", (event) => event.preventDefault());
  }

  say(text) {
    this.status.textContent = text;
  }

  async open(xml, what) {
    const result = await this.modeler.importXML(xml);
    this.warnings = result.warnings.map((warning) => warning.message);
    this.clearProblems();
    this.fit();
    const count = this.warnings.length;
    this.say(`${what}: ${count} import warning${count === 1 ? "" : "s"}${count ? `: ${this.warnings.join("; ")}` : ""}`);
    return this.warnings;
  }

  // The whole diagram in view, with a margin on the left for the palette.
  fit() {
    const canvas = this.modeler.get("canvas");
    canvas.zoom("fit-viewport", "auto");
    const box = canvas.viewbox();
    canvas.viewbox({
      x: box.x - 130, y: box.y - 40, width: box.width + 170, height: box.height + 80,
    });
  }

  async blank() {
    await this.modeler.createDiagram();
    this.warnings = [];
    this.say("A new diagram: add tasks from the palette on the left.");
  }

  async xml() {
    const { xml } = await this.modeler.saveXML({ format: true });
    return xml;
  }

  select(element) {
    this.selected = isTask(element) ? element : null;
    this.fillForm();
  }

  fillForm() {
    const element = this.selected;
    const tool = element ? toolOf(element.businessObject) : null;
    for (const field of FIELDS) {
      const input = this.form.elements.namedItem(field);
      input.disabled = !element;
      input.value = (tool && tool.get(field)) || "";
    }
    if (element) {
      const label = element.businessObject.name ? `${element.businessObject.name} (${element.id})` : element.id;
      this.target.textContent = `Task ${label}`;
      this.recorded.textContent = recordedText(element.businessObject);
    } else {
      this.recorded.textContent = "";
      this.target.textContent = "Select a task in the diagram.";
    }
  }

  setField(field, value) {
    const element = this.selected;
    if (!element) {
      return;
    }
    const modeling = this.modeler.get("modeling");
    const moddle = this.modeler.get("moddle");
    const businessObject = element.businessObject;
    const tool = toolOf(businessObject);
    if (tool) {
      modeling.updateModdleProperties(element, tool, { [field]: value || undefined });
      return;
    }
    if (!value) {
      return;
    }
    const created = moddle.create("saga:Tool", { [field]: value });
    const extensions = businessObject.extensionElements;
    if (extensions) {
      created.$parent = extensions;
      modeling.updateModdleProperties(element, extensions, { values: [...extensions.values, created] });
    } else {
      const made = moddle.create("bpmn:ExtensionElements", { values: [created] });
      created.$parent = made;
      made.$parent = businessObject;
      modeling.updateProperties(element, { extensionElements: made });
    }
  }

  clearProblems() {
    const canvas = this.modeler.get("canvas");
    for (const id of this.marked) {
      if (this.modeler.get("elementRegistry").get(id)) { canvas.removeMarker(id, "saga-problem"); }
    }
    this.marked = [];
    this.problems.replaceChildren();
  }

  showProblems(found) {
    this.clearProblems();
    const registry = this.modeler.get("elementRegistry");
    const canvas = this.modeler.get("canvas");
    for (const problem of found) {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.element = problem.element_id;
      button.textContent = `${problem.element_id}: ${problem.message}`;
      button.addEventListener("click", () => {
        const element = registry.get(problem.element_id);
        if (element) {
          this.modeler.get("selection").select(element);
          canvas.scrollToElement(element);
        }
      });
      item.appendChild(button);
      this.problems.appendChild(item);
      if (registry.get(problem.element_id) && !this.marked.includes(problem.element_id)) {
        canvas.addMarker(problem.element_id, "saga-problem");
        this.marked.push(problem.element_id);
      }
    }
    const count = found.length;
    this.say(count ? `${count} problem${count === 1 ? "" : "s"} found` : "No problems found.");
  }

  async validate() {
    const check = document.getElementById("designer-check-tools");
    const url = `${this.root.dataset.validate}?check_tools=${check && !check.checked ? "no" : "yes"}`;
    const answer = await postDiagram(url, this.root.dataset.csrf, await this.xml());
    const found = (await answer.json()).problems;
    this.showProblems(found);
    return found;
  }

  async exportPython() {
    const answer = await postDiagram(this.root.dataset.codegen, this.root.dataset.csrf, await this.xml());
    const source = await answer.text();
    download("flow.py", source, "text/x-python");
    this.say("Exported flow.py.");
    return source;
  }

  async exportBpmn() {
    const xml = await this.xml();
    download("flow.bpmn", xml, "application/xml");
    this.say("Exported flow.bpmn.");
    return xml;
  }
}

function act(designer, button, action) {
  button.addEventListener("click", async () => {
    try {
      await action();
    } catch (error) {
      designer.say(`Not done: ${error.message}`);
    }
  });
}

async function startDesigner(root) {
  const descriptor = await (await fetch(root.dataset.moddle, { credentials: "same-origin" })).json();
  const designer = new Designer(root, descriptor);
  window.sagaDesigner = designer;  // the page's own handle (the browser tests drive it)
  act(designer, document.getElementById("designer-validate"), () => designer.validate());
  act(designer, document.getElementById("designer-export-bpmn"), () => designer.exportBpmn());
  act(designer, document.getElementById("designer-export-python"), () => designer.exportPython());
  const file = document.getElementById("designer-import");
  file.addEventListener("change", async () => {
    const chosen = file.files[0];
    if (!chosen) {
      return;
    }
    try {
      await designer.open(await chosen.text(), `Imported ${chosen.name}`);
    } catch (error) {
      designer.say(`Not imported: ${error.message}`);
    }
    file.value = "";
  });
  try {
    if (root.dataset.load) {
      const answer = await fetch(root.dataset.load, { credentials: "same-origin" });
      if (!answer.ok) { throw new Error(`the saga's diagram is not available (${answer.status})`); }
      await designer.open(await answer.text(), "The recorded saga");
    } else {
      await designer.blank();
    }
  } catch (error) {
    designer.say(`Not loaded: ${error.message}`);
  }
  root.dataset.ready = "yes";
}

document.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("designer");
  if (root) {
    startDesigner(root);
  }
});
