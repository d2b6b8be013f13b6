import { test } from "node:test";
import assert from "node:assert/strict";
import { baseDelay, createBackoff } from "../static/js/backoff.js";

test("base delays double from 0.5 s to a 10 s cap", () => {
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 9].map((n) => baseDelay(n)), [500, 1000, 2000, 4000, 8000, 10000, 10000, 10000]);
});

test("jitter stays within [base/2, base] and reset starts over", () => {
  const low = createBackoff({ random: () => 0 });
  assert.deepEqual([low.next(), low.next(), low.next()], [250, 500, 1000]);
  const high = createBackoff({ random: () => 1 });
  assert.deepEqual([high.next(), high.next()], [500, 1000]);
  for (let i = 0; i < 10; i++) high.next();
  assert.equal(high.next(), 10000);
  high.reset();
  assert.equal(high.attempt, 0);
  assert.equal(high.next(), 500);
});
