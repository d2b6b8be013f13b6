import { test } from "node:test";
import assert from "node:assert/strict";

import { parseRoute, formatRoute } from "../static/js/route.js";
import { reconnectDelay, MAX_DELAY_MS } from "../static/js/backoff.js";
import { relativeTime, duration, childCount } from "../static/js/format.js";
import { SeqLog } from "../static/js/live.js";
import { HistoryWindow } from "../static/js/window.js";
import { TreeState } from "../static/js/tree.js";
import { createClient, RpcError, Unauthenticated, socketProtocols } from "../static/js/rpc.js";

const event = (seq) => ({ type: "assistant/chunk", seq, time: seq, data: {} });

test("routes round-trip, ids are encoded and junk is the list", () => {
  assert.deepEqual(parseRoute(""), { view: "list" });
  assert.deepEqual(parseRoute("#/"), { view: "list" });
  assert.deepEqual(parseRoute("#/s/a%2Fb"), { view: "session", id: "a/b", seq: null });
  assert.deepEqual(parseRoute("#/s/p/seq/12"), { view: "session", id: "p", seq: 12 });
  assert.deepEqual(parseRoute("#/s/p/seq/-1"), { view: "session", id: "p", seq: null });
  assert.deepEqual(parseRoute("#/s/%E0%A4%A"), { view: "list" });
  for (const route of [{ view: "session", id: "x y/..", seq: null }, { view: "session", id: "k", seq: 0 }]) {
    assert.deepEqual(parseRoute(formatRoute(route)), route);
  }
  assert.equal(formatRoute({ view: "session", id: "a/b", seq: 3 }), "#/s/a%2Fb/seq/3");
});

test("reconnect delays double from 0.5 s to 10 s, jittered within the upper half", () => {
  assert.equal(reconnectDelay(0, () => 1), 500);
  assert.equal(reconnectDelay(0, () => 0), 250);
  assert.equal(reconnectDelay(1, () => 1), 1000);
  assert.equal(reconnectDelay(5, () => 1), MAX_DELAY_MS);
  assert.equal(reconnectDelay(50, () => 1), MAX_DELAY_MS);
  for (let attempt = 0; attempt < 10; attempt += 1) {
    const delay = reconnectDelay(attempt);
    assert.ok(delay >= 250 && delay <= MAX_DELAY_MS, `${delay}`);
  }
});

test("times, durations and child counts read as words", () => {
  const now = 1_000_000_000;
  assert.equal(relativeTime(now - 10_000, now), "just now");
  assert.equal(relativeTime(now - 5 * 60_000, now), "5 min ago");
  assert.equal(relativeTime(now - 3 * 3_600_000, now), "3 h ago");
  assert.equal(relativeTime(now - 72 * 3_600_000, now), "3 d ago");
  assert.equal(duration(850), "850 ms");
  assert.equal(duration(65_000), "1 min 5 s");
  assert.equal(duration(2 * 3_600_000 + 4 * 60_000), "2 h 4 min");
  assert.equal(childCount(undefined), "");
  assert.equal(childCount({ count: 1, running: 0 }), "1 subagent");
  assert.equal(childCount({ count: 3, running: 1 }), "3 subagents, 1 running");
});

test("a live event already held is a duplicate, by seq alone", () => {
  const log = new SeqLog();
  log.merge([event(0), event(1), event(2)]);
  assert.deepEqual(log.apply(event(2)), { duplicate: true, added: false, repair: false });
  assert.deepEqual(log.apply(event(3)), { duplicate: false, added: true, repair: false });
  assert.deepEqual(log.seqs(), [0, 1, 2, 3]);
});

test("a gap asks for repair, and merging the tail page fills it without duplicates", () => {
  const log = new SeqLog();
  log.merge([event(0), event(1)]);
  const outcome = log.apply(event(4));
  assert.equal(outcome.repair, true);
  assert.deepEqual(log.holes(), [2, 3]);
  assert.deepEqual(log.merge([event(1), event(2), event(3), event(4)]), { added: 2 });
  assert.deepEqual(log.holes(), []);
  assert.deepEqual(log.seqs(), [0, 1, 2, 3, 4]);
});

test("events out of order are each kept once", () => {
  const log = new SeqLog();
  log.merge([event(0)]);
  log.apply(event(2));
  log.apply(event(1));
  log.apply(event(2));
  assert.deepEqual(log.seqs(), [0, 1, 2]);
});

test("a baseline drops what is held past it and asks for repair when it is ahead", () => {
  const log = new SeqLog();
  log.merge([event(0), event(1), event(2), event(3)]);
  assert.deepEqual(log.baseline(1), { dropped: 2, repair: false });
  assert.deepEqual(log.seqs(), [0, 1]);
  assert.equal(log.apply(event(2)).repair, false);
  assert.deepEqual(log.baseline(9), { dropped: 0, repair: true });
  const empty = new SeqLog();
  assert.deepEqual(empty.baseline(-1), { dropped: 0, repair: false });
});

test("the window opens at the tail, pages back and stays under its cap", () => {
  const window = new HistoryWindow(5);
  window.resetTail([10, 11, 12], true);
  assert.deepEqual(window.prepend([7, 8, 9], true), [12]);
  assert.deepEqual(window.rows, [7, 8, 9, 10, 11]);
  assert.equal(window.trimmedNewer, true);
  // Far back, a live event is counted, not shown.
  assert.deepEqual(window.append(13), { shown: false, dropped: [] });
  assert.equal(window.unseen, 1);
});

test("following the tail shows new events; scrolled up it counts them", () => {
  const window = new HistoryWindow(3);
  window.resetTail([0, 1], false);
  assert.deepEqual(window.append(2), { shown: true, dropped: [] });
  assert.deepEqual(window.append(3), { shown: true, dropped: [0] });
  assert.equal(window.hasOlder, true);
  window.setFollowing(false);
  window.append(4);
  window.append(5);
  assert.equal(window.unseen, 2);
  window.setFollowing(true);
  assert.equal(window.unseen, 0);
  assert.deepEqual(window.rows, [3, 4, 5]);
});

test("the tree loads children lazily and moves focus as the ARIA tree pattern says", () => {
  const tree = new TreeState("root");
  tree.setChildren("root", [
    { kind: "child", id: "a", hasChildren: true },
    { kind: "diagnostic", id: "d", reason: "corrupt" },
    { kind: "child", id: "b", hasChildren: false },
  ]);
  assert.equal(tree.disabled({ kind: "diagnostic" }), true);
  assert.deepEqual(tree.navigate("a", "ArrowRight"), { focus: "a", expand: "a" });
  assert.equal(tree.expand("a"), true);
  tree.setChildren("a", [{ kind: "child", id: "a1", hasChildren: false }]);
  assert.equal(tree.expand("a"), false);
  assert.deepEqual(tree.visible().map((row) => [row.entry.id, row.level]), [["a", 1], ["a1", 2], ["d", 1], ["b", 1]]);
  assert.deepEqual(tree.navigate("a", "ArrowRight"), { focus: "a1" });
  assert.deepEqual(tree.navigate("a1", "ArrowLeft"), { focus: "a" });
  assert.deepEqual(tree.navigate("a", "ArrowLeft"), { focus: "a", collapse: "a" });
  assert.deepEqual(tree.navigate("a1", "ArrowDown"), { focus: "d" });
  assert.deepEqual(tree.navigate("d", "End"), { focus: "b" });
  assert.deepEqual(tree.navigate("b", "Home"), { focus: "a" });
  assert.deepEqual(tree.navigate("b", "ArrowDown"), { focus: "b" });
  tree.collapse("a");
  assert.deepEqual(tree.visible().map((row) => row.entry.id), ["a", "d", "b"]);
  assert.equal(tree.navigate("b", "x"), null);
});

function fakeFetch(answer) {
  const calls = [];
  const impl = async (url, init) => {
    calls.push({ url, init });
    const body = JSON.parse(init.body);
    return answer(body, init);
  };
  return { calls, impl };
}

const jsonResponse = (status, value) => ({ status, ok: status < 300, json: async () => value, text: async () => JSON.stringify(value) });

test("the client sends envelopes with the bearer token and unwraps answers and errors", async () => {
  let token = "s3cret";
  const { calls, impl } = fakeFetch((body) =>
    body.method === "session.list"
      ? jsonResponse(200, { type: "server-response", rpcId: body.rpcId, result: { ok: true, value: { items: [] } } })
      : jsonResponse(200, {
          type: "server-response",
          rpcId: body.rpcId,
          result: { ok: false, error: { code: "session-not-found", message: 'session "x" not found', details: { sessionId: "x" } } },
        }),
  );
  const client = createClient({ token: () => token, fetchImpl: impl });
  assert.deepEqual(await client.call("session.list", { limit: 50 }), { items: [] });
  assert.equal(calls[0].url, "/api/session.list");
  assert.equal(calls[0].init.headers.authorization, "Bearer s3cret");
  assert.deepEqual(JSON.parse(calls[0].init.body).payload, { limit: 50 });
  await assert.rejects(client.call("session.history", { sessionId: "x" }), (error) => {
    assert.ok(error instanceof RpcError);
    assert.equal(error.code, "session-not-found");
    assert.equal(error.details.sessionId, "x");
    return true;
  });
  token = null;
  await client.call("session.list");
  assert.equal(calls[2].init.headers.authorization, undefined);
});

test("a 401 is Unauthenticated and says whether a token was refused", async () => {
  const { impl } = fakeFetch(() => jsonResponse(401, { error: "unauthenticated" }));
  await assert.rejects(createClient({ fetchImpl: impl }).call("session.list"), (error) => error instanceof Unauthenticated && !error.hadToken);
  await assert.rejects(
    createClient({ token: () => "bad", fetchImpl: impl }).call("session.list"),
    (error) => error instanceof Unauthenticated && error.hadToken,
  );
});

test("the subprotocol carries the token as unpadded base64url", () => {
  assert.deepEqual(socketProtocols(null), ["dsh.v1"]);
  assert.deepEqual(socketProtocols("t?>~"), ["dsh.v1", "dsh.bearer.dD8-fg"]);
});
