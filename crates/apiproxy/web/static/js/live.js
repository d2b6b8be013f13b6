// The per-session live event model: baselines, seq order, seq the only dedup key, gap repair.

/**
 * Tracks, per session, the last seq applied (`last`, -1 when empty, null before any baseline) and
 * events held back behind a gap. Every method answers what the caller must do with its view.
 */
export function createLiveModel() {
  const sessions = new Map();
  function state(id) {
    let s = sessions.get(id);
    if (!s) {
      s = { last: null, pending: new Map(), needsRepair: false };
      sessions.set(id, s);
    }
    return s;
  }
  function drain(s, out) {
    while (s.pending.has(s.last + 1)) {
      const e = s.pending.get(s.last + 1);
      s.pending.delete(s.last + 1);
      s.last = e.seq;
      out.push(e);
    }
    for (const seq of s.pending.keys()) if (seq <= s.last) s.pending.delete(seq);
    s.needsRepair = s.pending.size > 0;
  }
  return {
    /** The last applied seq of a session (null before a baseline). */
    last(id) {
      return sessions.has(id) ? sessions.get(id).last : null;
    },
    /** Whether a gap is open and the tail page must be re-pulled. */
    needsRepair(id) {
      return sessions.has(id) && sessions.get(id).needsRepair;
    },
    /**
     * A `session/subscribed {lastSeq}` baseline. Answers `{dropAbove}` (a seq; events past it are
     * gone, e.g. after a restart of the gateway) when the baseline is lower than held, else `{}`.
     */
    baseline(id, lastSeq) {
      const s = state(id);
      const out = {};
      if (s.last !== null && lastSeq < s.last) out.dropAbove = lastSeq;
      s.last = lastSeq;
      for (const seq of [...s.pending.keys()]) if (seq <= lastSeq) s.pending.delete(seq);
      drain(s, []);
      return out;
    },
    /**
     * One `session/event`. Answers `{kind: "apply", events}` (in seq order, the event and any
     * held-back ones it unblocked), `{kind: "duplicate"}`, or `{kind: "gap"}` (held back; repair).
     */
    apply(id, event) {
      const s = state(id);
      if (s.last === null) s.last = event.seq - 1;
      if (event.seq <= s.last || s.pending.has(event.seq)) return { kind: "duplicate" };
      if (event.seq > s.last + 1) {
        s.pending.set(event.seq, event);
        s.needsRepair = true;
        return { kind: "gap" };
      }
      const events = [event];
      s.last = event.seq;
      drain(s, events);
      return { kind: "apply", events };
    },
    /**
     * Merges a re-pulled tail page (contiguous, any order). Answers `{rebase, events}`: with
     * `rebase` false, `events` are the ones past `last` to append in seq order (held-back ones it
     * unblocked included); with `rebase` true the page starts past what was held (more was missed
     * than a page) and the view must replace its rows with `events`.
     */
    merge(id, events) {
      const s = state(id);
      const sorted = [...events].sort((a, b) => a.seq - b.seq);
      if (sorted.length === 0) return { rebase: false, events: [] };
      const top = sorted[sorted.length - 1].seq;
      if (s.last === null || sorted[0].seq > s.last + 1) {
        s.last = Math.max(top, s.last ?? -1);
        drain(s, []);
        return { rebase: true, events: sorted };
      }
      const out = sorted.filter((e) => e.seq > s.last);
      s.last = Math.max(s.last, top);
      drain(s, out);
      return { rebase: false, events: out };
    },
    /** Forgets a session. */
    forget(id) {
      sessions.delete(id);
    },
  };
}
