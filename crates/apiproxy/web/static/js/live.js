// One session's events as the page holds them: seq is the only identity, so an event is never
// shown twice, and a gap is always noticed and repaired by re-pulling the tail page.

/**
 * The events of one session by seq. `apply` takes a live `session/event`, `baseline` a
 * `session/subscribed {lastSeq}`, `merge` a history page; each answers what the caller must do.
 */
export class SeqLog {
  constructor() {
    /** seq → event */
    this.events = new Map();
    /** The highest seq held (−1 when none). */
    this.top = -1;
  }

  /** A live event: `{duplicate}` when its seq is held; else `{added, repair}`, `repair` on a gap before it. */
  apply(event) {
    if (this.events.has(event.seq)) return { duplicate: true, added: false, repair: false };
    const repair = this.events.size > 0 && event.seq > this.top + 1;
    this.insert(event);
    return { duplicate: false, added: true, repair };
  }

  /**
   * A subscription baseline (the next live event is `lastSeq + 1`). What is held past it is
   * dropped (another writer's log replaced it); `repair` when events up to it were never seen.
   */
  baseline(lastSeq) {
    let dropped = 0;
    for (const seq of [...this.events.keys()]) {
      if (seq > lastSeq) {
        this.events.delete(seq);
        dropped += 1;
      }
    }
    if (dropped) this.top = this.events.size ? Math.max(...this.events.keys()) : -1;
    return { dropped, repair: this.top < lastSeq };
  }

  /** A history page (any seqs): merged without duplicates; answers how many were new. */
  merge(events) {
    let added = 0;
    for (const event of events) {
      if (!this.events.has(event.seq)) {
        this.insert(event);
        added += 1;
      }
    }
    return { added };
  }

  insert(event) {
    this.events.set(event.seq, event);
    if (event.seq > this.top) this.top = event.seq;
  }

  /** The lowest seq held, or null. */
  first() {
    let first = null;
    for (const seq of this.events.keys()) if (first === null || seq < first) first = seq;
    return first;
  }

  /** Keeps only seqs in `[low, high]` (the paging window). */
  keep(low, high) {
    for (const seq of [...this.events.keys()]) if (seq < low || seq > high) this.events.delete(seq);
    this.top = this.events.size ? Math.max(...this.events.keys()) : -1;
  }

  /** The held seqs, ascending. */
  seqs() {
    return [...this.events.keys()].sort((a, b) => a - b);
  }

  /** The held events, ascending by seq. */
  ordered() {
    return this.seqs().map((seq) => this.events.get(seq));
  }

  /** The seqs missing between the lowest and highest held. */
  holes() {
    const seqs = this.seqs();
    const missing = [];
    for (let index = 1; index < seqs.length; index += 1) {
      for (let seq = seqs[index - 1] + 1; seq < seqs[index]; seq += 1) missing.push(seq);
    }
    return missing;
  }
}
