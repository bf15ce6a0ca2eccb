// tenure serve's page: renders each state the server pushes (/api/events) and counts the times
// left down in between. Names and labels come from other processes: text nodes only, never HTML.
// With `tenure serve --allow-revoke` the page carries the server's token (a meta tag) and each
// grant a revoke button: a safe revoke of the token shown, never one granted since.
"use strict";

let receivedAt = 0; // performance.now() when the shown state arrived
const CSRF = document.querySelector('meta[name="tenure-csrf"]')?.content;
let revocable = false; // revoke allowed, and the store can revoke (set by each state)

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function holder(h) {
  return `${h.host} pid ${h.pid}` + (h.label ? ` (${h.label})` : "");
}

// A cell that counts down from `seconds` (at the state's arrival) to 0.
function left(seconds, prefix = "") {
  return el("td", { class: "num left", "data-left": seconds, "data-prefix": prefix },
    `${prefix}${Math.max(0, seconds).toFixed(1)}s`);
}

function tick() {
  const passed = (performance.now() - receivedAt) / 1000;
  for (const cell of document.querySelectorAll("[data-left]")) {
    const now = Math.max(0, Number(cell.dataset.left) - passed);
    cell.textContent = `${cell.dataset.prefix}${now.toFixed(1)}s`;
  }
}

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  const head = el("tr", {}, ...headers.map(([text, cls]) => el("th", cls ? { class: cls } : {}, text)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function cell(text, cls) {
  return el("td", cls ? { class: cls } : {}, text);
}

function row(name, ...cells) {
  return el("tr", { "data-name": name }, ...cells);
}

const NUM = "num";

function notice(state, text) {
  const node = document.getElementById("notice");
  node.dataset.state = state;
  node.textContent = text;
  node.hidden = false;
}

async function revoke(lock, token) {
  const ask = `Revoke ${lock} (token ${token})?\n\nIts holder loses it at its next renewal; ` +
    "nobody is granted it until the old lease could no longer be acting.";
  if (!window.confirm(ask)) return;
  notice("pending", `revoking ${lock} (token ${token})…`);
  try {
    const response = await fetch("/api/revoke", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Tenure-CSRF": CSRF },
      body: JSON.stringify({ name: lock, token }),
    });
    const body = await response.json();
    if (response.ok) {
      notice("ok", `revoked ${lock} (token ${token}): its holder loses it at its next renewal; ` +
        `nobody is granted it for ${body.free_in.toFixed(1)}s`);
    } else {
      notice("error", `not revoked: ${body.error}`);
    }
  } catch (error) {
    notice("error", `not revoked: ${error}`);
  }
}

// The revoke column's header and cell: nothing unless revocable.
function revokeHead() {
  return revocable ? [[""]] : [];
}

function revokeCell(lock, token) {
  if (!revocable) return [];
  const button = el("button", { type: "button", class: "revoke", title: `revoke token ${token}` },
    "revoke");
  button.addEventListener("click", () => revoke(lock, token));
  return [el("td", {}, button)];
}

const SECTIONS = {
  locks: (s) => table(
    [["name"], ["token", NUM], ["holder"], ["expires", NUM], ["waiters", NUM], ...revokeHead()],
    s.locks.map((l) => row(l.name, cell(l.name, "name"), cell(l.token, "num token"),
      cell(holder(l), "holder"), left(l.expires_in), cell(l.waiters, "num waiters"),
      ...revokeCell(l.name, l.token))),
    "no locks held"),
  held_back: (s) => table(
    [["name"], ["ended lease's token", NUM], ["free in", NUM], ["why"]],
    s.held_back.map((h) => row(h.name, cell(h.name, "name"), cell(h.token || "-", "num token"),
      left(h.free_in), cell(h.revoked ? h.revoked.text : "lock-delay", "why"))),
    "no name held back"),
  leaders: (s) => table(
    [["election"], ["term", NUM], ["value"], ["holder"], ["expires", NUM], ...revokeHead()],
    s.leaders.map((l) => row(l.name, cell(l.name, "name"), cell(l.term, "num term"),
      cell(l.value ?? "-"), cell(holder(l), "holder"), left(l.expires_in),
      ...revokeCell(l.name, l.term))),
    "no elections led"),
  semaphores: (s) => s.semaphores.length ? el("div", {}, ...s.semaphores.map((m) => el("div",
    { "data-name": m.name },
    el("p", { class: "sub" }, el("span", { class: "name" }, m.name),
      `: ${m.held}${m.permits ? ` of ${m.permits}` : ""} permits held, ${m.waiting} waiting`),
    table([["slot", NUM], ["token", NUM], ["holder"], ["expires", NUM], ...revokeHead()],
      m.holders.map((h) => el("tr", { "data-lock": h.lock }, cell(h.slot, NUM),
        cell(h.token, "num token"), cell(holder(h), "holder"), left(h.expires_in),
        ...revokeCell(h.lock, h.token))),
      "no permit held")))) : el("p", { class: "empty" }, "no semaphores in use"),
  rwlocks: (s) => table(
    [["name"], ["readers", NUM], ["gate: writer, or next in line"], ["token", NUM], ["waiting", NUM],
      ...revokeHead()],
    s.rwlocks.map((r) => row(r.name, cell(r.name, "name"), cell(r.readers.length, "num readers"),
      cell(r.gate ? holder(r.gate) : "-", "writer"), cell(r.gate ? r.gate.token : "-", "num token"),
      cell(r.gate ? r.gate.waiters : 0, NUM),
      ...(r.gate ? revokeCell(r.gate.lock, r.gate.token) : revocable ? [cell("")] : []))),
    "no read-write locks in use"),
  partitions: (s) => s.partitions.length ? el("div", {}, ...s.partitions.map((g) => el("div",
    { "data-name": g.group },
    el("p", { class: "sub" }, el("span", { class: "name" }, g.group),
      `: ${g.members.length} members, ${g.items.length} items owned`),
    table([["member"], ["weight", NUM], ["holder"], ["expires", NUM]],
      g.members.map((m) => el("tr", {}, cell(m.id, "name"), cell(m.weight ?? "-", NUM),
        cell(holder(m), "holder"), left(m.expires_in))), "no members"),
    table([["item"], ["member"], ["token", NUM]],
      g.items.map((i) => el("tr", {}, cell(i.item, "name"),
        cell([].concat(i.member ?? "-").join(" or ")), cell(i.token, "num token"))),
      "no items owned")))) : el("p", { class: "empty" }, "no partition groups"),
  history: (s) => s.history.length ? el("div", {}, ...s.history.map((j) => el("div",
    { "data-name": j.job },
    el("p", { class: "sub" }, el("span", { class: "name" }, j.job)),
    table([["slot"], ["state"], ["runner"], ["token", NUM], ["attempts", NUM], ["started (UTC)"],
      ["took", NUM], ["exit", NUM]],
      j.slots.map((r) => el("tr", { "data-slot": r.slot }, cell(r.slot, "name"),
        cell(r.state, `state state-${r.state}`), cell(holder(r)), cell(r.token, "num token"),
        cell(r.attempts, NUM),
        cell(new Date(r.started * 1000).toISOString().replace("T", " ").slice(0, 19)),
        cell(r.duration == null ? "-" : `${r.duration.toFixed(1)}s`, NUM),
        cell(r.exit_code ?? (r.error ? "error" : "-"), NUM))),
      "no slots")))) : el("p", { class: "empty" }, "no recorded slots"),
};

function status(state, text) {
  const node = document.getElementById("status");
  node.dataset.state = state;
  node.textContent = text;
}

function render(state) {
  if (state.error) {
    status("error", `store unavailable: ${state.error}`);
    return;
  }
  receivedAt = performance.now();
  revocable = Boolean(CSRF) && state.store.revoke;
  document.getElementById("store").textContent = `${state.store.url} (${state.store.grade})`;
  for (const [id, draw] of Object.entries(SECTIONS)) {
    document.querySelector(`#${id} .body`).replaceChildren(draw(state));
  }
  const read = new Date(state.read_at * 1000).toISOString().slice(11, 19);
  status("live", `live · read ${read} UTC`);
  document.body.dataset.readAt = state.read_at;
}

function connect() {
  const events = new EventSource("/api/events");
  events.onmessage = (event) => render(JSON.parse(event.data));
  events.onerror = () => status("lost", "connection lost: reconnecting…");
}

if (CSRF) document.getElementById("mode").textContent = "Revoke allowed (--allow-revoke).";
connect();
setInterval(tick, 250);
