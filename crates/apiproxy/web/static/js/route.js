// Hash routes: #/, #/s/<id>, #/s/<id>/seq/<n>.

/** Parses a location hash into `{view: "list"}` or `{view: "session", id, seq?}`. */
export function parseRoute(hash) {
  const h = (hash || "").replace(/^#/, "");
  const parts = h.split("/").filter((p, i) => i > 0 || p !== "");
  if (parts[0] === "s" && parts[1]) {
    let id;
    try {
      id = decodeURIComponent(parts[1]);
    } catch {
      return { view: "list" };
    }
    if (parts[2] === "seq" && /^\d+$/.test(parts[3] || "")) {
      return { view: "session", id, seq: Number(parts[3]) };
    }
    return { view: "session", id };
  }
  return { view: "list" };
}

/** Formats a route back to a hash. */
export function formatRoute(route) {
  if (!route || route.view !== "session") return "#/";
  const base = `#/s/${encodeURIComponent(route.id)}`;
  return Number.isInteger(route.seq) ? `${base}/seq/${route.seq}` : base;
}
