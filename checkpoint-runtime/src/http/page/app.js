// The checkpoint web page: a run list with filters and a run page (status,
// what it waits for with a form to send the signal, cancel / retry / fork,
// the checkpoint timeline with each version's fields and what changed, the
// history). Plain script, no build step. Every node is built with
// textContent: run data is never parsed as HTML.
"use strict";

const TOKEN_KEY = "checkpoint-token";
const LIST_LIMIT = 100;
const STATUSES = ["queued", "running", "waiting", "joining", "sleeping", "held", "completed", "failed", "cancelled", "incompatible"];

let timer = null; // the current view's refresh
let streamAbort = null; // the current view's stream reader (an AbortController)

// ---- helpers -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// Replaces the children of `node`, leaving out nulls (absent sections).
function mount(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

// A Rust type name without its paths: `alloc::vec::Vec<alloc::string::String>`
// reads `Vec<String>`.
function shortType(t) {
  return String(t || "").replace(/\b[A-Za-z_][A-Za-z0-9_]*::/g, "");
}

function pretty(v) {
  return JSON.stringify(v, null, 2);
}

function compact(v) {
  const s = JSON.stringify(v);
  return s === undefined ? "" : s;
}

// An RFC 3339 time to the millisecond: `2026-12-05 21:07:03.412 UTC`.
function time(t) {
  if (!t) return "-";
  const [day, clock] = t.replace(/Z$/, "").split("T");
  const [hms, frac] = (clock || "").split(".");
  return day + " " + hms + "." + ((frac || "") + "000").slice(0, 3) + " UTC";
}

// How long from `from` to `to` (RFC 3339; `to` absent: now), in words:
// `850 ms`, `42 s`, `3 min 5 s`, `2 h 10 min`, `4 d 3 h`.
function duration(from, to) {
  if (!from) return "-";
  const ms = Math.max(0, (to ? Date.parse(to) : Date.now()) - Date.parse(from));
  if (ms < 1000) return ms + " ms";
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + " min " + (s % 60) + " s";
  const h = Math.floor(m / 60);
  if (h < 24) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}

const FINISHED = ["completed", "failed", "cancelled"];

// What a field's change is called on the page: a field the latest version
// no longer saves is not lost data (it went out of scope, or the code no
// longer keeps it).
function changeLabel(change) {
  return change === "removed" ? "no longer saved" : change;
}

// Shown quietly, not in the colour of damage.
function changeClass(change) {
  return change === "removed" ? "t-gone" : "t-" + change;
}

// A link to a route of this page (absolute, so that it works whatever
// <base> the page has).
function href(route) {
  return location.href.split("#")[0] + "#" + route;
}

function runRoute(id) {
  return "/runs/" + encodeURIComponent(id);
}

function api(path) {
  return "api/" + path;
}

function runApi(id, rest) {
  return api("runs/" + encodeURIComponent(id) + (rest || ""));
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || "HTTP " + status);
    this.status = status;
    this.body = body;
  }
}

async function call(url, options) {
  const opts = Object.assign({ method: "GET" }, options || {});
  opts.headers = Object.assign({ Authorization: "Bearer " + token() }, opts.headers || {});
  if (opts.json !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = typeof opts.json === "string" ? opts.json : JSON.stringify(opts.json);
    delete opts.json;
  }
  const res = await fetch(url, opts);
  let body = null;
  try {
    body = await res.json();
  } catch (_) {
    body = null;
  }
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The server refused the token: log in again.");
    throw new ApiError(401, body);
  }
  if (!res.ok) throw new ApiError(res.status, body);
  return body;
}

function flash(message, kind) {
  const box = document.getElementById("flash");
  box.replaceChildren();
  if (!message) return;
  box.append(el("p", { class: "flash " + (kind || "ok"), text: message }));
}

function stopTimer() {
  if (timer) clearInterval(timer);
  timer = null;
}

function stopStream() {
  if (streamAbort) streamAbort.abort();
  streamAbort = null;
}

function statusBadge(status) {
  return el("span", { class: "badge s-" + status.state, text: status.state });
}

// `children`: the run's children as the API lists them, when known.
function childrenText(children) {
  if (!children) return "waiting for its children";
  const states = {};
  for (const c of children) {
    const state = (c.status && c.status.state) || "unknown";
    states[state] = (states[state] || 0) + 1;
  }
  const parts = Object.keys(states).sort().map((k) => states[k] + " " + k);
  return "waiting for " + children.length + " child" + (children.length === 1 ? "" : "ren") +
    (parts.length ? " (" + parts.join(", ") + ")" : "");
}

function statusText(status, children) {
  switch (status.state) {
    case "joining":
      return childrenText(children);
    case "waiting":
      if (String(status.signal).startsWith("join#")) return childrenText(children);
      return "waiting for signal `" + status.signal + "`" + (status.deadline ? " until " + time(status.deadline) : "");
    case "sleeping":
      return "sleeping until " + time(status.until);
    case "in_queue":
      return "queued in `" + status.queue + "`";
    case "failed":
      return "failed: " + status.error;
    case "incompatible":
      return "parked: site `" + status.site + "`, field `" + status.field + "`: " + status.detail;
    default:
      return status.state;
  }
}

function errorText(e) {
  if (e instanceof ApiError) {
    const kind = e.body && e.body.kind ? " (" + e.body.kind + ", HTTP " + e.status + ")" : " (HTTP " + e.status + ")";
    return e.message + kind;
  }
  return String(e && e.message ? e.message : e);
}

// ---- login ---------------------------------------------------------------

function showLogin(message) {
  stopTimer();
  stopStream();
  document.getElementById("logout").hidden = true;
  const app = document.getElementById("app");
  const input = el("input", { type: "password", id: "token", name: "token", autocomplete: "off", required: true, size: 48 });
  const form = el("form", { id: "login-form", class: "card login" },
    el("h1", { text: "Log in" }),
    el("p", { text: "Paste the token that `checkpoint serve` printed when it started (or its CHECKPOINT_TOKEN)." }),
    el("label", { for: "token", text: "Token" }),
    input,
    el("button", { type: "submit", id: "login", text: "Log in" }),
    message ? el("p", { class: "error", id: "login-error", text: message }) : null);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    try {
      await call(api("runs?limit=1"));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) showLogin(errorText(e));
      return;
    }
    route();
  });
  app.replaceChildren(form);
  input.focus();
}

// ---- the run list --------------------------------------------------------

function listParams() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

async function showList() {
  const params = listParams();
  const app = document.getElementById("app");
  const select = el("select", { name: "status", id: "f-status" },
    el("option", { value: "", text: "any" }),
    STATUSES.map((s) => el("option", { value: s, text: s, selected: params.get("status") === s })));
  const workflow = el("input", { name: "workflow", id: "f-workflow", value: params.get("workflow") || "", placeholder: "name" });
  const prefix = el("input", { name: "prefix", id: "f-prefix", value: params.get("prefix") || "", placeholder: "vendor-" });
  const filters = el("form", { id: "filters", class: "filters" },
    el("label", {}, "Status ", select),
    el("label", {}, "Workflow ", workflow),
    el("label", {}, "Id prefix ", prefix),
    el("button", { type: "submit", text: "Filter" }),
    el("button", { type: "button", class: "quiet", text: "Clear", onclick: () => { location.hash = "#/"; } }));
  filters.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    if (select.value) p.set("status", select.value);
    if (workflow.value.trim()) p.set("workflow", workflow.value.trim());
    if (prefix.value) p.set("prefix", prefix.value);
    const q = p.toString();
    location.hash = "#/" + (q ? "?" + q : "");
  });
  const body = el("tbody");
  const note = el("p", { class: "muted", id: "runs-note" });
  // How many runs in each status (under the workflow and id filters): each
  // count links to the list of those runs.
  const counts = el("p", { class: "counts", id: "counts" });
  const showCounts = (answer) => {
    const link = (label, status, n) => {
      const p = new URLSearchParams(params);
      p.delete("offset");
      if (status) p.set("status", status); else p.delete("status");
      const q = p.toString();
      const current = (params.get("status") || "") === status;
      return el("a", { href: href("/" + (q ? "?" + q : "")), class: "count" + (current ? " current" : ""), "data-status": status || "all" },
        el("strong", { text: String(n) }), " " + label);
    };
    mount(counts, link("all", "", answer.total),
      STATUSES.filter((s) => answer.counts[s] > 0).map((s) => [" ", link(s, s, answer.counts[s])]));
  };
  // Newest first, one page at a time; `offset` in the address.
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const pageAt = (at) => {
    const p = new URLSearchParams(params);
    if (at > 0) p.set("offset", String(at)); else p.delete("offset");
    const q = p.toString();
    location.hash = "#/" + (q ? "?" + q : "");
  };
  const newer = el("button", { type: "button", id: "newer", class: "quiet", text: "\u2190 Newer", disabled: offset === 0,
    onclick: () => pageAt(Math.max(0, offset - LIST_LIMIT)) });
  const older = el("button", { type: "button", id: "older", class: "quiet", text: "Older \u2192", disabled: true,
    onclick: () => pageAt(offset + LIST_LIMIT) });
  mount(app,
    el("h1", { text: "Runs" }),
    filters,
    counts,
    el("table", { id: "runs", class: "grid" },
      el("thead", {}, el("tr", {}, ["Run", "Workflow", "Status", "Checkpoint", "Started", "Duration", "Last activity"].map((h) => el("th", { text: h })))),
      body),
    el("p", { class: "pager" }, newer, " ", older),
    note);

  const load = async () => {
    const q = new URLSearchParams();
    for (const k of ["status", "workflow", "prefix", "parent"]) if (params.get(k)) q.set(k, params.get(k));
    q.set("order", "newest");
    q.set("offset", String(offset));
    // One more than a page: whether there is an older one.
    q.set("limit", String(LIST_LIMIT + 1));
    const c = new URLSearchParams();
    for (const k of ["workflow", "prefix", "parent"]) if (params.get(k)) c.set(k, params.get(k));
    let runs;
    try {
      [runs] = await Promise.all([
        call(api("runs?" + q.toString())),
        call(api("counts?" + c.toString())).then(showCounts),
      ]);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) note.textContent = "Cannot list runs: " + errorText(e);
      return;
    }
    older.disabled = runs.length <= LIST_LIMIT;
    runs = runs.slice(0, LIST_LIMIT);
    body.replaceChildren(...runs.map((r) => el("tr", { "data-run": r.id },
      el("td", { class: "nowrap" }, el("a", { href: href(runRoute(r.id)), class: "run-link", text: r.id })),
      el("td", { text: r.workflow }),
      // The badge names the state; the text only what it adds.
      el("td", {}, statusBadge(r.status), statusText(r.status) !== r.status.state
        ? [" ", el("span", { class: "muted", text: statusText(r.status) })] : null),
      el("td", { text: r.latest_seq ? "#" + r.latest_seq : "-" }),
      el("td", { class: "nowrap", text: time(r.created_at) }),
      el("td", { class: "nowrap duration", text: duration(r.created_at, FINISHED.includes(r.status.state) ? r.updated_at : null) }),
      el("td", { class: "nowrap", text: time(r.updated_at) }))));
    note.textContent = runs.length === 0
      ? (offset > 0 ? "No runs on this page." : "No runs match.")
      : "Runs " + (offset + 1) + "\u2013" + (offset + runs.length) + ", newest first. Refreshes every 5 s.";
  };
  await load();
  stopTimer();
  timer = setInterval(load, 5000);
}

// ---- the run page --------------------------------------------------------

function jsonBlock(v, cls) {
  return el("pre", { class: "json " + (cls || "") }, pretty(v));
}

function section(title, id, ...children) {
  return el("section", { class: "card", id }, el("h2", { text: title }), ...children);
}

function resultLine(id) {
  return el("p", { class: "result", id, role: "status" });
}

function setResult(node, message, ok) {
  node.textContent = message;
  node.className = "result " + (ok ? "ok" : "error");
}

function signalSection(run) {
  const w = run.waiting_for;
  if (!w) return null;
  const schema = w.payload_schema;
  const example = schema && schema.example !== undefined ? pretty(schema.example) : "";
  // Empty, with the schema's example as a placeholder: an example filled
  // in (`{"approved": false, ...}`) was one click from sending a decision
  // nobody made. "Start from the example" copies it in, to be edited.
  const textarea = el("textarea", { id: "signal-payload", name: "payload", rows: 6, spellcheck: "false", placeholder: example });
  const useExample = example
    ? el("button", { type: "button", id: "signal-example", class: "quiet", text: "Start from the example",
      onclick: () => { textarea.value = example; textarea.focus(); } })
    : null;
  const result = resultLine("signal-result");
  const form = el("form", { id: "signal-form" },
    el("label", { for: "signal-payload", text: "Payload (JSON)" }),
    textarea,
    el("div", { class: "buttons" },
      el("button", { type: "submit", id: "signal-send", text: "Send `" + w.signal + "`" }),
      useExample),
    result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = textarea.value;
    if (!text.trim()) {
      setResult(result, "Type the payload first (the example above shows its shape).", false);
      return;
    }
    try {
      JSON.parse(text);
    } catch (e) {
      setResult(result, "Not JSON: " + e.message + " (a JSON string needs quotes)", false);
      return;
    }
    try {
      await call(runApi(run.id, "/signals/" + encodeURIComponent(w.signal)), { method: "POST", json: text });
    } catch (e) {
      setResult(result, "Refused: " + errorText(e), false);
      return;
    }
    flash("Signal `" + w.signal + "` stored for run `" + run.id + "`: a worker with its workflow registered resumes it.");
    await showRun(run.id, { follow: true });
  });
  const hint = schema
    ? el("div", { class: "hint", id: "payload-hint" },
      el("p", {}, "The wait decodes a ", el("code", { text: schema.type || "?" }), ":"),
      el("pre", { class: "code" }, (schema.definitions || []).join("\n") || schema.type))
    : el("p", { class: "muted", id: "payload-hint", text: "The wait stored no schema of its payload type: any JSON is accepted here and the workflow decides." });
  return section("Waiting for `" + w.signal + "`", "waiting",
    el("p", {}, w.deadline ? "Until " + time(w.deadline) + "; then the wait ends without it." : "No deadline."),
    hint,
    form);
}

function progressSection(run) {
  if (run.progress === null || run.progress === undefined) return null;
  return section("Progress", "progress",
    el("p", { class: "muted", text: "The latest value the run set (stored with its checkpoints)." }),
    jsonBlock(run.progress, "progress-value"));
}

// How many of a stream's items the page keeps (the latest).
const STREAM_SHOWN = 200;

// The run's stream (`ctx.emit`): the API's server-sent events, read with
// fetch (an EventSource cannot send the token), live until the run ends.
function streamSection(run) {
  const list = el("ul", { id: "stream-items", class: "stream" });
  const note = el("p", { class: "muted", id: "stream-note", text: "Reading the stream…" });
  readStream(run.id, list, note);
  return section("Stream", "stream", note, list);
}

async function readStream(id, list, note) {
  stopStream();
  const controller = new AbortController();
  streamAbort = controller;
  let count = 0;
  const shown = () => count + " item(s)" + (count > STREAM_SHOWN ? ", the latest " + STREAM_SHOWN + " shown" : "");
  try {
    const res = await fetch(runApi(id, "/stream"), {
      headers: { Authorization: "Bearer " + token(), Accept: "text/event-stream" },
      signal: controller.signal,
    });
    if (!res.ok || !res.body) {
      note.textContent = "The stream cannot be read (HTTP " + res.status + ").";
      return;
    }
    note.textContent = "No items yet; live.";
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        const ev = { event: "message", id: "", data: "" };
        for (const line of block.split("\n")) {
          const at = line.indexOf(":");
          if (at <= 0) continue; // a comment (keep-alive) or nothing
          const key = line.slice(0, at);
          const val = line.slice(at + 1).replace(/^ /, "");
          if (key === "event") ev.event = val;
          else if (key === "id") ev.id = val;
          else if (key === "data") ev.data += val;
        }
        if (ev.event === "item") {
          count += 1;
          list.append(el("li", { "data-index": ev.id }, el("code", { text: ev.id }), " ", el("span", { text: ev.data })));
          while (list.children.length > STREAM_SHOWN) list.firstChild.remove();
          note.textContent = shown() + "; live.";
        } else if (ev.event === "end") {
          note.textContent = count ? shown() + "; the run ended." : "The run emitted nothing.";
        } else if (ev.event === "error") {
          note.textContent = "The stream stopped: " + ev.data;
        }
      }
    }
  } catch (e) {
    if (e.name !== "AbortError") note.textContent = "The stream stopped: " + e.message;
  }
}

function pendingSection(run) {
  const pending = run.pending_signals || [];
  if (pending.length === 0) return null;
  return section("Pending signals", "pending",
    el("p", { class: "muted", text: "Stored and not consumed yet, oldest first: a wait with that name takes the oldest." }),
    el("ul", {}, pending.map((p) => el("li", { "data-signal": p.name },
      el("code", { text: p.name }),
      el("span", { class: "muted", text: " · stored " + time(p.received_at) + " · " + p.size + " B" })))));
}

function actionsSection(run, checkpoints) {
  const result = resultLine("action-result");
  const act = async (label, what, options) => {
    try {
      const answer = await call(runApi(run.id, what), Object.assign({ method: "POST" }, options || {}));
      return answer;
    } catch (e) {
      setResult(result, label + " refused: " + errorText(e), false);
      return null;
    }
  };
  const cancel = el("button", { type: "button", id: "cancel", class: "danger", disabled: !run.actions.cancel, text: "Cancel run" });
  cancel.addEventListener("click", async () => {
    if (cancel.dataset.armed !== "yes") {
      cancel.dataset.armed = "yes";
      cancel.textContent = "Really cancel?";
      return;
    }
    const a = await act("Cancel", "/cancel");
    if (a) {
      flash(a.cancelled ? "Run `" + run.id + "` cancelled." : "Run `" + run.id + "` had already finished.");
      showRun(run.id);
    }
  });
  // Ask to cancel: the workflow sees the request, cleans up, and ends
  // cancelled; past the grace period it is cancelled at once.
  const reason = el("input", { id: "cancel-reason", name: "reason", value: "cancelled from the page", size: 28 });
  const grace = el("input", { id: "cancel-grace", name: "grace", type: "number", min: "0", step: "1", value: "30", size: 5 });
  const abandon = el("input", { id: "cancel-abandon", name: "abandon", type: "checkbox" });
  const ask = el("button", { type: "submit", id: "request-cancel", class: "danger", disabled: !run.actions.cancel, text: "Ask to cancel" });
  const askForm = el("form", { id: "request-cancel-form", class: "inline" },
    el("label", {}, "Reason ", reason),
    el("label", {}, " grace (s) ", grace),
    el("label", {}, " ", abandon, " leave its children running"),
    ask);
  askForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    if (ask.dataset.armed !== "yes") {
      ask.dataset.armed = "yes";
      ask.textContent = "Really ask to cancel?";
      return;
    }
    const seconds = Number(grace.value);
    if (!Number.isFinite(seconds) || seconds < 0) {
      setResult(result, "The grace period is a number of seconds, 0 or more.", false);
      return;
    }
    const a = await act("Ask to cancel", "/cancel", { json: {
      reason: reason.value,
      grace_ms: Math.round(seconds * 1000),
      children: abandon.checked ? "abandon" : "cascade",
    } });
    if (a) {
      flash("Run `" + run.id + "` asked to cancel (" + a.reason + "); it has " + (a.grace_ms / 1000) + "s to clean up.");
      showRun(run.id, { follow: true });
    }
  });
  const retry = el("button", { type: "button", id: "retry", disabled: !run.actions.retry, text: "Retry" });
  retry.addEventListener("click", async () => {
    const a = await act("Retry", "/retry");
    if (a) {
      flash("Run `" + run.id + "` will be retried from its latest checkpoint.");
      showRun(run.id, { follow: true });
    }
  });
  const seq = el("select", { id: "fork-seq", name: "seq" },
    checkpoints.slice().reverse().filter((c) => !c.damaged).map((c) => el("option", { value: String(c.seq), text: "#" + c.seq + (c.label ? " (" + c.label + ")" : "") })));
  const newId = el("input", { id: "fork-id", name: "new_id", value: run.id + "-fork", size: 24 });
  const fork = el("form", { id: "fork-form", class: "inline" },
    el("label", {}, "Fork from ", seq),
    el("label", {}, " as ", newId),
    el("button", { type: "submit", disabled: !run.actions.fork || checkpoints.length === 0, text: "Fork" }));
  fork.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const a = await act("Fork", "/fork", { json: { seq: Number(seq.value), new_id: newId.value } });
    if (a) {
      flash("Run `" + a.run + "` created from checkpoint #" + a.seq + " of `" + a.from + "`.");
      location.hash = "#" + runRoute(a.run);
    }
  });
  const pending = run.cancel_reason
    ? el("p", { id: "cancel-pending", text: "Cancel requested: " + run.cancel_reason })
    : null;
  return section("Actions", "actions", pending, el("div", { class: "buttons" }, cancel, retry), askForm, fork, result);
}

function treeSection(run) {
  const parent = run.parent
    ? el("a", { href: href(runRoute(run.parent)), text: run.parent })
    : el("span", { class: "muted", text: "none" });
  const children = run.children && run.children.length
    ? el("ul", { class: "children" }, run.children.map((c) => el("li", { "data-run": c.id },
        el("a", { href: href(runRoute(c.id)), text: c.id }),
        el("span", { class: "muted", text: " " + c.workflow + ", " + (c.status && c.status.state || "") }))))
    : el("span", { class: "muted", text: "none" });
  return section("Run tree", "tree",
    el("dl", { class: "pairs" }, el("dt", { text: "Parent" }), el("dd", {}, parent), el("dt", { text: "Children" }), el("dd", {}, children)));
}

function fieldsTable(version) {
  const changed = new Map((version.diff || []).map((d) => [d.name, d]));
  const rows = version.fields.map((f) => {
    const d = changed.get(f.name);
    const change = d ? d.change : "unchanged";
    return el("tr", { class: "c-" + change, "data-field": f.name },
      el("td", {}, el("code", { text: f.name })),
      el("td", { class: "type", title: f.type, text: shortType(f.type) }),
      el("td", {}, f.value !== null && f.value !== undefined
        ? jsonBlock(f.value)
        : el("span", { class: "muted", text: "(not shown: " + (f.note || "no value") + ")" })),
      el("td", {}, el("span", { class: "tag " + changeClass(change), text: changeLabel(change) })));
  });
  return el("table", { class: "grid fields" },
    el("thead", {}, el("tr", {}, ["Field", "Type", "Value", "Change"].map((h) => el("th", { text: h })))),
    el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", { colspan: 4, class: "muted", text: "(no fields)" }))]));
}

function diffList(version) {
  const diffs = (version.diff || []).filter((d) => d.change !== "unchanged");
  const from = version.previous_seq ? "#" + version.previous_seq : null;
  if (!from) return el("p", { class: "muted", text: "The first kept version: every field is new." });
  if (diffs.length === 0) return el("p", { class: "muted", text: "No field changed since " + from + "." });
  return el("div", { class: "diff" },
    el("p", { text: "Changes since " + from + ":" }),
    el("ul", {}, diffs.map((d) => el("li", { "data-diff": d.name },
      el("code", { text: d.name }), " ", el("span", { class: "tag " + changeClass(d.change), text: changeLabel(d.change) }),
      d.old_type ? el("span", { class: "muted", text: " (type was " + shortType(d.old_type) + ")" }) : null,
      d.change === "changed" && d.changes && d.changes.length
        ? el("ul", { class: "changes" }, d.changes.map((c) => el("li", {},
          el("code", { text: c.path || "(whole value)" }), " ",
          c.op === "add" ? el("span", { class: "new", text: "+ " + compact(c.new) })
            : c.op === "remove" ? el("span", { class: "old", text: "− " + compact(c.old) })
              : [el("span", { class: "old", text: compact(c.old) }), " → ", el("span", { class: "new", text: compact(c.new) })])),
          d.truncated ? el("li", { class: "muted", text: "… more changes: compare the whole values" }) : null)
        : d.change === "removed" ? el("span", { class: "old", text: " was " + compact(d.old) })
          : d.change === "added" ? el("span", { class: "new", text: " = " + compact(d.new) }) : null))));
}

function timelineSection(run, checkpoints) {
  if (checkpoints.length === 0) {
    return section("Checkpoints", "timeline", el("p", { class: "muted", text: "No checkpoint yet." }));
  }
  const items = checkpoints.map((c, i) => {
    const body = el("div", { class: "version-body" }, el("p", { class: "muted", text: "Loading…" }));
    const fieldNames = c.fields.map((f) => f.name).join(", ") || "no fields";
    const details = el("details", { class: "version", "data-seq": String(c.seq) },
      el("summary", {},
        el("strong", { text: "#" + c.seq }), " ",
        c.label ? el("span", { class: "label", text: c.label }) : el("span", { class: "muted", text: c.site }),
        el("span", { class: "muted", text: " · " + time(c.created_at) + " · " + c.size + " B · " + fieldNames }),
        c.damaged ? el("span", { class: "tag t-removed", text: "damaged" }) : null),
      body);
    let loaded = false;
    details.addEventListener("toggle", async () => {
      if (!details.open || loaded) return;
      loaded = true;
      if (c.damaged) {
        body.replaceChildren(el("p", { class: "error", text: "Damaged: " + c.damaged }));
        return;
      }
      try {
        const v = await call(runApi(run.id, "/checkpoints/" + c.seq));
        body.replaceChildren(fieldsTable(v), diffList(v));
      } catch (e) {
        body.replaceChildren(el("p", { class: "error", text: errorText(e) }));
      }
    });
    // The latest three versions open at once.
    if (i >= checkpoints.length - 3) details.open = true;
    return el("li", {}, details);
  });
  return section("Checkpoints", "timeline",
    el("p", { class: "muted", text: checkpoints.length + " kept version(s), oldest first; open one to see its fields and what changed from the one before." }),
    el("ol", { class: "timeline" }, items));
}

function historySection(entries) {
  return section("History", "history",
    el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, el("th", { text: "Time" }), el("th", { text: "Event" }))),
      el("tbody", {}, entries.map((e) => el("tr", { "data-event": e.event }, el("td", { class: "nowrap", text: time(e.at) }), el("td", { text: e.text }))))));
}

async function showRun(id, options) {
  stopTimer();
  const app = document.getElementById("app");
  let run, checkpoints, entries;
  try {
    [run, checkpoints, entries] = await Promise.all([
      call(runApi(id)),
      call(runApi(id, "/checkpoints")),
      call(runApi(id, "/history")),
    ]);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return;
    app.replaceChildren(el("p", {}, el("a", { href: href("/"), text: "← Runs" })), el("p", { class: "error", id: "run-error", text: errorText(e) }));
    return;
  }
  const meta = [
    ["Workflow", run.workflow],
    ["Status", statusText(run.status, run.children)],
    ["Started", time(run.created_at)],
    ["Duration", duration(run.created_at, FINISHED.includes(run.status.state) ? run.updated_at : null)],
    ["Last activity", time(run.updated_at)],
    ["Worker", run.worker ? run.worker + (run.lease_expires_at ? " (lease until " + time(run.lease_expires_at) + ")" : "") : "-"],
    ["Latest checkpoint", run.latest_seq ? "#" + run.latest_seq : "none yet"],
  ];
  const latest = run.checkpoint && run.checkpoint.error
    ? el("p", { class: "error", text: "Latest checkpoint: " + run.checkpoint.error.message })
    : null;
  mount(app,
    el("p", {}, el("a", { href: href("/"), id: "back", text: "← Runs" })),
    el("div", { class: "run-head" },
      el("h1", { id: "run-id", text: run.id }),
      el("span", { id: "run-status" }, statusBadge(run.status)),
      el("button", { type: "button", class: "quiet", id: "refresh", text: "Refresh", onclick: () => showRun(id) })),
    el("dl", { class: "pairs", id: "run-meta" }, meta.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
    latest,
    el("div", { class: "io" },
      el("div", {}, el("h3", { text: "Input" }), jsonBlock(run.input)),
      run.output !== null ? el("div", {}, el("h3", { text: "Output" }), jsonBlock(run.output, "output")) : null),
    signalSection(run),
    progressSection(run),
    streamSection(run),
    pendingSection(run),
    actionsSection(run, checkpoints),
    timelineSection(run, checkpoints),
    historySection(entries),
    treeSection(run));

  // Live: while the run is not finished, look again every 2 s and show a
  // new checkpoint, history entry, status or pending signal, unless the
  // operator is typing in a form (it would be cleared).
  if (!(options && options.follow) && !FINISHED.includes(run.status.state)) {
    const seen = compact([run.status, run.latest_seq, entries.length, run.pending_signals]);
    timer = setInterval(async () => {
      const active = document.activeElement;
      const typing = (active && active.closest && active.closest("form")) ||
        (document.getElementById("signal-payload") || {}).value;
      if (typing) return;
      let now, history;
      try {
        [now, history] = await Promise.all([call(runApi(id)), call(runApi(id, "/history"))]);
      } catch (_) {
        return;
      }
      if (compact([now.status, now.latest_seq, history.length, now.pending_signals]) !== seen) {
        stopTimer();
        showRun(id, { live: true });
      }
    }, 2000);
  }
  // After a signal or a retry, look again while the run is on its way.
  if (options && options.follow) {
    let left = 40;
    const before = compact(run.status);
    timer = setInterval(async () => {
      left -= 1;
      if (left <= 0) return stopTimer();
      let now;
      try {
        now = await call(runApi(id));
      } catch (_) {
        return stopTimer();
      }
      if (compact(now.status) !== before) {
        stopTimer();
        showRun(id, { follow: !["completed", "failed", "cancelled", "waiting", "incompatible"].includes(now.status.state) });
      }
    }, 500);
  }
}

// ---- routing -------------------------------------------------------------

function route() {
  stopTimer();
  stopStream();
  if (!token()) return showLogin();
  document.getElementById("logout").hidden = false;
  const hash = location.hash.replace(/^#/, "") || "/";
  const path = hash.split("?")[0];
  if (path.startsWith("/runs/")) {
    return showRun(decodeURIComponent(path.slice("/runs/".length)));
  }
  return showList();
}

function start() {
  // A token is never taken from the address: it would stay in the
  // browser's history. One put there anyway is taken out, unused.
  if (/^#token=/.test(location.hash)) {
    history.replaceState(null, "", location.href.split("#")[0] + "#/");
  }
  document.getElementById("home").setAttribute("href", href("/"));
  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    flash("");
    showLogin();
  });
  window.addEventListener("hashchange", () => {
    flash("");
    window.scrollTo(0, 0);
    route();
  });
  route();
}

start();
