// The viewer page: wires the pure modules to the DOM per docs/viewer.md and the viewer contract.
// Untrusted text is only ever set with textContent.
import { createClient, RpcError, Unauthenticated } from "./rpc.js";
import { createLiveModel } from "./live.js";
import { createWindow } from "./window.js";
import { createTree } from "./tree.js";
import { parseRoute, formatRoute } from "./route.js";
import { createBackoff } from "./backoff.js";
import { relativeTime, duration, childCount, iso } from "./format.js";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "dsh.token";
const PAGE = 50;

function el(tag, props = {}, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids) if (kid) node.append(kid);
  return node;
}

// ---- token, errors, calls ----
const getToken = () => sessionStorage.getItem(TOKEN_KEY);
const client = createClient({ getToken });
let pendingAfterToken = null;

function showError(err) {
  const box = $("error");
  box.textContent = err instanceof RpcError ? `${err.code}: ${err.rpcMessage}` : String(err);
  box.hidden = false;
}
function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

async function call(method, payload, { quiet = false } = {}) {
  try {
    return await client.call(method, payload);
  } catch (err) {
    if (err instanceof Unauthenticated) {
      $("token-form").hidden = false;
      $("token-error").textContent = err.hadToken ? "the token was refused" : "";
      $("token-input").focus();
      pendingAfterToken = () => render();
    } else if (!quiet) {
      showError(err);
    }
    throw err;
  }
}

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const value = $("token-input").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token-input").value = "";
  $("token-form").hidden = true;
  $("token-error").textContent = "";
  restartSockets();
  if (pendingAfterToken) pendingAfterToken();
});

// ---- state ----
const live = createLiveModel();
const state = {
  route: { view: "list" },
  nav: 0,
  marks: new Set(),
  list: { items: [], cursor: null, done: false, loading: false },
  session: null, // {id, source: {parent, mode}|null, win, tree, loading, buffer, selected}
};
const childContext = new Map(); // child id -> {parent, mode}

function markOnce(name) {
  if (state.marks.has(name)) return;
  state.marks.add(name);
  performance.mark(name);
}
function ready() {
  requestAnimationFrame(() => {
    document.body.dataset.state = "ready";
  });
}

window.__dsh = {
  seqs(sessionId) {
    const s = state.session;
    return s && s.id === sessionId && s.win ? s.win.rows.map((e) => e.seq) : [];
  },
};

// ---- routing ----
function render() {
  clearError();
  state.nav += 1;
  state.marks = new Set();
  document.body.dataset.state = "loading";
  const route = parseRoute(location.hash);
  state.route = route;
  if (route.view === "session") {
    $("list-view").hidden = true;
    $("session-view").hidden = false;
    openSession(route.id, route.seq);
  } else {
    $("session-view").hidden = true;
    $("list-view").hidden = false;
    state.session = null;
    loadList(true);
  }
  // Keyboard users keep a place: the link that was followed is now hidden.
  const active = document.activeElement;
  if (!active || active === document.body || !active.offsetParent) $("main").focus({ preventScroll: true });
}
window.addEventListener("hashchange", render);

// ---- list view ----
function filters() {
  const payload = { subagents: $("filter-subagents").checked };
  if ($("filter-running").checked) payload.running = true;
  const cwd = $("filter-cwd").value.trim();
  if (cwd) payload.cwd = cwd;
  return payload;
}

async function loadList(reset) {
  const list = state.list;
  const nav = state.nav;
  if (reset) {
    list.items = [];
    list.cursor = null;
    list.done = false;
    list.loading = false;
    list.gen = (list.gen || 0) + 1;
  }
  if (list.loading || list.done) return;
  list.loading = true;
  const gen = list.gen;
  try {
    const payload = { limit: PAGE, ...filters() };
    if (list.cursor) payload.cursor = list.cursor;
    const value = await call("session.list", payload);
    if (gen !== list.gen) return;
    const seen = new Set(list.items.map((r) => r.sessionId));
    // The filters are applied here too, for a gateway that does not know them yet.
    const keep = (row) =>
      (payload.subagents || row.origin !== "subagent") &&
      (!payload.running || row.running) &&
      (!payload.cwd || row.cwd === payload.cwd);
    for (const row of value.items || []) if (!seen.has(row.sessionId) && keep(row)) list.items.push(row);
    list.cursor = value.nextCursor || null;
    list.done = !list.cursor;
    renderList();
    if (nav === state.nav) {
      markOnce("dsh:list-painted");
      ready();
    }
  } catch {
    if (nav === state.nav) ready();
  } finally {
    if (gen === list.gen) list.loading = false;
  }
}

function rowFor(item) {
  const id = item.sessionId;
  const label = item.projections?.values?.subagent?.label || item.label || id;
  const li = el("li", { class: "session-row", dataset: { sessionId: id } });
  li.append(el("a", { class: "session-link", href: formatRoute({ view: "session", id }), text: label }));
  if (item.running) li.append(el("span", { class: "running-badge", text: "running" }));
  const count = childCount(item.subagents);
  li.append(count ? el("span", { class: "child-count", text: count }) : el("span"));
  const meta = el("span", { class: "meta" });
  const created = item.createdAt ?? item.updatedAt;
  if (Number.isFinite(created)) meta.append("created ", el("time", { class: "created", datetime: iso(created), text: relativeTime(created) }));
  if (Number.isFinite(item.updatedAt)) meta.append(" · updated ", el("time", { class: "updated", datetime: iso(item.updatedAt), text: relativeTime(item.updatedAt) }));
  if (item.cwd) meta.append(el("span", { class: "cwd", text: item.cwd }));
  li.append(meta);
  return li;
}

function renderList() {
  const ul = $("session-list");
  ul.replaceChildren(...state.list.items.map(rowFor));
  $("list-empty").hidden = state.list.items.length > 0;
  $("list-more").hidden = state.list.done;
}

$("list-more").addEventListener("click", () => loadList(false));
new IntersectionObserver((entries) => {
  if (entries.some((e) => e.isIntersecting) && !$("list-view").hidden) loadList(false);
}).observe($("list-more"));
for (const id of ["filter-subagents", "filter-running"]) $(id).addEventListener("change", () => loadList(true));
let cwdTimer = null;
$("filter-cwd").addEventListener("input", () => {
  clearTimeout(cwdTimer);
  cwdTimer = setTimeout(() => loadList(true), 250);
});
$("filters").addEventListener("submit", (e) => e.preventDefault());

let listRefresh = null;
/**
 * A host frame changed the list: re-read the first page and merge it in (new rows on top, known
 * rows updated), so pages already loaded stay; with "Running only" the whole walk starts over.
 */
function refreshListSoon() {
  if ($("list-view").hidden) return;
  clearTimeout(listRefresh);
  listRefresh = setTimeout(() => {
    if ($("filter-running").checked || state.list.items.length <= PAGE) loadList(true);
    else refreshHead();
  }, 100);
}

async function refreshHead() {
  const list = state.list;
  const gen = list.gen;
  try {
    const payload = { limit: PAGE, ...filters() };
    const value = await call("session.list", payload, { quiet: true });
    if (gen !== list.gen) return;
    const byId = new Map(list.items.map((r, i) => [r.sessionId, i]));
    const fresh = [];
    for (const row of value.items || []) {
      if (!payload.subagents && row.origin === "subagent") continue;
      if (byId.has(row.sessionId)) list.items[byId.get(row.sessionId)] = row;
      else fresh.push(row);
    }
    list.items.unshift(...fresh);
    renderList();
  } catch {
    // The next frame or reconnect tries again.
  }
}

// ---- session view ----
async function openSession(id, seq) {
  const nav = state.nav;
  const same = state.session && state.session.id === id;
  if (same && seq !== undefined) {
    await goToSeq(seq);
    ready();
    return;
  }
  const s = {
    id,
    source: childContext.get(id) || null,
    win: createWindow(),
    tree: null,
    loading: true,
    buffer: [],
    selected: null,
  };
  state.session = s;
  $("history").replaceChildren();
  $("subagent-tree").replaceChildren();
  $("session-facts").replaceChildren();
  $("breadcrumbs").replaceChildren(el("span", { text: id }));
  $("tree-empty").hidden = true;
  $("history-new").hidden = true;
  $("history-older").hidden = true;
  setExportLink(id);
  // The header facts, the tree and (once the header says which call reads it) the history are
  // asked for at once; only the history waits, and only for the session's own row.
  const described = getSession(id);
  const tree = loadTree(s);
  const got = await described;
  if (state.session !== s) return;
  learnSource(s, got);
  const history = seq !== undefined ? goToSeq(seq) : loadTail(s);
  const facts = showFacts(s, got);
  await Promise.allSettled([tree, history, facts]);
  if (nav === state.nav) ready();
}

function setExportLink(id) {
  $("export-link").href = `/api/session.export?sessionId=${encodeURIComponent(id)}&descendants=true`;
}
$("export-link").addEventListener("click", async (e) => {
  const token = getToken();
  if (!token) return;
  e.preventDefault();
  const href = $("export-link").href;
  try {
    const response = await fetch(href, { headers: { authorization: `Bearer ${token}` } });
    if (!response.ok) throw new RpcError(`http-${response.status}`, await response.text());
    const blob = await response.blob();
    const url = URL.createObjectURL(blob);
    const a = el("a", { href: url, download: `${state.session?.id || "session"}.jsonl` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  } catch (err) {
    showError(err);
  }
});

async function getSession(id) {
  try {
    return await call("session.get", { sessionId: id }, { quiet: true });
  } catch (err) {
    if (err instanceof Unauthenticated) throw err;
    return null;
  }
}

/** The session's header and list row, from `session.get` or else the list already loaded. */
function described(s, got) {
  const header = got?.header || {};
  const summary = got?.session || state.list.items.find((r) => r.sessionId === s.id) || {};
  return { header, summary, parent: header.parentSessionId ?? summary.parentSessionId };
}

/** A subagent child is read through `subagent.history` with its parent and mode. */
function learnSource(s, got) {
  const { header, summary, parent } = described(s, got);
  const ident = summary.projections?.values?.subagent;
  if (!s.source && parent && (header.origin ?? summary.origin) === "subagent" && ident?.mode) {
    s.source = { parent, mode: ident.mode };
  }
}

async function showFacts(s, got) {
  const { header, summary, parent } = described(s, got);
  const dl = $("session-facts");
  const fact = (name, value) => {
    if (value === undefined || value === null || value === "") return;
    dl.append(el("dt", { text: name }), el("dd", { text: String(value) }));
  };
  const created = header.createdAt ?? summary.createdAt;
  fact("created", Number.isFinite(created) ? `${new Date(created).toLocaleString()} (${relativeTime(created)})` : undefined);
  fact("cwd", header.cwd ?? summary.cwd);
  fact("preset", header.agentPreset ?? summary.agentPreset);
  fact("origin", header.origin ?? summary.origin);
  fact("parent", parent ?? s.source?.parent);
  fact("depth", header.delegationDepth);
  // Breadcrumbs: walk parentSessionId up to the root.
  const chain = [];
  let next = parent ?? s.source?.parent;
  const seen = new Set([s.id]);
  while (next && !seen.has(next) && chain.length < 32) {
    seen.add(next);
    chain.unshift(next);
    const up = await getSession(next);
    if (state.session !== s) return;
    next = up?.header?.parentSessionId ?? up?.session?.parentSessionId;
  }
  const nav = $("breadcrumbs");
  nav.replaceChildren();
  for (const id of chain) {
    nav.append(el("a", { href: formatRoute({ view: "session", id }), text: id }), el("span", { class: "sep", "aria-hidden": "true", text: "›" }));
  }
  nav.append(el("span", { "aria-current": "page", text: s.id }));
}

// ---- history ----
function historyCall(s, extra) {
  if (s.source) {
    return call("subagent.history", { parentSessionId: s.source.parent, childSessionId: s.id, mode: s.source.mode, ...extra });
  }
  return call("session.history", { sessionId: s.id, ...extra });
}
const unwrap = (value) => (value.events || []).map((w) => w.event || w);

async function loadTail(s) {
  try {
    const value = await historyCall(s, { maxMessages: PAGE });
    if (state.session !== s) return;
    const events = unwrap(value);
    s.win.setTail(events, value.hasMore);
    live.merge(s.id, events);
    s.loading = false;
    const held = s.buffer.splice(0);
    s.win.append(held);
    renderHistory(true);
    markOnce("dsh:history-painted");
    if (live.last(s.id) !== null && s.win.lastSeq !== null && live.last(s.id) > s.win.lastSeq) repairTail(s);
  } catch {
    s.loading = false;
  }
}

async function repairTail(s) {
  if (s.win.droppedTail) return;
  if (s.repairing) {
    s.repairAgain = true;
    return;
  }
  s.repairing = true;
  try {
    const value = await historyCall(s, { maxMessages: PAGE });
    if (state.session !== s) return;
    const events = unwrap(value);
    const merged = live.merge(s.id, events);
    const overlap = s.win.rows.length && events.length && events[0].seq <= s.win.lastSeq + 1;
    if (merged.rebase && !overlap) s.win.setTail(events, value.hasMore);
    else s.win.mergeTail(events);
    renderHistory(s.win.following);
    markOnce("dsh:history-painted");
  } catch {
    // The error banner shows it; the next event or reconnect repairs again.
  } finally {
    s.repairing = false;
    if (s.repairAgain) {
      s.repairAgain = false;
      repairTail(s);
    }
  }
}

async function loadOlder() {
  const s = state.session;
  if (!s || s.loadingOlder || !s.win.hasMore || s.win.firstSeq === null) return;
  s.loadingOlder = true;
  const box = $("history");
  const before = box.scrollHeight - box.scrollTop;
  try {
    const value = await historyCall(s, { beforeSeq: s.win.firstSeq, maxMessages: PAGE });
    if (state.session !== s) return;
    s.win.prepend(unwrap(value), value.hasMore);
    renderHistory(false);
    box.scrollTop = box.scrollHeight - before;
  } catch {
    // shown in the banner
  } finally {
    s.loadingOlder = false;
  }
}

function eventText(e) {
  const d = e.data?.message || e.data || {};
  if (d.chunk && typeof d.chunk.delta === "string") return d.chunk.delta;
  if (Array.isArray(d.content)) {
    return d.content.map((c) => (typeof c.text === "string" ? c.text : c.type ? `[${c.type}]` : "")).join("");
  }
  if (typeof d.text === "string") return d.text;
  if (typeof d.delta === "string") return d.delta;
  return "";
}

function rowForEvent(e) {
  const type = String(e.type || "");
  const classes = ["event"];
  const role = e.data?.message?.role ?? e.data?.role;
  if (type.endsWith("/chunk")) classes.push("chunk");
  if (type === "user/message" || role === "user") classes.push("role-user");
  else if (type.startsWith("assistant/") || role === "assistant") classes.push("role-assistant");
  if (type.startsWith("turn/")) classes.push("turn");
  if (type.startsWith("step/")) classes.push("step");
  const li = el("li", { class: classes.join(" "), tabindex: "-1", dataset: { seq: String(e.seq), type } });
  li.append(el("span", { class: "seq", text: `#${e.seq}` }), el("span", { class: "etype", text: type }));
  if (type.startsWith("tool/")) {
    const d = e.data || {};
    const details = el("details", { class: "tool" });
    details.append(el("summary", { text: [d.name, d.callId].filter(Boolean).join(" · ") || type }));
    details.append(el("pre", { class: "body", text: JSON.stringify(d, null, 2) }));
    li.append(details);
  } else {
    const text = eventText(e);
    if (text) li.append(el("div", { class: "body", text }));
    else if (type.startsWith("turn/") || type.startsWith("step/")) {
      const d = e.data || {};
      const bits = ["turn", "step"].filter((k) => d[k] !== undefined).map((k) => `${k} ${d[k]}`);
      if (bits.length) li.append(el("span", { class: "etype", text: ` (${bits.join(", ")})` }));
    }
  }
  // The raw JSON is built when first asked for: most rows are never opened.
  const toggle = el("button", { type: "button", class: "raw-toggle", "aria-expanded": "false", text: "Raw" });
  let raw = null;
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    if (!raw) {
      raw = el("pre", { class: "raw-json", hidden: true, text: JSON.stringify(e, null, 2) });
      toggle.after(raw);
    }
    toggle.setAttribute("aria-expanded", String(open));
    raw.hidden = !open;
  });
  li.append(toggle);
  if (state.session?.selected === e.seq) li.classList.add("selected");
  return li;
}

function renderHistory(scrollToEnd) {
  const s = state.session;
  if (!s) return;
  const box = $("history");
  box.replaceChildren(...s.win.rows.map(rowForEvent));
  $("history-older").hidden = !s.win.hasMore;
  updateNewButton();
  if (scrollToEnd) box.scrollTop = box.scrollHeight;
}

function appendHistory(events) {
  const s = state.session;
  const box = $("history");
  const { added, droppedHead } = s.win.append(events);
  for (let i = 0; i < droppedHead && box.firstElementChild; i++) box.firstElementChild.remove();
  for (const e of added) box.append(rowForEvent(e));
  $("history-older").hidden = !s.win.hasMore;
  if (s.win.following) box.scrollTop = box.scrollHeight;
  updateNewButton();
}

function updateNewButton() {
  const s = state.session;
  const n = s ? s.win.newCount : 0;
  $("history-new").hidden = n === 0;
  $("history-new").textContent = `${n} new`;
}

$("history").addEventListener("scroll", () => {
  const s = state.session;
  if (!s || s.loading) return;
  const box = $("history");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
  if (atBottom !== s.win.following && !s.win.droppedTail) {
    s.win.setFollowing(atBottom);
    updateNewButton();
  }
  if (box.scrollTop < 40 && s.win.hasMore) loadOlder();
});
$("history-older").addEventListener("click", loadOlder);
$("history-new").addEventListener("click", async () => {
  const s = state.session;
  if (!s) return;
  if (s.win.droppedTail) await loadTail(s);
  s.win.setFollowing(true);
  const box = $("history");
  box.scrollTop = box.scrollHeight;
  updateNewButton();
});

function selectSeq(seq) {
  const s = state.session;
  s.selected = seq;
  for (const li of $("history").querySelectorAll(".event.selected")) li.classList.remove("selected");
  const li = $("history").querySelector(`.event[data-seq="${seq}"]`);
  if (!li) return false;
  li.classList.add("selected");
  s.win.setFollowing(false);
  li.scrollIntoView({ block: "center" });
  li.focus({ preventScroll: true });
  return true;
}

async function goToSeq(seq) {
  const s = state.session;
  if (!s) return;
  $("seq-input").value = String(seq);
  if (s.loading || s.win.rows.length === 0) await loadTail(s);
  // Page back from the tail until the window holds the seq (bounded: the window is capped anyway).
  for (let i = 0; i < 40 && state.session === s && !s.win.has(seq) && s.win.hasMore && s.win.firstSeq > seq; i++) {
    const before = s.win.firstSeq;
    await loadOlder();
    if (s.win.firstSeq === before) break;
  }
  if (state.session === s) selectSeq(seq);
}

$("seq-nav").addEventListener("submit", (e) => {
  e.preventDefault();
  const n = Number($("seq-input").value);
  if (!Number.isInteger(n) || n < 0 || !state.session) return;
  location.hash = formatRoute({ view: "session", id: state.session.id, seq: n });
});
function step(delta) {
  const s = state.session;
  if (!s || s.win.rows.length === 0) return;
  const seqs = s.win.rows.map((e) => e.seq);
  let i = seqs.indexOf(s.selected);
  if (i < 0) i = delta > 0 ? -1 : seqs.length;
  const j = Math.min(seqs.length - 1, Math.max(0, i + delta));
  location.hash = formatRoute({ view: "session", id: s.id, seq: seqs[j] });
}
$("seq-prev").addEventListener("click", () => step(-1));
$("seq-next").addEventListener("click", () => step(1));

// ---- subagent tree ----
function diagnosticText(reason) {
  if (reason === "corrupt") {
    return "corrupt: its log holds no usable subagent identity. Run `apiproxy verify --store …`; `--repair` closes interrupted turns.";
  }
  if (reason === "unavailable") return "unavailable: the stored log cannot be read";
  return String(reason || "diagnostic");
}

async function loadTree(s) {
  s.tree = createTree(s.id, async (parentId) => {
    const value = await call("subagent.list", { parentSessionId: parentId });
    const entries = value.entries || [];
    for (const e of entries) if (e.kind === "child") childContext.set(e.id, { parent: parentId, mode: e.mode });
    return entries;
  });
  try {
    await s.tree.loadChildren(s.id);
  } catch {
    // shown in the banner
  }
  if (state.session !== s) return;
  renderTree();
  markOnce("dsh:tree-painted");
}

function renderTree() {
  const s = state.session;
  if (!s || !s.tree) return;
  const tree = s.tree;
  const focused = tree.focused;
  const build = (parentId) =>
    (tree.childrenOf(parentId) || []).map((n) => {
      const li = el("li", {
        role: "treeitem",
        dataset: { sessionId: n.id },
        "aria-level": String(n.level),
        tabindex: n.id === focused ? "0" : "-1",
      });
      if (n.disabled) {
        li.classList.add("diagnostic");
        li.setAttribute("aria-disabled", "true");
        const row = el("span", { class: "row" }, el("span", { text: n.id }));
        row.append(el("span", { class: "diagnostic-reason", text: diagnosticText(n.reason) }));
        li.append(row);
        return li;
      }
      if (n.hasChildren) li.setAttribute("aria-expanded", String(tree.isExpanded(n.id)));
      const bits = [n.mode, n.activity, Number.isFinite(n.activeMs) ? duration(n.activeMs) : ""].filter(Boolean);
      const row = el("span", { class: "row" }, el("span", { class: "tree-label", text: n.label || n.id }), " ");
      row.append(el("span", { class: `tree-meta activity-${n.activity || "unknown"}`, text: bits.join(" · ") }));
      li.append(row);
      if (tree.isExpanded(n.id) && tree.childrenOf(n.id)) {
        li.append(el("ul", { role: "group" }, ...build(n.id)));
      }
      return li;
    });
  const ul = $("subagent-tree");
  const hadFocus = ul.contains(document.activeElement);
  ul.replaceChildren(...build(s.id));
  const empty = !(tree.childrenOf(s.id) || []).length;
  $("tree-empty").hidden = !empty;
  if (hadFocus) focusTreeItem(tree.focused);
}

function focusTreeItem(id) {
  for (const li of $("subagent-tree").querySelectorAll('[role="treeitem"]')) {
    const on = li.dataset.sessionId === id;
    li.tabIndex = on ? 0 : -1;
    if (on) li.focus();
  }
}

function openChild(id) {
  location.hash = formatRoute({ view: "session", id });
}

$("subagent-tree").addEventListener("keydown", async (e) => {
  const s = state.session;
  if (!s || !s.tree) return;
  const item = e.target.closest('[role="treeitem"]');
  if (item) s.tree.focus(item.dataset.sessionId);
  const r = s.tree.key(e.key);
  if (!r) return;
  e.preventDefault();
  if (r.open) return openChild(r.open);
  if (r.expand) {
    try {
      await s.tree.expand(r.expand);
    } catch {
      return;
    }
  }
  renderTree();
  focusTreeItem(r.focus);
});
$("subagent-tree").addEventListener("click", async (e) => {
  const s = state.session;
  const item = e.target.closest('[role="treeitem"]');
  if (!s || !s.tree || !item || item.getAttribute("aria-disabled") === "true") return;
  const id = item.dataset.sessionId;
  s.tree.focus(id);
  if (s.tree.expandable(id) && e.target.closest(".row") === item.firstElementChild && e.offsetX < 16) {
    if (s.tree.isExpanded(id)) s.tree.collapse(id);
    else await s.tree.expand(id);
    renderTree();
    return;
  }
  openChild(id);
});

const branchTimers = new Map();
function refreshBranchSoon(parentId) {
  const s = state.session;
  if (!s || !s.tree) return;
  if (parentId !== s.id && !(s.tree.isExpanded(parentId) && s.tree.childrenOf(parentId))) return;
  clearTimeout(branchTimers.get(parentId));
  branchTimers.set(
    parentId,
    setTimeout(async () => {
      if (state.session !== s) return;
      try {
        await s.tree.loadChildren(parentId);
        renderTree();
      } catch {
        // shown in the banner
      }
    }, 50),
  );
}

// ---- live sockets ----
function b64url(text) {
  const bytes = new TextEncoder().encode(text);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function protocols() {
  const token = getToken();
  return token ? ["dsh.v1", `dsh.bearer.${b64url(token)}`] : ["dsh.v1"];
}
function socketUrl(path) {
  return `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
}

function setConn(text) {
  $("conn").textContent = text;
  $("conn").classList.toggle("live", text === "live");
}

function keepOpen(path, onFrame, { onOpen, status }) {
  const backoff = createBackoff();
  let socket = null;
  let timer = null;
  let countdown = null;
  let opened = false;
  let stopped = false;
  function connect() {
    if (stopped) return;
    if (document.hidden) {
      document.addEventListener("visibilitychange", connect, { once: true });
      return;
    }
    if (status) setConn(opened ? "reconnecting…" : "connecting…");
    socket = new WebSocket(socketUrl(path), protocols());
    socket.addEventListener("open", () => {
      backoff.reset();
      if (status) setConn("live");
      const again = opened;
      opened = true;
      onOpen(again);
    });
    socket.addEventListener("message", (m) => {
      let frame;
      try {
        frame = JSON.parse(m.data);
      } catch {
        return;
      }
      onFrame(frame.payload || frame);
    });
    socket.addEventListener("close", () => {
      socket = null;
      if (stopped) return;
      const delay = backoff.next();
      const until = Date.now() + delay;
      if (status) {
        const tick = () => {
          const left = Math.max(0, Math.ceil((until - Date.now()) / 1000));
          setConn(navigator.onLine === false ? "offline" : `reconnecting in ${left} s`);
        };
        tick();
        clearInterval(countdown);
        countdown = setInterval(tick, 1000);
      }
      timer = setTimeout(() => {
        clearInterval(countdown);
        connect();
      }, delay);
    });
  }
  connect();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearInterval(countdown);
      if (socket) socket.close();
    },
  };
}

function onMux(p) {
  const s = state.session;
  if (p.type === "session/subscribed") {
    const r = live.baseline(p.sessionId, p.lastSeq);
    if (s && s.id === p.sessionId && r.dropAbove !== undefined) {
      s.win.dropAbove(r.dropAbove);
      renderHistory(s.win.following);
    }
    if (s && s.id === p.sessionId && !s.loading && s.win.lastSeq !== null && p.lastSeq > s.win.lastSeq) repairTail(s);
  } else if (p.type === "session/event" && p.event) {
    const r = live.apply(p.sessionId, p.event);
    if (!s || s.id !== p.sessionId) return;
    if (r.kind === "apply") {
      if (s.loading) s.buffer.push(...r.events);
      else appendHistory(r.events);
    } else if (r.kind === "gap" && !s.loading) {
      repairTail(s);
    }
  }
}

function onHost(p) {
  if (p.type === "host/session-added") {
    refreshListSoon();
    if (p.parentSessionId) refreshBranchSoon(p.parentSessionId);
  } else if (p.type === "host/session-status") {
    const row = $("session-list").querySelector(`.session-row[data-session-id="${CSS.escape(p.sessionId)}"]`);
    const item = state.list.items.find((r) => r.sessionId === p.sessionId);
    if (item) item.running = Boolean(p.running);
    if (row) {
      const badge = row.querySelector(".running-badge");
      if (p.running && !badge) row.querySelector(".session-link").after(el("span", { class: "running-badge", text: "running" }));
      if (!p.running && badge) badge.remove();
    }
    if ($("filter-running").checked) refreshListSoon();
    const s = state.session;
    if (s && s.tree && s.tree.node(p.sessionId)) refreshBranchSoon(s.tree.node(p.sessionId).parentId);
  } else if (p.type === "host/session-removed") {
    refreshListSoon();
  }
}

function refreshAll() {
  // A reconnect is a fresh start: a failure from the outage no longer stands.
  clearError();
  if (!$("list-view").hidden) loadList(true);
  const s = state.session;
  if (s) {
    if (s.tree) refreshBranchSoon(s.id);
    if (!s.loading) repairTail(s);
  }
}

let sockets = [];
function startSockets() {
  sockets = [
    keepOpen("/api/events.mux", onMux, { status: true, onOpen: (again) => again && refreshAll() }),
    keepOpen("/api/events.host", onHost, { status: false, onOpen: () => {} }),
  ];
}
function restartSockets() {
  for (const s of sockets) s.stop();
  startSockets();
}
window.addEventListener("offline", () => setConn("offline"));

startSockets();
render();
