// turnstile session inspector: read-only views of sessions, transcripts, checkpoints and live events.
// Everything shown is set with textContent (never innerHTML): transcripts are user input.
"use strict";

const API = "/inspector/api";
const LIVE_MAX_ITEMS = 200;
const LIVE_CHECKPOINTS_KEPT = 50; // whole checkpoints seen live, kept in memory for the timeline

const state = {
  selected: null, sessions: [], live: null, treeLive: null, refreshTimer: null, treeTimer: null,
  timeline: null, liveCheckpoints: [],
};

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function getJson(path, params) {
  const query = new URLSearchParams(params || {}).toString();
  const response = await fetch(query ? `${API}/${path}?${query}` : `${API}/${path}`);
  const body = await response.json();
  if (!response.ok) throw new Error(`${body.code}: ${body.message}`);
  return body;
}

function clock(at) {
  if (at === null || at === undefined) return "";
  const date = typeof at === "number" ? new Date(at * 1000) : new Date(at);
  return isNaN(date) ? String(at) : date.toLocaleTimeString([], { hour12: false });
}

function bytes(n) {
  if (n === null || n === undefined) return "";
  return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KB`;
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function badge(text, kind) { return el("span", { class: `pill ${kind || ""}` }, text); }

// ---- the session tree ---------------------------------------------------------------------------

async function loadTree() {
  const q = $("search-input").value.trim();
  try {
    const body = await getJson("sessions", q ? { q } : {});
    state.sessions = body.sessions;
    renderTree(body);
  } catch (err) {
    $("tree-note").textContent = String(err.message || err);
  }
}

function renderTree(body) {
  const byId = new Map(body.sessions.map((s) => [s.id, s]));
  const roots = body.sessions.filter((s) => !s.parent_id || !byId.has(s.parent_id));
  const tree = $("tree");
  tree.replaceChildren(...roots.map((s) => treeNode(s, byId, 0)));
  $("session-count").textContent = `(${body.sessions.length})`;
  const q = $("search-input").value.trim();
  $("tree-note").textContent = body.truncated ? "Only the first sessions are listed: search to narrow."
    : body.sessions.length === 0 ? (q ? `No session id contains “${q}”.` : "No sessions yet.") : "";
}

function treeNode(session, byId, depth) {
  const children = (session.children || []).map((id) => byId.get(id)).filter(Boolean);
  const row = el("button", {
    class: `tree-row${state.selected === session.id ? " selected" : ""}`, type: "button",
    "data-session-id": session.id, title: session.id, onclick: () => select(session.id),
  },
  el("span", { class: "tree-label" }, session.label?.en || session.id),
  el("span", { class: "tree-meta" }, el("span", { class: "tree-id" }, session.id),
    badge(session.kind, `kind-${session.kind}`), badge(session.status, `status-${session.status}`)));
  return el("li", {}, row, children.length ? el("ul", {}, ...children.map((c) => treeNode(c, byId, depth + 1))) : null);
}

// ---- one session ---------------------------------------------------------------------------------

async function select(sessionId) {
  state.selected = sessionId;
  if (location.hash !== `#session=${encodeURIComponent(sessionId)}`) {
    history.replaceState(null, "", `#session=${encodeURIComponent(sessionId)}`);
  }
  for (const row of document.querySelectorAll(".tree-row")) {
    row.classList.toggle("selected", row.dataset.sessionId === sessionId);
  }
  $("live").replaceChildren();
  state.liveCheckpoints = [];
  state.timeline = null;
  openLive(sessionId);
  await refreshSession();
}

async function refreshSession() {
  const sessionId = state.selected;
  if (sessionId === null) return;
  try {
    const [body, timeline] = await Promise.all([
      getJson("session", { id: sessionId }), getJson("checkpoints", { id: sessionId }),
    ]);
    if (state.selected !== sessionId) return;
    renderHead(sessionId, body);
    renderTranscript(body.transcript);
    renderTimeline(sessionId, timeline);
  } catch (err) {
    $("session-head").replaceChildren(el("h2", {}, sessionId), el("p", { class: "error" }, String(err.message || err)));
    $("transcript").replaceChildren();
    $("timeline").replaceChildren();
  }
}

function renderHead(sessionId, body) {
  const s = body.session;
  const cp = body.checkpoint;
  const facts = el("div", { class: "facts" });
  if (s) {
    facts.append(badge(s.kind, `kind-${s.kind}`), badge(s.status, `status-${s.status}`));
    if (s.origin_platform) {
      facts.append(badge([s.origin_platform, s.origin_chat?.name].filter(Boolean).join(" · "), "muted"));
    }
    if (s.tokens) facts.append(badge(`${s.tokens.input} in / ${s.tokens.output} out tokens`, "muted"));
  } else {
    facts.append(badge("no record (checkpoints only)", "status-error"));
  }
  if (cp) facts.append(badge(`engine ${cp.status} · v${cp.state_version}`, "muted"));
  $("session-head").replaceChildren(
    el("h2", { id: "session-title" }, s?.label?.en || sessionId),
    el("div", { class: "session-id" }, sessionId), facts,
  );
}

// ---- the transcript as a chat --------------------------------------------------------------------

function renderTranscript(items) {
  const box = $("transcript");
  if (!items.length) {
    box.replaceChildren(el("p", { class: "muted" }, "No checkpoint yet: the transcript appears after the first turn."));
    return;
  }
  box.replaceChildren(...items.map(transcriptItem).filter(Boolean));
  box.scrollTop = box.scrollHeight;
}

function stamp(item) { return el("span", { class: "stamp" }, `#${item.seq} · ${clock(item.at)}`); }

function bubble(role, item, ...content) {
  return el("div", { class: `msg ${role}`, "data-kind": item.kind },
    el("div", { class: "msg-head" }, el("span", { class: "role" }, role), stamp(item)), ...content);
}

function transcriptItem(item) {
  const p = item.payload || {};
  switch (item.kind) {
    case "user_message": {
      const attachments = (p.attachments || []).map((a) => el("li", {},
        `${a.name || a.file_name || a.kind || "attachment"} ${a.media_type ? `(${a.media_type})` : ""}`));
      return bubble(p.agent_owned ? "assistant" : "user", item, el("div", { class: "text" }, p.text || ""),
        attachments.length ? el("ul", { class: "attachments" }, ...attachments) : null);
    }
    case "agent_message": {
      const calls = (p.tool_calls || []).map((c) => el("div", { class: "tool-call", "data-tool": c.name },
        el("div", { class: "tool-head" }, "tool call ", el("strong", {}, c.name), el("span", { class: "muted" }, ` ${c.id}`)),
        el("pre", { class: "args" }, pretty(c.arguments || {}))));
      return bubble("assistant", item, p.text ? el("div", { class: "text" }, p.text) : null, ...calls);
    }
    case "tool_result":
      return el("div", { class: `tool-result${p.ok === false ? " failed" : ""}`, "data-kind": item.kind, "data-tool": p.name },
        el("div", { class: "tool-head" }, "result of ", el("strong", {}, p.name || ""),
          el("span", { class: "muted" }, ` ${p.id || ""}`), p.ok === false ? badge("error", "status-error") : null,
          p.interrupted ? badge("interrupted", "status-waiting") : null, stamp(item)),
        el("pre", { class: "result" }, pretty(p.content ?? "")));
    case "notice":
      return el("div", { class: "notice", "data-kind": item.kind },
        el("span", {}, `notice · ${p.code || "info"}: ${p.text || ""}`), stamp(item));
    case "summary":
      return el("div", { class: "notice", "data-kind": item.kind },
        el("span", {}, `summary of earlier conversation: ${p.text || ""}`), stamp(item));
    case "box":
      return el("div", { class: "notice", "data-kind": item.kind },
        el("span", {}, `controller update: ${pretty(p.context || {})}`), stamp(item));
    case "tool_call":
      return null; // shown as the assistant's tool call card
    default:
      return el("div", { class: "notice", "data-kind": item.kind },
        el("span", {}, `${item.kind}: ${pretty(p).slice(0, 300)}`), stamp(item));
  }
}

// ---- the checkpoint timeline ---------------------------------------------------------------------

function renderTimeline(sessionId, body) {
  state.timeline = body;
  const kept = new Set(body.checkpoints.map((c) => `${c.generation}:${c.state_version}`));
  const rows = body.checkpoints.map((c) => ({ ...c, view: () => viewCheckpoint(sessionId, c.seq) }));
  // Checkpoints seen live that the stream no longer keeps stay viewable from the page's memory.
  for (const c of state.liveCheckpoints) {
    if (!kept.has(`${c.generation}:${c.state_version}`)) {
      rows.push({ ...c, seq: null, view: () => showCheckpoint(`Checkpoint v${c.state_version} of ${sessionId} (seen live)`, c.checkpoint) });
    }
  }
  rows.sort((a, b) => (b.at - a.at) || ((b.state_version ?? 0) - (a.state_version ?? 0)));
  $("timeline").replaceChildren(...rows.map((c) => el("tr", {
    class: `clickable${c.seq === null ? " live-row" : ""}`, tabindex: "0",
    title: c.seq === null ? "Seen live; the stream no longer keeps it" : "View this checkpoint",
    onclick: c.view, onkeydown: (event) => { if (event.key === "Enter") c.view(); },
  }, el("td", {}, c.seq === null ? "live" : String(c.seq)), el("td", {}, c.transition || ""),
  el("td", {}, String(c.state_version ?? "")), el("td", {}, bytes(c.size_bytes)), el("td", {}, clock(c.at)))));
  $("checkpoint-note").textContent = `the stream keeps the last ${body.kept_per_session}; more are kept here while the page is open; `
    + `any step, from the journal: turnstile replay state -s ${sessionId} [--at N] (session.state_at)`;
}

function addLiveCheckpoint(item) {
  state.liveCheckpoints.push(item);
  if (state.liveCheckpoints.length > LIVE_CHECKPOINTS_KEPT) state.liveCheckpoints.shift();
  if (state.timeline) renderTimeline(state.selected, state.timeline);
}

function showCheckpoint(title, checkpoint) {
  $("viewer-title").textContent = title;
  $("viewer-body").textContent = pretty(checkpoint);
  $("viewer").hidden = false;
}

async function viewCheckpoint(sessionId, seq) {
  $("viewer-title").textContent = `Checkpoint #${seq} of ${sessionId}`;
  $("viewer-body").textContent = "loading…";
  $("viewer").hidden = false;
  try {
    $("viewer-body").textContent = pretty(await getJson("checkpoint", { id: sessionId, seq: String(seq) }));
  } catch (err) {
    $("viewer-body").textContent = String(err.message || err);
  }
}

// ---- live events ---------------------------------------------------------------------------------

function openLive(sessionId) {
  if (state.live) state.live.close();
  const source = new EventSource(`${API}/live?${new URLSearchParams({ id: sessionId })}`);
  state.live = source;
  source.onopen = () => { $("live-state").textContent = "streaming"; };
  source.onerror = () => { $("live-state").textContent = "reconnecting…"; };
  source.onmessage = (message) => {
    const item = JSON.parse(message.data);
    if (state.selected !== sessionId) return;
    if (item.kind === "checkpoint") {
      addLiveCheckpoint(item);
      scheduleRefresh();
    }
    addLiveItem(item);
  };
}

function addLiveItem(item) {
  let text;
  if (item.kind === "event") {
    const d = item.data || {};
    text = [item.type, d.change, d.outcome, d.reason, d.turn_id].filter(Boolean).join(" · ");
  } else if (item.kind === "checkpoint") {
    text = `checkpoint · ${item.transition} · v${item.state_version} · ${bytes(item.size_bytes)}`;
  } else {
    text = `${item.count} items missed (slow reader)`;
  }
  const list = $("live");
  list.prepend(el("li", { class: `live-${item.kind}` }, el("span", { class: "stamp" }, clock(item.at)), text));
  while (list.children.length > LIVE_MAX_ITEMS) list.lastChild.remove();
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refreshSession, 250);
}

function openTreeLive() {
  const source = new EventSource(`${API}/live`);
  state.treeLive = source;
  source.onopen = () => { $("connection").textContent = "live"; $("connection").className = "pill status-active"; };
  source.onerror = () => { $("connection").textContent = "reconnecting…"; $("connection").className = "pill status-waiting"; };
  source.onmessage = (message) => {
    const item = JSON.parse(message.data);
    if (item.kind === "event" && String(item.type).startsWith("session.")) {
      clearTimeout(state.treeTimer);
      state.treeTimer = setTimeout(loadTree, 250);
    }
  };
}

// ---- start ---------------------------------------------------------------------------------------

function fromHash() {
  const match = location.hash.match(/^#session=(.*)$/);
  return match ? decodeURIComponent(match[1]) : null;
}

document.addEventListener("DOMContentLoaded", async () => {
  $("search").addEventListener("submit", async (event) => {
    event.preventDefault();
    await loadTree();
    const q = $("search-input").value.trim();
    const exact = state.sessions.find((s) => s.id === q);
    if (exact) await select(exact.id);
  });
  $("search-input").addEventListener("input", () => {
    clearTimeout(state.treeTimer);
    state.treeTimer = setTimeout(loadTree, 200);
  });
  $("viewer-close").addEventListener("click", () => { $("viewer").hidden = true; });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") $("viewer").hidden = true; });
  window.addEventListener("hashchange", () => { const id = fromHash(); if (id && id !== state.selected) select(id); });
  await loadTree();
  openTreeLive();
  const initial = fromHash();
  if (initial) await select(initial);
});
