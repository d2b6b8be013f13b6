// The unary client: POST /api/<method> with a client-request envelope.

/** A business error answered by the gateway (`ok: false`) or a carrier failure. */
export class RpcError extends Error {
  constructor(code, message, details = {}) {
    super(`${code}: ${message}`);
    this.name = "RpcError";
    this.code = code;
    this.rpcMessage = message;
    this.details = details;
  }
}

/** HTTP 401: no token, or the token was refused. */
export class Unauthenticated extends Error {
  constructor(hadToken) {
    super("unauthenticated");
    this.name = "Unauthenticated";
    this.hadToken = hadToken;
  }
}

/**
 * Makes a client. `getToken()` answers the bearer token or null; `fetchImpl` defaults to fetch.
 * Returns `call(method, payload)` resolving to the answer's value.
 */
export function createClient({ fetchImpl = globalThis.fetch, getToken = () => null, base = "" } = {}) {
  let next = 1;
  async function call(method, payload = {}) {
    const rpcId = String(next++);
    const headers = { "content-type": "application/json" };
    const token = getToken();
    if (token) headers.authorization = `Bearer ${token}`;
    let response;
    try {
      response = await fetchImpl(`${base}/api/${method}`, {
        method: "POST",
        headers,
        body: JSON.stringify({ type: "client-request", rpcId, method, payload }),
      });
    } catch (err) {
      throw new RpcError("network", String(err && err.message ? err.message : err));
    }
    if (response.status === 401) throw new Unauthenticated(Boolean(token));
    let body;
    try {
      body = await response.json();
    } catch {
      throw new RpcError(`http-${response.status}`, "answer is not JSON");
    }
    if (!response.ok && !(body && body.result)) {
      throw new RpcError(`http-${response.status}`, typeof body === "string" ? body : JSON.stringify(body));
    }
    const result = body && body.result;
    if (!result) throw new RpcError("bad-answer", "server-response without a result");
    if (result.ok) return result.value;
    const error = result.error || {};
    throw new RpcError(error.code || "internal", error.message || "", error.details || {});
  }
  return { call };
}
