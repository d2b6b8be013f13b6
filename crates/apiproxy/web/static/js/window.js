// The history paging window: tail first, older pages prepended, capped, "n new" while scrolled up.

/** A window of event rows sorted by seq, at most `cap` rows. */
export function createWindow({ cap = 2000 } = {}) {
  let rows = [];
  let hasMore = false;
  let following = true;
  let newCount = 0;
  let droppedTail = false;
  const api = {
    /** The rows (events) in seq order. */
    get rows() {
      return rows;
    },
    /** Whether older events exist before the first row. */
    get hasMore() {
      return hasMore;
    },
    /** Whether the view follows the tail. */
    get following() {
      return following;
    },
    /** Events appended while not following. */
    get newCount() {
      return newCount;
    },
    /** Whether rows past the end were dropped (an older page pushed them out). */
    get droppedTail() {
      return droppedTail;
    },
    /** The seq to page back from (`beforeSeq`), or null. */
    get firstSeq() {
      return rows.length ? rows[0].seq : null;
    },
    /** The last seq held, or null. */
    get lastSeq() {
      return rows.length ? rows[rows.length - 1].seq : null;
    },
    /** Sets the tail page (replaces everything). */
    setTail(events, more) {
      rows = dedup(events);
      hasMore = Boolean(more);
      newCount = 0;
      droppedTail = false;
      following = true;
      if (rows.length > cap) {
        rows = rows.slice(rows.length - cap);
        hasMore = true;
      }
    },
    /** Prepends an older page; answers how many rows were dropped at the far (newest) end. */
    prepend(events, more) {
      const older = events.filter((e) => rows.length === 0 || e.seq < rows[0].seq);
      rows = dedup([...older, ...rows]);
      hasMore = Boolean(more);
      let dropped = 0;
      if (rows.length > cap) {
        dropped = rows.length - cap;
        rows = rows.slice(0, cap);
        droppedTail = true;
        following = false;
      }
      return dropped;
    },
    /** Appends new events (past the last); answers `{added, droppedHead}`. */
    append(events) {
      if (droppedTail) {
        newCount += events.length;
        return { added: [], droppedHead: 0 };
      }
      const last = api.lastSeq;
      const added = events.filter((e) => last === null || e.seq > last);
      rows = rows.concat(added);
      if (!following) newCount += added.length;
      let droppedHead = 0;
      if (rows.length > cap) {
        droppedHead = rows.length - cap;
        rows = rows.slice(droppedHead);
        hasMore = true;
      }
      return { added, droppedHead };
    },
    /** Merges a re-pulled tail page (after a gap or reconnect) by seq. */
    mergeTail(events) {
      const bySeq = new Map(rows.map((e) => [e.seq, e]));
      const first = rows.length ? rows[0].seq : Infinity;
      for (const e of events) if (e.seq >= first || rows.length === 0) bySeq.set(e.seq, e);
      const merged = [...bySeq.values()].sort((a, b) => a.seq - b.seq);
      const added = merged.length - rows.length;
      rows = merged;
      if (!following && added > 0) newCount += added;
      if (rows.length > cap) {
        rows = rows.slice(rows.length - cap);
        hasMore = true;
      }
    },
    /**
     * Detaches the window from the tail (it shows a page in the middle): new events only count
     * until the tail is set again.
     */
    detach() {
      droppedTail = true;
      following = false;
    },
    /** Drops rows past seq (a lower baseline). */
    dropAbove(seq) {
      rows = rows.filter((e) => e.seq <= seq);
    },
    /** Follows the tail (at the bottom) or stops; following clears the counter. */
    setFollowing(value) {
      following = value;
      if (value) newCount = 0;
    },
    /** Whether the window holds a seq. */
    has(seq) {
      return rows.some((e) => e.seq === seq);
    },
  };
  return api;
}

function dedup(events) {
  const bySeq = new Map();
  for (const e of events) bySeq.set(e.seq, e);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}
