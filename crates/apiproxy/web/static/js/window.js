// The history window: which rows are in the DOM. It opens at the tail, grows backwards by pages,
// follows the tail while the reader is at the bottom and counts new events while they are not,
// and never holds more than `cap` rows (dropping the end away from the reader).

export const MAX_ROWS = 2000;

export class HistoryWindow {
  constructor(cap = MAX_ROWS) {
    this.cap = cap;
    /** Ascending seqs in the DOM. */
    this.rows = [];
    /** Whether the reader is at the bottom (new events scroll into view). */
    this.following = true;
    /** Events that arrived while the reader was scrolled up. */
    this.unseen = 0;
    /** Whether older events exist before the first row (the page's `hasMore`). */
    this.hasOlder = false;
    /** Whether newer events were dropped from the end (reading far back). */
    this.trimmedNewer = false;
  }

  /** The tail page replaced everything: `seqs` ascending, `hasMore` from the answer. */
  resetTail(seqs, hasMore) {
    this.rows = [...seqs];
    this.hasOlder = hasMore;
    this.trimmedNewer = false;
    this.unseen = 0;
    this.trim("newest");
  }

  /** An older page (`beforeSeq` = the first row) was prepended. Answers the seqs dropped at the end. */
  prepend(seqs, hasMore) {
    const first = this.rows.length ? this.rows[0] : Infinity;
    const older = seqs.filter((seq) => seq < first);
    this.rows = [...older, ...this.rows];
    this.hasOlder = hasMore;
    return this.trim("oldest");
  }

  /** A live event at the tail. Answers `{shown, dropped}`: dropped seqs at the start when over the cap. */
  append(seq) {
    if (this.trimmedNewer) {
      // The reader is far back and the newest rows are not in the DOM: count, do not show.
      this.unseen += 1;
      return { shown: false, dropped: [] };
    }
    if (this.rows.length && seq <= this.rows[this.rows.length - 1]) {
      // A repaired event inside the window.
      if (!this.rows.includes(seq)) {
        this.rows.push(seq);
        this.rows.sort((a, b) => a - b);
      }
      return { shown: true, dropped: this.trim("newest") };
    }
    this.rows.push(seq);
    if (!this.following) this.unseen += 1;
    return { shown: true, dropped: this.trim("newest") };
  }

  /** The reader scrolled: at the bottom or not. Reaching the bottom clears the counter. */
  setFollowing(atBottom) {
    this.following = atBottom;
    if (atBottom && !this.trimmedNewer) this.unseen = 0;
  }

  /** Keeps at most `cap` rows, keeping the `keep` end ("newest" or "oldest"). */
  trim(keep) {
    const excess = this.rows.length - this.cap;
    if (excess <= 0) return [];
    if (keep === "newest") {
      const dropped = this.rows.slice(0, excess);
      this.rows = this.rows.slice(excess);
      this.hasOlder = true;
      return dropped;
    }
    const dropped = this.rows.slice(this.rows.length - excess);
    this.rows = this.rows.slice(0, this.rows.length - excess);
    this.trimmedNewer = true;
    return dropped;
  }
}
