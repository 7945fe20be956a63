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

// The sagas list, kept current: a saga event updates its row, or adds it on top when it
// matches the page's filters (on the first page only). Every value is set as text.
function sagaMatches(filters, saga) {
  return (!filters.status || filters.status === saga.status)
    && (!filters.origin || filters.origin === saga.origin)
    && (!filters.tool || saga.tools.includes(filters.tool));
}

function textCell(row, text) {
  const cell = document.createElement("td");
  cell.textContent = text;
  row.appendChild(cell);
  return cell;
}

function fillSagaRow(row, saga) {
  row.replaceChildren();
  row.dataset.origin = saga.origin;
  row.dataset.saga = saga.saga;
  const first = textCell(row, "");
  const link = document.createElement("a");
  link.href = saga.href;
  link.textContent = saga.name;
  const id = document.createElement("small");
  id.textContent = saga.saga;
  first.append(link, " ", id);
  const status = document.createElement("span");
  status.className = `status status-${saga.status}`;
  status.textContent = saga.status;
  textCell(row, "").appendChild(status);
  textCell(row, `${saga.tools.length}: ${saga.tools.join(", ")}`);
  textCell(row, saga.started);
  textCell(row, saga.origin);
}

function followSagas(state, body) {
  const filters = state.dataset;
  const source = new EventSource(filters.stream);
  source.addEventListener("open", () => { state.textContent = "live: new sagas appear here"; });
  source.addEventListener("error", () => { state.textContent = "reconnecting…"; });
  source.addEventListener("saga", (event) => {
    const saga = JSON.parse(event.data);
    const shown = Array.from(body.rows).find(
      (row) => row.dataset.origin === saga.origin && row.dataset.saga === saga.saga);
    const wanted = sagaMatches(filters, saga);
    if (shown) {
      if (wanted) { fillSagaRow(shown, saga); } else { shown.remove(); }
      return;
    }
    if (!wanted || filters.paged === "yes") {
      return;
    }
    for (const empty of body.querySelectorAll("tr.empty")) { empty.remove(); }
    const row = document.createElement("tr");
    fillSagaRow(row, saga);
    body.prepend(row);
    while (body.rows.length > LIVE_ROWS) {
      body.deleteRow(body.rows.length - 1);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const sagas = document.getElementById("sagas-live");
  const list = document.querySelector("#sagas tbody");
  if (sagas && list) {
    followSagas(sagas, list);
  }
});

document.addEventListener("DOMContentLoaded", () => {
  const state = document.getElementById("live-state");
  const body = document.getElementById("live-log");
  if (state && body) {
    followLiveLog(state, body);
  }
});

// Passkeys: the server's options go to the authenticator as they are (parse*FromJSON), and
// its answer goes back as JSON (toJSON); the server verifies everything.
async function postJSON(url, csrf, body) {
  const answer = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  const data = await answer.json();
  if (!answer.ok) {
    throw new Error(data.detail || `refused (${answer.status})`);
  }
  return data;
}

// What allows a new passkey: the enrolment code typed in, else (for a subject that has one)
// an assertion by an existing passkey, made before the new credential is.
async function enrolmentGrant(button, code) {
  if (code) {
    return { code };
  }
  if (button.dataset.hasPasskey !== "yes") {
    throw new Error("enter the enrolment code an admin gave you");
  }
  const offer = await postJSON(button.dataset.enrol, button.dataset.csrf, {});
  const options = PublicKeyCredential.parseRequestOptionsFromJSON(offer.options);
  const proof = await navigator.credentials.get({ publicKey: options });
  return { assertion: { challenge_id: offer.challenge_id, credential: proof.toJSON() } };
}

async function registerPasskey(button, state, code) {
  const csrf = button.dataset.csrf;
  try {
    const grant = await enrolmentGrant(button, code.value.trim());
    const offer = await postJSON(button.dataset.options, csrf, grant);
    const options = PublicKeyCredential.parseCreationOptionsFromJSON(offer.options);
    const credential = await navigator.credentials.create({ publicKey: options });
    await postJSON(button.dataset.submit, csrf, {
      challenge_id: offer.challenge_id, credential: credential.toJSON(),
    });
    code.value = "";
    state.textContent = "Passkey registered.";
    window.location.reload();
  } catch (error) {
    state.textContent = `No passkey registered: ${String(error.message).split("\n")[0]}`;
  }
}

async function voteWithPasskey(button) {
  const section = button.closest("section");
  const state = section.querySelector(".passkey-state");
  const note = section.querySelector("input[name=note]");
  const csrf = button.dataset.csrf;
  try {
    const offer = await postJSON(`${button.dataset.base}/passkey-options`, csrf, {
      decision: button.dataset.decision,
    });
    const options = PublicKeyCredential.parseRequestOptionsFromJSON(offer.options);
    const credential = await navigator.credentials.get({ publicKey: options });
    const done = await postJSON(`${button.dataset.base}/passkey`, csrf, {
      challenge_id: offer.challenge_id, credential: credential.toJSON(), note: note.value,
    });
    window.location.assign(done.next);
  } catch (error) {
    state.textContent = `Not recorded: ${error.message}`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const register = document.getElementById("register-passkey");
  if (register) {
    const state = document.getElementById("passkey-state");
    const code = document.getElementById("enrolment-code");
    register.addEventListener("click", () => registerPasskey(register, state, code));
  }
  for (const button of document.querySelectorAll("button.passkey-vote")) {
    button.addEventListener("click", () => voteWithPasskey(button));
  }
});
