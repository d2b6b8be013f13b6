// Reconnect delays: 0.5 s doubling to 10 s, with jitter.

/** Base delay (ms) of attempt n (0-based) before jitter. */
export function baseDelay(attempt, { initial = 500, max = 10000 } = {}) {
  return Math.min(max, initial * 2 ** Math.max(0, attempt));
}

/** A backoff state: `next()` gives the next delay (ms), `reset()` after a successful open. */
export function createBackoff({ initial = 500, max = 10000, random = Math.random } = {}) {
  let attempt = 0;
  return {
    next() {
      const base = baseDelay(attempt, { initial, max });
      attempt += 1;
      // Full jitter in the upper half: [base/2, base).
      return Math.round(base / 2 + (base / 2) * random());
    },
    reset() {
      attempt = 0;
    },
    get attempt() {
      return attempt;
    },
  };
}
