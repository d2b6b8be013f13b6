import { test } from "node:test";
import assert from "node:assert/strict";
import { relativeTime, duration, childCount, iso } from "../static/js/format.js";

test("relative times", () => {
  const now = 1_000_000_000_000;
  assert.equal(relativeTime(now - 10_000, now), "just now");
  assert.equal(relativeTime(now - 5 * 60_000, now), "5 min ago");
  assert.equal(relativeTime(now - 3 * 3_600_000, now), "3 h ago");
  assert.equal(relativeTime(now - 2 * 86_400_000, now), "2 d ago");
  assert.equal(relativeTime(now + 5000, now), "just now");
});

test("durations", () => {
  assert.equal(duration(850), "850 ms");
  assert.equal(duration(12_000), "12 s");
  assert.equal(duration(184_000), "3 min 4 s");
  assert.equal(duration(7_500_000), "2 h 5 min");
  assert.equal(duration(undefined), "");
});

test("child counts", () => {
  assert.equal(childCount({ count: 1, running: 0 }), "1 subagent");
  assert.equal(childCount({ count: 3, running: 1 }), "3 subagents, 1 running");
  assert.equal(childCount(undefined), "");
  assert.equal(iso(0), "1970-01-01T00:00:00.000Z");
});
