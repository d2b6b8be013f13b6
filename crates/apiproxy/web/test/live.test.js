import { test } from "node:test";
import assert from "node:assert/strict";
import { createLiveModel } from "../static/js/live.js";

const ev = (seq) => ({ type: "x", seq, time: 0, data: {} });
const seqs = (events) => events.map((e) => e.seq);

test("applies events in seq order after a baseline", () => {
  const m = createLiveModel();
  m.baseline("s", 4);
  assert.deepEqual(seqs(m.apply("s", ev(5)).events), [5]);
  assert.deepEqual(seqs(m.apply("s", ev(6)).events), [6]);
  assert.equal(m.last("s"), 6);
  assert.equal(m.needsRepair("s"), false);
});

test("a duplicate seq is dropped", () => {
  const m = createLiveModel();
  m.baseline("s", -1);
  m.apply("s", ev(0));
  assert.equal(m.apply("s", ev(0)).kind, "duplicate");
  m.baseline("s", 0);
  assert.equal(m.apply("s", ev(0)).kind, "duplicate");
  assert.equal(m.last("s"), 0);
});

test("a gap holds the event back and asks for repair; the tail page repairs it", () => {
  const m = createLiveModel();
  m.baseline("s", 2);
  assert.equal(m.apply("s", ev(5)).kind, "gap");
  assert.equal(m.needsRepair("s"), true);
  const merged = m.merge("s", [ev(1), ev(2), ev(3), ev(4), ev(5)]);
  assert.equal(merged.rebase, false);
  assert.deepEqual(seqs(merged.events), [3, 4, 5]);
  assert.equal(m.needsRepair("s"), false);
  assert.equal(m.last("s"), 5);
  assert.equal(m.apply("s", ev(5)).kind, "duplicate");
});

test("reordered events are applied in seq order once the hole fills", () => {
  const m = createLiveModel();
  m.baseline("s", 0);
  assert.equal(m.apply("s", ev(2)).kind, "gap");
  assert.equal(m.apply("s", ev(3)).kind, "gap");
  const r = m.apply("s", ev(1));
  assert.deepEqual(seqs(r.events), [1, 2, 3]);
  assert.equal(m.needsRepair("s"), false);
});

test("a lower baseline drops what is past it", () => {
  const m = createLiveModel();
  m.baseline("s", 9);
  m.apply("s", ev(10));
  assert.deepEqual(m.baseline("s", 7), { dropAbove: 7 });
  assert.equal(m.last("s"), 7);
  assert.deepEqual(seqs(m.apply("s", ev(8)).events), [8]);
  assert.deepEqual(m.baseline("s", 8), {});
});

test("a tail page past everything held rebases", () => {
  const m = createLiveModel();
  m.baseline("s", 3);
  const r = m.merge("s", [ev(40), ev(41)]);
  assert.equal(r.rebase, true);
  assert.equal(m.last("s"), 41);
});
