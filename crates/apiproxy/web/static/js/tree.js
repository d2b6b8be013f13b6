// Subagent tree state: lazy children, expanded set, diagnostic rows, WAI-ARIA tree keyboard order.

/**
 * A tree of `subagent.list` entries. `load(parentId)` resolves to the entries of a parent.
 * Nodes: `{id, kind, mode, label, activity, hasChildren, reason, activeMs, level, parentId}`.
 */
export function createTree(rootId, load) {
  const children = new Map(); // parentId -> [node]
  const nodes = new Map(); // id -> node
  const expanded = new Set();
  let focused = null;

  function adopt(parentId, entries, level) {
    const list = entries.map((e) => {
      const node = { ...e, level, parentId, disabled: e.kind === "diagnostic" };
      nodes.set(e.id, node);
      return node;
    });
    children.set(parentId, list);
    return list;
  }

  const api = {
    rootId,
    /** The children of a parent, or undefined when not loaded. */
    childrenOf(id) {
      return children.get(id);
    },
    node(id) {
      return nodes.get(id);
    },
    isExpanded(id) {
      return expanded.has(id);
    },
    /** Whether a node can be expanded (a child row with hasChildren). */
    expandable(id) {
      const n = nodes.get(id);
      return Boolean(n && !n.disabled && n.hasChildren);
    },
    /** Loads (or reloads) a parent's children. */
    async loadChildren(parentId) {
      const level = parentId === rootId ? 1 : (nodes.get(parentId)?.level ?? 0) + 1;
      const entries = await load(parentId);
      const list = adopt(parentId, entries, level);
      if (focused && !api.visible().some((n) => n.id === focused)) focused = null;
      return list;
    },
    /** Expands a node, loading its children lazily. */
    async expand(id) {
      if (!api.expandable(id)) return false;
      expanded.add(id);
      if (!children.has(id)) await api.loadChildren(id);
      return true;
    },
    collapse(id) {
      expanded.delete(id);
      if (focused && !api.visible().some((n) => n.id === focused)) focused = id;
    },
    /** The visible rows in document order. */
    visible() {
      const out = [];
      const walk = (parentId) => {
        for (const n of children.get(parentId) || []) {
          out.push(n);
          if (expanded.has(n.id) && children.has(n.id)) walk(n.id);
        }
      };
      walk(rootId);
      return out;
    },
    /** The focused row id (the first visible row by default). */
    get focused() {
      if (focused) return focused;
      const first = api.visible()[0];
      return first ? first.id : null;
    },
    focus(id) {
      focused = id;
    },
    /**
     * Handles a key per the WAI-ARIA tree pattern. Answers `{focus}` (the row to focus),
     * `{open}` for Enter on a child row, `{expand}` when Right must load a branch, or null.
     */
    key(key) {
      const rows = api.visible();
      if (rows.length === 0) return null;
      const current = api.focused;
      const i = Math.max(0, rows.findIndex((n) => n.id === current));
      const node = rows[i];
      switch (key) {
        case "ArrowDown":
          focused = rows[Math.min(rows.length - 1, i + 1)].id;
          return { focus: focused };
        case "ArrowUp":
          focused = rows[Math.max(0, i - 1)].id;
          return { focus: focused };
        case "Home":
          focused = rows[0].id;
          return { focus: focused };
        case "End":
          focused = rows[rows.length - 1].id;
          return { focus: focused };
        case "ArrowRight":
          if (api.expandable(node.id)) {
            if (!expanded.has(node.id)) return { expand: node.id, focus: node.id };
            const kids = children.get(node.id) || [];
            if (kids.length) focused = kids[0].id;
          }
          return { focus: focused || node.id };
        case "ArrowLeft":
          if (expanded.has(node.id)) {
            expanded.delete(node.id);
            return { focus: node.id, collapsed: node.id };
          }
          if (node.parentId !== rootId && nodes.has(node.parentId)) focused = node.parentId;
          return { focus: focused || node.id };
        case "Enter":
          if (node.disabled) return null;
          return { open: node.id, mode: node.mode };
        default:
          return null;
      }
    },
  };
  return api;
}
