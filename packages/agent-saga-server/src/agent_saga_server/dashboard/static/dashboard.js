// The dashboard's only script (served from this origin; the page's CSP allows no other).
// Log data is only ever set as text (textContent), never parsed as HTML.
"use strict";

const LIVE_ROWS = 500;

function followLiveLog(state, body) {
  const source = new EventSource(state.dataset.stream);
  source.addEventListener("open", () => { state.textContent = "following the log"; });
  source.addEventListener("error", () => { state.textContent = "reconnecting…"; });
  source.addEventListener("record", (event) => {
    const record = JSON.parse(event.data);
    const row = document.createElement("tr");
    row.className = "record";
    for (const value of [record.origin, record.seq, record.kind, record.saga, record.tool]) {
      const cell = document.createElement("td");
      cell.textContent = value === null || value === undefined ? "" : String(value);
      row.appendChild(cell);
    }
    body.prepend(row);
    while (body.rows.length > LIVE_ROWS) {
      body.deleteRow(body.rows.length - 1);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const state = document.getElementById("live-state");
  const body = document.getElementById("live-log");
  if (state && body) {
    followLiveLog(state, body);
  }
});
