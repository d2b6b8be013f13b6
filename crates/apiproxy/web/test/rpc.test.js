import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient, RpcError, Unauthenticated } from "../static/js/rpc.js";

function fakeFetch(status, body, seen) {
  return async (url, init) => {
    seen.push({ url, init });
    return { status, ok: status >= 200 && status < 300, json: async () => body };
  };
}

test("posts a client-request envelope and answers the value", async () => {
  const seen = [];
  const body = { type: "server-response", rpcId: "1", result: { ok: true, value: { items: [] } } };
  const { call } = createClient({ fetchImpl: fakeFetch(200, body, seen) });
  assert.deepEqual(await call("session.list", { limit: 50 }), { items: [] });
  assert.equal(seen[0].url, "/api/session.list");
  assert.equal(seen[0].init.method, "POST");
  const sent = JSON.parse(seen[0].init.body);
  assert.equal(sent.type, "client-request");
  assert.equal(sent.method, "session.list");
  assert.deepEqual(sent.payload, { limit: 50 });
  assert.equal(typeof sent.rpcId, "string");
  assert.equal(seen[0].init.headers.authorization, undefined);
});

test("sends the bearer token when one is set", async () => {
  const seen = [];
  const body = { result: { ok: true, value: {} } };
  const { call } = createClient({ fetchImpl: fakeFetch(200, body, seen), getToken: () => "t0k" });
  await call("host.describe");
  assert.equal(seen[0].init.headers.authorization, "Bearer t0k");
});

test("a business error becomes an RpcError with code, message and details", async () => {
  const body = { result: { ok: false, error: { code: "session-not-found", message: "session \"x\" not found", details: { sessionId: "x" } } } };
  const { call } = createClient({ fetchImpl: fakeFetch(200, body, []) });
  await assert.rejects(call("session.get", { sessionId: "x" }), (err) => {
    assert.ok(err instanceof RpcError);
    assert.equal(err.code, "session-not-found");
    assert.equal(err.rpcMessage, "session \"x\" not found");
    assert.deepEqual(err.details, { sessionId: "x" });
    return true;
  });
});

test("HTTP 401 is Unauthenticated, telling whether a token was sent", async () => {
  const { call } = createClient({ fetchImpl: fakeFetch(401, { error: "unauthenticated" }, []), getToken: () => "bad" });
  await assert.rejects(call("session.list"), (err) => err instanceof Unauthenticated && err.hadToken === true);
  const anon = createClient({ fetchImpl: fakeFetch(401, { error: "unauthenticated" }, []) });
  await assert.rejects(anon.call("session.list"), (err) => err instanceof Unauthenticated && err.hadToken === false);
});

test("a network failure and a non-JSON answer are RpcErrors", async () => {
  const failing = createClient({ fetchImpl: async () => { throw new Error("down"); } });
  await assert.rejects(failing.call("x"), (err) => err instanceof RpcError && err.code === "network");
  const notJson = createClient({ fetchImpl: async () => ({ status: 404, ok: false, json: async () => { throw new SyntaxError("x"); } }) });
  await assert.rejects(notJson.call("x"), (err) => err instanceof RpcError && err.code === "http-404");
});
