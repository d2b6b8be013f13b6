// Text for times, durations and counts.

/** A relative time ("just now", "5 min ago", "3 h ago", "2 d ago") of `then` seen at `now` (both ms). */
export function relativeTime(then, now) {
  const seconds = Math.round((now - then) / 1000);
  if (seconds < 0) return "in the future";
  if (seconds < 45) return "just now";
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 48) return `${hours} h ago`;
  return `${Math.round(hours / 24)} d ago`;
}

/** A duration in ms as "850 ms", "12 s", "3 min 5 s", "2 h 4 min". */
export function duration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = Math.floor(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${seconds % 60} s`;
  return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}

/** "1 subagent", "3 subagents, 1 running" from a summary's `subagents: {count, running}`. */
export function childCount(subagents) {
  if (!subagents || !subagents.count) return "";
  const noun = subagents.count === 1 ? "subagent" : "subagents";
  const running = subagents.running ? `, ${subagents.running} running` : "";
  return `${subagents.count} ${noun}${running}`;
}
