// Text for times, durations and counts.

/** "just now", "5 min ago", "3 h ago", "2 d ago" for a time (ms) relative to now (ms). */
export function relativeTime(time, now = Date.now()) {
  const diff = Math.max(0, now - time);
  const s = Math.floor(diff / 1000);
  if (s < 45) return "just now";
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d < 60) return `${d} d ago`;
  return new Date(time).toISOString().slice(0, 10);
}

/** "850 ms", "12 s", "3 min 4 s", "2 h 5 min". */
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  const h = Math.floor(m / 60);
  return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
}

/** "1 subagent", "3 subagents, 1 running"; "" for none. */
export function childCount(subagents) {
  if (!subagents || !subagents.count) return "";
  const n = subagents.count;
  const text = `${n} ${n === 1 ? "subagent" : "subagents"}`;
  return subagents.running ? `${text}, ${subagents.running} running` : text;
}

/** ISO string for a datetime attribute; "" when not a time. */
export function iso(time) {
  return Number.isFinite(time) ? new Date(time).toISOString() : "";
}
