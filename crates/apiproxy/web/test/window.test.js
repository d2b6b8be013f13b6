import { test } from "node:test";
import assert from "node:assert/strict";
import { createWindow } from "../static/js/window.js";

const range = (a, b) => Array.from({ length: b - a }, (_, i) => ({ seq: a + i }));
const seqs = (w) => w.rows.map((e) => e.seq);

test("tail first, older pages prepended by beforeSeq", () => {
  const w = createWindow();
  w.setTail(range(50, 100), true);
  assert.equal(w.firstSeq, 50);
  assert.equal(w.hasMore, true);
  w.prepend(range(0, 51), false);
  assert.equal(w.rows.length, 100);
  assert.deepEqual(seqs(w).slice(0, 3), [0, 1, 2]);
  assert.equal(w.hasMore, false);
});

test("capped: an older page drops the far (newest) end, appends drop the oldest", () => {
  const w = createWindow({ cap: 10 });
  w.setTail(range(10, 20), true);
  const dropped = w.prepend(range(5, 10), true);
  assert.equal(dropped, 5);
  assert.deepEqual(seqs(w), range(5, 15).map((e) => e.seq));
  assert.equal(w.following, false);
  const w2 = createWindow({ cap: 10 });
  w2.setTail(range(0, 10), false);
  const r = w2.append(range(10, 13));
  assert.equal(r.droppedHead, 3);
  assert.equal(w2.firstSeq, 3);
  assert.equal(w2.hasMore, true);
});

test("new events count while not following; following clears the counter", () => {
  const w = createWindow();
  w.setTail(range(0, 5), false);
  w.setFollowing(false);
  w.append(range(5, 8));
  assert.equal(w.newCount, 3);
  w.append(range(7, 9));
  assert.equal(w.newCount, 4, "only seqs past the last count");
  w.setFollowing(true);
  assert.equal(w.newCount, 0);
  assert.deepEqual(seqs(w), range(0, 9).map((e) => e.seq));
});

test("mergeTail merges a re-pulled page by seq without duplicates", () => {
  const w = createWindow();
  w.setTail(range(0, 5), false);
  w.mergeTail(range(3, 9));
  assert.deepEqual(seqs(w), range(0, 9).map((e) => e.seq));
  w.dropAbove(6);
  assert.equal(w.lastSeq, 6);
});

test("a detached window (a page in the middle) only counts new events until the tail is set", () => {
  const w = createWindow();
  w.setTail(range(10, 20), true);
  w.detach();
  assert.equal(w.following, false);
  const r = w.append(range(50, 53));
  assert.deepEqual(r.added, []);
  assert.equal(w.newCount, 3);
  assert.equal(w.lastSeq, 19);
  w.setTail(range(40, 53), true);
  assert.equal(w.droppedTail, false);
  assert.equal(w.newCount, 0);
  assert.equal(w.following, true);
});
