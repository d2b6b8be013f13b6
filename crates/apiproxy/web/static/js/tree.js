// The subagent tree's state: rows loaded lazily per parent, which rows are expanded, and the
// keyboard order of the WAI-ARIA tree pattern (only visible rows take focus).

export class TreeState {
  constructor(rootId) {
    this.rootId = rootId;
    /** parent id → rows (`subagent.list` entries) once loaded */
    this.children = new Map();
    /** Expanded row ids. */
    this.expanded = new Set();
    /** row id → parent id */
    this.parents = new Map();
  }

  /** Records the rows of `parentId` (replacing an older answer, keeping expansion of rows still there). */
  setChildren(parentId, entries) {
    this.children.set(parentId, entries);
    for (const entry of entries) this.parents.set(entry.id, parentId);
  }

  /** Whether a row can be expanded: a child row with `hasChildren`. */
  expandable(entry) {
    return entry.kind === "child" && Boolean(entry.hasChildren);
  }

  /** Whether a row can be opened or focused as active: diagnostics are disabled. */
  disabled(entry) {
    return entry.kind !== "child";
  }

  /** Expands `id`; answers whether its children must be loaded first. */
  expand(id) {
    this.expanded.add(id);
    return !this.children.has(id);
  }

  collapse(id) {
    this.expanded.delete(id);
  }

  /** The visible rows in document order: `{entry, level, parentId}`. */
  visible() {
    const rows = [];
    const walk = (parentId, level) => {
      for (const entry of this.children.get(parentId) ?? []) {
        rows.push({ entry, level, parentId });
        if (this.expanded.has(entry.id) && this.expandable(entry)) walk(entry.id, level + 1);
      }
    };
    walk(this.rootId, 1);
    return rows;
  }

  /**
   * The row focus moves to from `id` on `key` (ArrowUp/Down/Left/Right, Home, End), and what the
   * key does: `{focus, expand, collapse}`. Unknown keys answer null.
   */
  navigate(id, key) {
    const rows = this.visible();
    const index = rows.findIndex((row) => row.entry.id === id);
    if (index < 0) return rows.length ? { focus: rows[0].entry.id } : null;
    const row = rows[index];
    switch (key) {
      case "ArrowDown":
        return { focus: rows[Math.min(index + 1, rows.length - 1)].entry.id };
      case "ArrowUp":
        return { focus: rows[Math.max(index - 1, 0)].entry.id };
      case "Home":
        return { focus: rows[0].entry.id };
      case "End":
        return { focus: rows[rows.length - 1].entry.id };
      case "ArrowRight":
        if (!this.expandable(row.entry)) return { focus: id };
        if (!this.expanded.has(id)) return { focus: id, expand: id };
        return { focus: rows[index + 1]?.level > row.level ? rows[index + 1].entry.id : id };
      case "ArrowLeft":
        if (this.expanded.has(id) && this.expandable(row.entry)) return { focus: id, collapse: id };
        return { focus: row.parentId !== this.rootId ? row.parentId : id };
      default:
        return null;
    }
  }
}
