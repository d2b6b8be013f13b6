// The page's repair flow over the two models: live events into the window, a gap re-pulls the tail.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createLiveModel } from "../static/js/live.js";
import { createWindow } from "../static/js/window.js";

const ev = (seq) => ({ type: "x", seq });
const log = Array.from({ length: 40 }, (_, i) => ev(i));
const tail = (upTo, size = 10) => log.slice(Math.max(0, upTo + 1 - size), upTo + 1);

function page(live, win, id) {
  return {
    deliver(e) {
      const r = live.apply(id, e);
      if (r.kind === "apply") win.append(r.events);
      return r.kind;
    },
    repair(upTo) {
      const events = tail(upTo);
      const r = live.merge(id, events);
      if (r.rebase && !(win.rows.length && events[0].seq <= win.lastSeq + 1)) win.setTail(events, true);
      else win.mergeTail(events);
    },
  };
}

test("duplicates, reorders and a gap end in one contiguous, duplicate-free window", () => {
  const live = createLiveModel();
  const win = createWindow();
  const p = page(live, win, "s");
  live.baseline("s", 9);
  win.setTail(tail(9), true);
  live.merge("s", tail(9));
  for (const seq of [10, 10, 12, 11, 13, 9, 16]) p.deliver(ev(seq));
  assert.equal(live.needsRepair("s"), true, "16 arrived past 14 and 15");
  p.repair(16);
  assert.equal(live.needsRepair("s"), false);
  p.deliver(ev(17));
  const seqs = win.rows.map((e) => e.seq);
  assert.deepEqual(seqs, Array.from({ length: 18 }, (_, i) => i).slice(0));
  assert.equal(new Set(seqs).size, seqs.length);
});

test("a repair after missing more than a page rebases the window on the tail", () => {
  const live = createLiveModel();
  const win = createWindow();
  const p = page(live, win, "s");
  live.baseline("s", 4);
  win.setTail(tail(4, 5), false);
  live.merge("s", tail(4, 5));
  assert.equal(p.deliver(ev(30)), "gap");
  p.repair(30);
  const seqs = win.rows.map((e) => e.seq);
  assert.deepEqual(seqs, Array.from({ length: 10 }, (_, i) => 21 + i));
  assert.equal(win.hasMore, true);
  assert.equal(p.deliver(ev(31)), "apply");
  assert.equal(win.lastSeq, 31);
});
