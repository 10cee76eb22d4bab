import type { Redis } from 'ioredis';

/** A round's share of its sweep's interval. */
const ROUND_SHARE = 0.9;

/**
 * Takes the lock of one round of a sweep that runs every `intervalMs` in one worker of many at a time (a Redis
 * `SET NX`). The lock, and so the round, ends a tenth of the interval before the next tick, so that the next tick, on
 * this worker or another, finds it gone: a lock as long as the interval outlived the next tick by the round trip of
 * the SET that took it, and every other round was skipped. Resolves when the round must end (ms since the epoch), or
 * undefined when another worker holds it.
 */
export async function takeRound(redis: Redis, key: string, intervalMs: number): Promise<number | undefined> {
  const roundMs = Math.ceil(intervalMs * ROUND_SHARE);
  const taken = await redis.set(key, '1', 'PX', roundMs, 'NX');
  return taken ? Date.now() + roundMs : undefined;
}
