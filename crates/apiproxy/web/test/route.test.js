import { test } from "node:test";
import assert from "node:assert/strict";
import { parseRoute, formatRoute } from "../static/js/route.js";

test("parses the three routes", () => {
  assert.deepEqual(parseRoute(""), { view: "list" });
  assert.deepEqual(parseRoute("#/"), { view: "list" });
  assert.deepEqual(parseRoute("#/s/abc"), { view: "session", id: "abc" });
  assert.deepEqual(parseRoute("#/s/abc/seq/12"), { view: "session", id: "abc", seq: 12 });
  assert.deepEqual(parseRoute("#/s/abc/seq/x"), { view: "session", id: "abc" });
  assert.deepEqual(parseRoute("#/s/%E0%A4%A"), { view: "list" });
});

test("ids round-trip through encodeURIComponent", () => {
  for (const id of ["a/b", "..", "x y#z?", "ünï", "%41"]) {
    const hash = formatRoute({ view: "session", id });
    assert.ok(!hash.slice(4).includes("/"), hash);
    assert.deepEqual(parseRoute(hash), { view: "session", id });
    assert.deepEqual(parseRoute(formatRoute({ view: "session", id, seq: 3 })), { view: "session", id, seq: 3 });
  }
  assert.equal(formatRoute({ view: "list" }), "#/");
});
