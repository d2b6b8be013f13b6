// The unary client: `POST /api/<method>` with a `client-request` envelope.

/** A wire error: the `code`, `message` and `details` of an `ok: false` answer. */
export class RpcError extends Error {
  constructor(code, message, details) {
    super(message);
    this.code = code;
    this.details = details ?? {};
  }
}

/** The gateway wants a token (HTTP 401): none was given, or it was refused. */
export class Unauthenticated extends Error {
  constructor(hadToken) {
    super(hadToken ? "the token was refused" : "this gateway needs an access token");
    this.hadToken = hadToken;
  }
}

let counter = 0;
function freshRpcId() {
  counter += 1;
  return globalThis.crypto?.randomUUID ? globalThis.crypto.randomUUID() : `rpc-${Date.now()}-${counter}`;
}

/** A client bound to a token source; `fetchImpl` is injectable for tests. */
export function createClient({ token = () => null, fetchImpl = (...args) => globalThis.fetch(...args) } = {}) {
  async function call(method, payload = {}) {
    const rpcId = freshRpcId();
    const headers = { "content-type": "application/json" };
    const bearer = token();
    if (bearer) headers.authorization = `Bearer ${bearer}`;
    const response = await fetchImpl(`/api/${method}`, {
      method: "POST",
      headers,
      body: JSON.stringify({ type: "client-request", rpcId, method, payload }),
    });
    if (response.status === 401) throw new Unauthenticated(Boolean(bearer));
    if (!response.ok) {
      const text = await response.text();
      throw new RpcError("transport", `HTTP ${response.status}: ${text}`);
    }
    const envelope = await response.json();
    if (envelope.rpcId !== rpcId) throw new RpcError("transport", "rpcId mismatch");
    const result = envelope.result ?? {};
    if (result.ok) return result.value;
    const error = result.error ?? {};
    throw new RpcError(error.code ?? "internal", error.message ?? "unknown error", error.details);
  }
  return { call };
}

/** The WebSocket subprotocols that carry `token` (`dsh.bearer.<base64url, no padding>`). */
export function socketProtocols(token) {
  if (!token) return ["dsh.v1"];
  const bytes = new TextEncoder().encode(token);
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  const encoded = btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return ["dsh.v1", `dsh.bearer.${encoded}`];
}
