// Reconnect delays: 0.5 s doubling to 10 s, each with jitter so that many tabs do not reconnect at once.

export const FIRST_DELAY_MS = 500;
export const MAX_DELAY_MS = 10_000;

/** The delay before reconnect attempt `attempt` (0-based): the doubling bound, jittered down to half of it. */
export function reconnectDelay(attempt, random = Math.random) {
  const bound = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** Math.min(attempt, 16));
  return Math.round(bound / 2 + (bound / 2) * random());
}
