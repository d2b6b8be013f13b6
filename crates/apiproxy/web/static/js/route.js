// Hash routes: `#/` (the session list), `#/s/<id>` (a session), `#/s/<id>/seq/<n>` (a session at event n).

/** Parses a location hash into `{view: "list"}` or `{view: "session", id, seq}` (`seq` null when absent). */
export function parseRoute(hash) {
  const path = (hash || "").replace(/^#/, "");
  const parts = path.split("/").filter((part) => part !== "");
  if (parts[0] === "s" && parts.length >= 2) {
    let id;
    try {
      id = decodeURIComponent(parts[1]);
    } catch {
      return { view: "list" };
    }
    if (id === "") return { view: "list" };
    if (parts.length === 4 && parts[2] === "seq" && /^\d+$/.test(parts[3])) {
      return { view: "session", id, seq: Number(parts[3]) };
    }
    return { view: "session", id, seq: null };
  }
  return { view: "list" };
}

/** Formats a route back into a hash; `parseRoute(formatRoute(r))` gives `r` back. */
export function formatRoute(route) {
  if (route.view !== "session") return "#/";
  const base = `#/s/${encodeURIComponent(route.id)}`;
  return route.seq === null || route.seq === undefined ? base : `${base}/seq/${route.seq}`;
}
