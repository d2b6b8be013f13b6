// The viewer: the session list, a session's history and subagent tree, live over the mux socket.
// Every view is drawn from wire answers (docs/wire.md); nothing here is stored but the token.

import { createClient, RpcError, Unauthenticated, socketProtocols } from "./rpc.js";
import { parseRoute, formatRoute } from "./route.js";
import { reconnectDelay } from "./backoff.js";
import { relativeTime, duration, childCount } from "./format.js";
import { SeqLog } from "./live.js";
import { HistoryWindow } from "./window.js";
import { TreeState } from "./tree.js";
import { el, describeEvent } from "./render.js";

const PAGE_SIZE = 50;
const TOKEN_KEY = "dsh.token";
const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  route: { view: "list" },
  /** Summaries seen in the list, by id (for facts and breadcrumbs without another call). */
  known: new Map(),
  list: { cursor: null, done: false, loading: false, generation: 0 },
  /** The open session: `{id, log, window, tree, child: {parent, mode} | null, loadingOlder}`. */
  session: null,
  /** How a child was reached from its parent's tree (its history is then `subagent.history`). */
  childOf: new Map(),
  sockets: { mux: null, host: null, attempt: 0, timer: null, connected: false },
  pendingBranches: new Map(),
};

const client = createClient({ token: () => state.token });

// ---- errors, token ----------------------------------------------------------------------------

function showError(error) {
  if (error instanceof Unauthenticated) {
    askToken(error.hadToken);
    return;
  }
  const banner = $("error");
  banner.textContent = error instanceof RpcError ? `${error.code}: ${error.message}` : `internal: ${error.message}`;
  banner.hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

function askToken(refused) {
  $("token-form").hidden = false;
  $("main").hidden = true;
  $("token-error").textContent = refused ? "the token was refused" : "";
  document.body.dataset.state = "ready";
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (submit) => {
  submit.preventDefault();
  state.token = $("token-input").value.trim() || null;
  if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
  $("token-input").value = "";
  $("token-form").hidden = true;
  $("main").hidden = false;
  connect(true);
  show(parseRoute(location.hash));
});

async function call(method, payload) {
  try {
    const value = await client.call(method, payload);
    return value;
  } catch (error) {
    if (error instanceof Unauthenticated && state.token && !error.hadToken) return call(method, payload);
    throw error;
  }
}

// ---- routing ----------------------------------------------------------------------------------

function show(route) {
  state.route = route;
  clearError();
  $("list-view").hidden = route.view !== "list";
  $("session-view").hidden = route.view !== "session";
  document.body.dataset.state = "loading";
  if (route.view === "list") {
    document.title = "Sessions · apiproxy";
    loadList(true);
  } else {
    openSession(route.id, route.seq);
  }
}

window.addEventListener("hashchange", () => show(parseRoute(location.hash)));

function painted(mark) {
  performance.mark(mark);
  document.body.dataset.state = "ready";
}

// ---- the session list -------------------------------------------------------------------------

function listFilters() {
  const cwd = $("filter-cwd").value.trim();
  return { subagents: $("filter-subagents").checked, running: $("filter-running").checked, cwd: cwd || null };
}

function passes(item, filters) {
  if (!filters.subagents && item.origin === "subagent") return false;
  if (filters.running && !item.running) return false;
  if (filters.cwd && item.cwd !== filters.cwd) return false;
  return true;
}

async function loadList(reset) {
  const list = state.list;
  if (reset) {
    list.generation += 1;
    list.cursor = null;
    list.done = false;
    list.loading = false;
    $("session-list").replaceChildren();
  }
  if (list.loading || list.done) return;
  list.loading = true;
  const generation = list.generation;
  const filters = listFilters();
  const payload = { limit: PAGE_SIZE, subagents: filters.subagents };
  if (list.cursor) payload.cursor = list.cursor;
  if (filters.running) payload.running = true;
  if (filters.cwd) payload.cwd = filters.cwd;
  try {
    const page = await call("session.list", payload);
    if (generation !== list.generation) return;
    for (const item of page.items) {
      state.known.set(item.sessionId, item);
      if (passes(item, filters)) $("session-list").append(listRow(item));
    }
    list.cursor = page.nextCursor ?? null;
    list.done = !list.cursor;
    $("list-more").hidden = list.done;
    $("list-empty").hidden = $("session-list").children.length > 0 || !list.done;
    if (reset) painted("dsh:list-painted");
    // A short filtered page: keep reading until the screen is full or the walk ends.
    if (!list.done && $("session-list").children.length < PAGE_SIZE / 2) {
      list.loading = false;
      return loadList(false);
    }
  } catch (error) {
    showError(error);
    document.body.dataset.state = "ready";
  } finally {
    if (generation === list.generation) list.loading = false;
  }
}

function isoTime(ms) {
  return typeof ms === "number" ? new Date(ms).toISOString() : "";
}

function listRow(item) {
  const now = Date.now();
  const label = item.projections?.values?.subagent?.label;
  return el(
    "li",
    { class: "session-row", "data-session-id": item.sessionId },
    el("a", { class: "session-link", href: formatRoute({ view: "session", id: item.sessionId, seq: null }), text: label || item.sessionId }),
    item.running ? el("span", { class: "running-badge", text: "running" }) : el("span"),
    el("span", { class: "child-count", text: childCount(item.subagents) }),
    el("span", { class: "cwd", text: item.cwd ?? "" }),
    el("time", { class: "created", datetime: isoTime(item.createdAt ?? item.updatedAt), text: `created ${relativeTime(item.createdAt ?? item.updatedAt, now)}` }),
    el("time", { class: "updated", datetime: isoTime(item.updatedAt), text: `updated ${relativeTime(item.updatedAt, now)}` }),
  );
}

function updateListRow(sessionId, patch) {
  const item = state.known.get(sessionId);
  if (item) Object.assign(item, patch);
  const row = document.querySelector(`.session-row[data-session-id="${CSS.escape(sessionId)}"]`);
  if (row && item) row.replaceWith(listRow(item));
}

for (const id of ["filter-subagents", "filter-running"]) $(id).addEventListener("change", () => loadList(true));
let cwdTimer = null;
$("filter-cwd").addEventListener("input", () => {
  clearTimeout(cwdTimer);
  cwdTimer = setTimeout(() => loadList(true), 250);
});
$("filters").addEventListener("submit", (submit) => submit.preventDefault());
$("list-more").addEventListener("click", () => loadList(false));
window.addEventListener("scroll", () => {
  if (state.route.view === "list" && window.innerHeight + window.scrollY >= document.body.offsetHeight - 200) loadList(false);
});

// ---- a session --------------------------------------------------------------------------------

async function describe(id) {
  try {
    const answer = await call("session.get", { sessionId: id });
    state.known.set(id, { ...answer.session, ...answer.header });
    return state.known.get(id);
  } catch (error) {
    // A gateway without `session.get` (404) or a session only the list knows: use what is known.
    if (state.known.has(id)) return state.known.get(id);
    if (error instanceof RpcError && error.code === "transport") return { sessionId: id };
    throw error;
  }
}

async function openSession(id, seq) {
  const same = state.session?.id === id;
  if (!same) {
    state.session = { id, log: new SeqLog(), window: new HistoryWindow(), tree: new TreeState(id), loadingOlder: false };
    document.title = `${id} · apiproxy`;
    $("session-title").textContent = id;
    $("history").replaceChildren();
    $("subagent-tree").replaceChildren();
    $("session-facts").replaceChildren();
    $("breadcrumbs").replaceChildren();
    $("export-link").href = `/api/session.export?sessionId=${encodeURIComponent(id)}&descendants=true`;
    $("export-link").setAttribute("download", `${id}.jsonl`);
    const facts = describe(id).then((facts) => {
      if (state.session?.id === id) renderFacts(facts);
      return facts;
    });
    facts.then((facts) => breadcrumbs(id, facts)).catch(() => {});
    loadTree(id, id);
    try {
      await loadTail();
    } catch (error) {
      showError(error);
      document.body.dataset.state = "ready";
      return;
    }
  }
  if (seq !== null && seq !== undefined) await reveal(seq);
  else if (!same) scrollToBottom();
  document.body.dataset.state = "ready";
}

function renderFacts(facts) {
  const rows = [
    ["Created", facts.createdAt ? new Date(facts.createdAt).toLocaleString() : null],
    ["Updated", facts.updatedAt ? relativeTime(facts.updatedAt, Date.now()) : null],
    ["Working directory", facts.cwd],
    ["Preset", facts.agentPreset],
    ["Origin", facts.origin],
    ["Parent", facts.parentSessionId],
    ["Depth", facts.delegationDepth],
    ["Status", facts.running ? "running" : "idle"],
    ["Subagents", childCount(facts.subagents) || null],
  ];
  const list = $("session-facts");
  list.replaceChildren();
  for (const [name, value] of rows) {
    if (value === null || value === undefined || value === "") continue;
    list.append(el("dt", { text: name }), el("dd", { text: String(value) }));
  }
}

async function breadcrumbs(id, facts) {
  const chain = [];
  let parent = facts?.parentSessionId ?? state.childOf.get(id)?.parent;
  const seen = new Set([id]);
  while (parent && !seen.has(parent) && chain.length < 16) {
    seen.add(parent);
    chain.unshift(parent);
    const known = state.known.get(parent) ?? (await describe(parent).catch(() => null));
    parent = known?.parentSessionId ?? state.childOf.get(parent)?.parent;
  }
  if (state.session?.id !== id) return;
  const nav = $("breadcrumbs");
  nav.replaceChildren(el("a", { href: "#/", text: "Sessions" }));
  for (const ancestor of chain) nav.append(el("a", { href: formatRoute({ view: "session", id: ancestor, seq: null }), text: ancestor }));
  nav.append(el("span", { "aria-current": "page", text: id }));
}

/** A history page of the open session: `subagent.history` for a child reached from its tree. */
function historyPage(beforeSeq) {
  const session = state.session;
  const payload = { maxMessages: 50 };
  if (beforeSeq !== undefined) payload.beforeSeq = beforeSeq;
  const child = state.childOf.get(session.id);
  if (child) return call("subagent.history", { ...payload, parentSessionId: child.parent, childSessionId: session.id, mode: child.mode });
  return call("session.history", { ...payload, sessionId: session.id });
}

async function loadTail() {
  const session = state.session;
  const page = await historyPage();
  if (state.session !== session) return;
  const events = page.events.map((entry) => entry.event);
  const timing = page.projections?.values?.subagentTiming;
  if (timing && typeof timing.settledMs === "number") {
    $("session-facts").append(el("dt", { text: "Active" }), el("dd", { text: duration(timing.settledMs) }));
  }
  // The tail replaces the window: what is held below it would leave a hole.
  const first = events.length ? events[0].seq : session.log.top + 1;
  session.log.keep(first, Infinity);
  session.log.merge(events);
  session.window.resetTail(session.log.seqs(), page.hasMore);
  renderHistory();
  painted("dsh:history-painted");
}

async function loadOlder() {
  const session = state.session;
  if (!session || session.loadingOlder || !session.window.hasOlder) return;
  session.loadingOlder = true;
  const scroller = $("history-scroll");
  const before = scroller.scrollHeight - scroller.scrollTop;
  try {
    const page = await historyPage(session.window.rows[0]);
    if (state.session !== session) return;
    const events = page.events.map((entry) => entry.event);
    session.log.merge(events);
    const dropped = session.window.prepend(events.map((event) => event.seq), page.hasMore);
    for (const seq of dropped) session.log.events.delete(seq);
    renderHistory();
    scroller.scrollTop = scroller.scrollHeight - before;
  } catch (error) {
    showError(error);
  } finally {
    session.loadingOlder = false;
  }
}

function renderHistory() {
  const session = state.session;
  const rows = session.window.rows.map((seq) => session.log.events.get(seq)).filter(Boolean);
  $("history").replaceChildren(...rows.map(eventRow));
  $("history-older").hidden = !session.window.hasOlder;
  updateNewButton();
}

function eventRow(event) {
  const shown = describeEvent(event);
  const classes = ["event", shown.kind];
  if (shown.role) classes.push(`role-${shown.role}`);
  const raw = el("pre", { class: "raw-json", hidden: true });
  const toggle = el("button", { type: "button", class: "raw-toggle", "aria-expanded": "false", text: "Raw" });
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    if (open && !raw.textContent) raw.textContent = JSON.stringify(event, null, 2);
    raw.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
  });
  const seq = el("span", { class: "seq", text: `#${event.seq}` });
  let body;
  if (shown.kind === "tool") {
    body = el("details", { class: "tool" }, el("summary", { text: shown.title }), el("div", { class: "text", text: shown.text ?? "" }));
  } else if (shown.kind === "message") {
    body = el("div", {}, el("span", { class: "who", text: shown.title }), el("div", { class: "text", text: shown.text ?? "" }));
  } else {
    body = el("span", { text: shown.text ? `${shown.title}: ${shown.text}` : shown.title });
  }
  return el("li", { class: classes.join(" "), "data-seq": event.seq, "data-type": event.type, tabindex: "-1" }, toggle, seq, body, raw);
}

function atBottom() {
  const scroller = $("history-scroll");
  return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40;
}

function scrollToBottom() {
  const scroller = $("history-scroll");
  scroller.scrollTop = scroller.scrollHeight;
  state.session?.window.setFollowing(true);
  updateNewButton();
}

function updateNewButton() {
  const unseen = state.session?.window.unseen ?? 0;
  $("history-new").hidden = unseen === 0;
  $("history-new").textContent = `${unseen} new`;
}

$("history-scroll").addEventListener("scroll", () => {
  const session = state.session;
  if (!session) return;
  session.window.setFollowing(atBottom());
  updateNewButton();
  if ($("history-scroll").scrollTop < 80) loadOlder();
});
$("history-older").addEventListener("click", loadOlder);
$("history-new").addEventListener("click", async () => {
  if (state.session?.window.trimmedNewer) await loadTail();
  scrollToBottom();
});

/** Brings event `seq` into the window (paging back as needed) and selects it. */
async function reveal(seq) {
  const session = state.session;
  for (let pages = 0; pages < 200 && session.window.rows.length && seq < session.window.rows[0] && session.window.hasOlder; pages += 1) {
    await loadOlder();
    if (state.session !== session) return;
  }
  for (const row of document.querySelectorAll("#history .event.selected")) row.classList.remove("selected");
  const row = document.querySelector(`#history .event[data-seq="${seq}"]`);
  if (!row) {
    showError(new RpcError("not-found", `event ${seq} is not in this session`));
    return;
  }
  row.classList.add("selected");
  row.scrollIntoView({ block: "center" });
  row.focus({ preventScroll: true });
  session.window.setFollowing(atBottom());
  $("seq-input").value = String(seq);
}

function go(seq) {
  if (!state.session || !Number.isInteger(seq) || seq < 0) return;
  location.hash = formatRoute({ view: "session", id: state.session.id, seq });
}

$("seq-nav").addEventListener("submit", (submit) => {
  submit.preventDefault();
  go(Number($("seq-input").value));
});
function step(delta) {
  const session = state.session;
  if (!session) return;
  const current = state.route.seq ?? session.window.rows[session.window.rows.length - 1] ?? 0;
  const rows = session.window.rows;
  const index = rows.indexOf(current);
  const next = index >= 0 ? rows[Math.min(Math.max(index + delta, 0), rows.length - 1)] : current + delta;
  go(next);
}
$("seq-prev").addEventListener("click", () => step(-1));
$("seq-next").addEventListener("click", () => step(1));

// ---- the subagent tree ------------------------------------------------------------------------

const DIAGNOSTIC_HELP = {
  corrupt: "its log holds no usable subagent identity. Run `apiproxy verify --store <store>` to see why; `--repair` closes interrupted turns.",
  unavailable: "its stored log cannot be read. Run `apiproxy verify --store <store>`; `--repair` cuts a torn tail.",
};

async function loadTree(rootId, parentId) {
  const session = state.session;
  try {
    const answer = await call("subagent.list", { parentSessionId: parentId });
    if (state.session !== session) return;
    session.tree.setChildren(parentId, answer.entries);
    for (const entry of answer.entries) {
      if (entry.kind === "child") state.childOf.set(entry.id, { parent: parentId, mode: entry.mode });
    }
    renderTree();
    if (parentId === rootId) painted("dsh:tree-painted");
  } catch (error) {
    showError(error);
  }
}

function renderTree(focusId) {
  const session = state.session;
  const tree = session.tree;
  const active = focusId ?? document.activeElement?.closest?.("[role=treeitem]")?.dataset.sessionId;
  const build = (parentId, level) =>
    (tree.children.get(parentId) ?? []).map((entry, index, all) => {
      const expandable = tree.expandable(entry);
      const expanded = expandable && tree.expanded.has(entry.id);
      const item = el("li", {
        role: "treeitem",
        "data-session-id": entry.id,
        "aria-level": level,
        "aria-setsize": all.length,
        "aria-posinset": index + 1,
        "aria-expanded": expandable ? String(expanded) : null,
        "aria-disabled": tree.disabled(entry) ? "true" : null,
        class: tree.disabled(entry) ? "diagnostic" : "child",
        tabindex: "-1",
      });
      item.append(el("span", { class: "row" }, ...treeRowText(entry)));
      if (expanded) item.append(el("ul", { role: "group" }, ...build(entry.id, level + 1)));
      return item;
    });
  const items = build(session.id, 1);
  $("subagent-tree").replaceChildren(...items);
  $("tree-empty").hidden = items.length > 0;
  const rows = [...document.querySelectorAll("#subagent-tree [role=treeitem]")];
  const focus = rows.find((row) => row.dataset.sessionId === active) ?? rows[0];
  if (focus) focus.tabIndex = 0;
  if (focusId && focus) focus.focus();
}

function treeRowText(entry) {
  if (entry.kind !== "child") {
    const help = DIAGNOSTIC_HELP[entry.reason] ?? "it cannot be listed.";
    return [el("span", { class: "label", text: entry.id }), el("span", { class: "diagnostic-reason", text: `${entry.reason}: ${help}` })];
  }
  const meta = [entry.mode, entry.activity];
  if (typeof entry.activeMs === "number") meta.push(duration(entry.activeMs));
  return [el("span", { class: "label", text: entry.label || entry.id }), " ", el("span", { class: "meta", text: `· ${meta.join(" · ")}` })];
}

async function toggleBranch(id, expand) {
  const tree = state.session.tree;
  if (expand) {
    const load = tree.expand(id);
    renderTree(id);
    if (load) await loadTree(state.session.id, id);
    renderTree(id);
  } else {
    tree.collapse(id);
    renderTree(id);
  }
}

function openChild(id) {
  const entry = [...state.session.tree.children.values()].flat().find((row) => row.id === id);
  if (!entry || state.session.tree.disabled(entry)) return;
  location.hash = formatRoute({ view: "session", id, seq: null });
}

$("subagent-tree").addEventListener("keydown", (key) => {
  const item = key.target.closest("[role=treeitem]");
  if (!item) return;
  const id = item.dataset.sessionId;
  if (key.key === "Enter") {
    key.preventDefault();
    openChild(id);
    return;
  }
  const move = state.session.tree.navigate(id, key.key);
  if (!move) return;
  key.preventDefault();
  if (move.expand) toggleBranch(move.expand, true);
  else if (move.collapse) toggleBranch(move.collapse, false);
  else renderTree(move.focus);
});
$("subagent-tree").addEventListener("click", (click) => {
  const item = click.target.closest("[role=treeitem]");
  if (!item) return;
  click.stopPropagation();
  const id = item.dataset.sessionId;
  const entry = [...state.session.tree.children.values()].flat().find((row) => row.id === id);
  if (!entry) return;
  if (state.session.tree.expandable(entry) && click.target.closest(".row") && click.offsetX < 16) {
    toggleBranch(id, !state.session.tree.expanded.has(id));
  } else {
    renderTree(id);
    openChild(id);
  }
});

function refreshBranch(parentId) {
  // A child's creation refreshes its parent's open branch, debounced.
  clearTimeout(state.pendingBranches.get(parentId));
  state.pendingBranches.set(
    parentId,
    setTimeout(() => {
      state.pendingBranches.delete(parentId);
      const session = state.session;
      if (session && (parentId === session.id || session.tree.expanded.has(parentId))) loadTree(session.id, parentId);
    }, 50),
  );
}

// ---- export with a token ----------------------------------------------------------------------

$("export-link").addEventListener("click", async (click) => {
  if (!state.token) return;
  click.preventDefault();
  try {
    const response = await fetch($("export-link").href, { headers: { authorization: `Bearer ${state.token}` } });
    if (!response.ok) throw new RpcError("transport", `HTTP ${response.status}: ${await response.text()}`);
    const url = URL.createObjectURL(await response.blob());
    const save = el("a", { href: url, download: $("export-link").getAttribute("download") });
    save.click();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  } catch (error) {
    showError(error);
  }
});

// ---- live -------------------------------------------------------------------------------------

function setConn(text, live) {
  $("conn").textContent = text;
  $("conn").classList.toggle("live", Boolean(live));
}

function socketUrl(path) {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
}

function connect(reset) {
  const sockets = state.sockets;
  clearInterval(sockets.timer);
  if (reset) sockets.attempt = 0;
  for (const name of ["mux", "host"]) {
    if (sockets[name]) {
      sockets[name].onclose = null;
      sockets[name].close();
    }
  }
  setConn("connecting…");
  const protocols = socketProtocols(state.token);
  const mux = new WebSocket(socketUrl("/api/events.mux"), protocols);
  const host = new WebSocket(socketUrl("/api/events.host"), protocols);
  sockets.mux = mux;
  sockets.host = host;
  let opened = 0;
  const onOpen = () => {
    opened += 1;
    if (opened < 2) return;
    const reconnected = sockets.attempt > 0 || sockets.connected;
    sockets.attempt = 0;
    sockets.connected = true;
    setConn("live", true);
    if (reconnected) refreshAll();
  };
  mux.onopen = onOpen;
  host.onopen = onOpen;
  mux.onmessage = (message) => frame(message.data);
  host.onmessage = (message) => frame(message.data);
  const onClose = () => {
    if (sockets.mux !== mux) return;
    mux.onclose = null;
    host.onclose = null;
    mux.close();
    host.close();
    sockets.mux = null;
    sockets.host = null;
    scheduleReconnect();
  };
  mux.onclose = onClose;
  host.onclose = onClose;
}

function scheduleReconnect() {
  const sockets = state.sockets;
  const delay = reconnectDelay(sockets.attempt);
  sockets.attempt += 1;
  let remaining = delay;
  const tick = () => {
    if (document.hidden) {
      setConn("offline (tab hidden)");
      return;
    }
    if (remaining <= 0) {
      clearInterval(sockets.timer);
      connect(false);
      return;
    }
    setConn(`reconnecting in ${Math.ceil(remaining / 1000)} s`);
    remaining -= 250;
  };
  clearInterval(sockets.timer);
  sockets.timer = setInterval(tick, 250);
  tick();
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && !state.sockets.mux && state.sockets.timer === null) connect(false);
});

function refreshAll() {
  if (state.route.view === "list") loadList(true);
  const session = state.session;
  if (session && state.route.view === "session") {
    loadTail().catch(showError);
    loadTree(session.id, session.id);
    for (const id of session.tree.expanded) loadTree(session.id, id);
  }
}

function frame(data) {
  let envelope;
  try {
    envelope = JSON.parse(data);
  } catch {
    return;
  }
  const payload = envelope?.payload ?? {};
  switch (payload.type) {
    case "session/subscribed":
      return onBaseline(payload.sessionId, payload.lastSeq);
    case "session/event":
      return onEvent(payload.sessionId, payload.event);
    case "host/session-added":
      return onAdded(payload);
    case "host/session-status":
      return updateListRow(payload.sessionId, { running: payload.running });
    case "host/session-removed":
      return updateListRow(payload.sessionId, { running: false });
    case "stream/error":
      return showError(new RpcError(payload.error?.code ?? "internal", payload.error?.message ?? "stream error"));
    default:
      return undefined;
  }
}

let repairing = false;
async function repair() {
  if (repairing) return;
  repairing = true;
  try {
    await loadTail();
  } catch (error) {
    showError(error);
  } finally {
    repairing = false;
  }
}

function onBaseline(sessionId, lastSeq) {
  const session = state.session;
  if (!session || session.id !== sessionId) return;
  const outcome = session.log.baseline(lastSeq);
  if (outcome.dropped) {
    session.window.rows = session.window.rows.filter((seq) => seq <= lastSeq);
    renderHistory();
  }
  if (outcome.repair && session.window.rows.length) repair();
}

function onEvent(sessionId, event) {
  const session = state.session;
  if (!session || session.id !== sessionId || !event) return;
  const outcome = session.log.apply(event);
  if (outcome.duplicate) return;
  if (outcome.repair) {
    repair();
    return;
  }
  const follow = session.window.following && atBottom();
  const placed = session.window.append(event.seq);
  for (const seq of placed.dropped) {
    session.log.events.delete(seq);
    document.querySelector(`#history .event[data-seq="${seq}"]`)?.remove();
  }
  if (placed.shown) {
    const rows = $("history");
    const after = [...rows.children].find((row) => Number(row.dataset.seq) > event.seq);
    rows.insertBefore(eventRow(event), after ?? null);
    if (follow) scrollToBottom();
  }
  updateNewButton();
}

function onAdded(added) {
  if (added.parentSessionId && added.origin === "subagent") refreshBranch(added.parentSessionId);
  if (state.route.view !== "list") return;
  const item = state.known.get(added.sessionId) ?? {
    sessionId: added.sessionId,
    updatedAt: Date.now(),
    createdAt: Date.now(),
    running: false,
    blank: added.blank,
    cwd: added.cwd,
    parentSessionId: added.parentSessionId,
    origin: added.origin,
  };
  state.known.set(added.sessionId, item);
  const existing = document.querySelector(`.session-row[data-session-id="${CSS.escape(added.sessionId)}"]`);
  if (existing) return;
  if (passes(item, listFilters())) {
    $("session-list").prepend(listRow(item));
    $("list-empty").hidden = true;
  }
}

// ---- for tests and benchmarks -----------------------------------------------------------------

window.__dsh = {
  seqs(sessionId) {
    return state.session && state.session.id === sessionId ? state.session.log.seqs() : [];
  },
};

connect(true);
show(parseRoute(location.hash));
