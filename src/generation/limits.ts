import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { count } from '../common/count.js';
import { DomainError } from '../common/problem.js';
import { REDIS } from '../redis/redis.module.js';
import { UserLimits } from '../users/user-limits.js';

const WINDOW_MS = 60_000;

/**
 * Takes one creation when the weighted count leaves room for it: KEYS = this minute's and the previous
 * minute's counters; ARGV = limit, milliseconds gone of this minute, counter lifetime (ms).
 * Returns [taken (1 or 0), this minute's count, previous minute's count], counts before any taking.
 * The weighted count is compared in creation-milliseconds, whole numbers, so that the moment room appears is exact
 * and `secondsUntilFree` can name it to the second.
 */
const TAKE_SCRIPT = `
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
if previous * (${WINDOW_MS} - tonumber(ARGV[2])) + (current + 1) * ${WINDOW_MS} > tonumber(ARGV[1]) * ${WINDOW_MS} then
  return {0, current, previous}
end
redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1, current, previous}
`;

/** Gives one creation back, unless its counter has already expired (a counter without expiry would stay). */
const REFUND_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECR', KEYS[1]) end
return 0
`;

interface RateLimitCommands {
  takeCreation(
    current: string,
    previous: string,
    limit: number,
    elapsedMs: number,
    ttlMs: number,
  ): Promise<[number, number, number]>;
  refundCreation(key: string): Promise<number>;
}

/** A creation taken from a user's budget: given back with `refund` when no job came of the request. */
export interface CreationTicket {
  key: string;
  /** Where the budget stands after this creation. */
  budget: CreationBudget;
}

/** Where a user's per-minute creation budget stands. */
export interface CreationBudget {
  limit: number;
  /** Creations counted in the sliding window now, rounded up. */
  used: number;
  /** Creations still allowed now. */
  remaining: number;
  /** Seconds until the window moves on (the next minute), or, with none remaining, until one is allowed again. */
  resetSeconds: number;
}

/**
 * The budget as IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers-10/11: a policy named by a quoted
 * string, `q` its quota, `w` its window in seconds; `r` what remains, `t` seconds until it resets).
 */
export function rateLimitHeaders(budget: CreationBudget): Record<string, string> {
  return {
    'RateLimit-Policy': `"creations";q=${budget.limit};w=${WINDOW_MS / 1000}`,
    RateLimit: `"creations";r=${budget.remaining};t=${budget.resetSeconds}`,
  };
}

/**
 * Job creations per user per minute, counted in Redis so every API replica shares one budget. A sliding
 * window (this minute's count plus the previous minute's, weighted by how much of it still overlaps)
 * keeps a burst across a minute boundary from getting two budgets.
 *
 * Only accepted creations count: a request is checked before its upload is read (a user over budget is
 * refused without reading it) and takes a creation once the upload is valid; if the job is then refused
 * after all (the pending limit, the queue unavailable), the creation is given back.
 *
 * Hand-written rather than rate-limiter-flexible (which counts the failed authentications, AuthFailureLimit): its
 * Redis limiters count a fixed window opened by a key's first point, which gives a burst across the window's end a
 * second budget, and their `msBeforeNext` is that window's end, not the first second the sliding window leaves room.
 */
@Injectable()
export class CreationRateLimit {
  private readonly commands: RateLimitCommands;
  /** Per user, the creations left in the minute of this process's last take for them; the users seen last. */
  private readonly known = new LRUCache<string, { minute: number; room: number }>({ max: 10_000 });

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly limits: UserLimits,
  ) {
    redis.defineCommand('takeCreation', { numberOfKeys: 2, lua: TAKE_SCRIPT });
    redis.defineCommand('refundCreation', { numberOfKeys: 1, lua: REFUND_SCRIPT });
    this.commands = redis as unknown as RateLimitCommands;
  }

  /**
   * Refuses early, before an upload is read, when the budget is already spent; takes nothing. Skipped
   * while this process's last take for the user, this minute, left more than half the budget: only other
   * replicas could have spent it since, and `take` still refuses then, after reading the upload.
   */
  async check(userId: string, now = Date.now()): Promise<void> {
    const { minute, key, previousKey, elapsedMs } = windowOf(userId, now);
    const { creationsPerMinute: limit } = await this.limits.of(userId);
    const known = this.known.get(userId);
    if (known && known.minute === minute && known.room > limit / 2) return;
    const [current, previous] = await this.redis.mget(key, previousKey);
    const used = Number(current ?? 0);
    const before = Number(previous ?? 0);
    if (room(limit, used, before, elapsedMs) < 1) refuse(limit, used, before, elapsedMs);
  }

  /** Where the user's budget stands, taking nothing. */
  async standing(userId: string, now = Date.now()): Promise<CreationBudget> {
    const { key, previousKey, elapsedMs } = windowOf(userId, now);
    const { creationsPerMinute: limit } = await this.limits.of(userId);
    const [current, previous] = await this.redis.mget(key, previousKey);
    return budgetOf(limit, Number(current ?? 0), Number(previous ?? 0), elapsedMs);
  }

  /** Takes one creation from the budget in one round trip, or refuses with the seconds until one is free. */
  async take(userId: string, now = Date.now()): Promise<CreationTicket> {
    const { minute, key, previousKey, elapsedMs } = windowOf(userId, now);
    const { creationsPerMinute: limit } = await this.limits.of(userId);
    const [taken, current, previous] = await this.commands.takeCreation(
      key,
      previousKey,
      limit,
      elapsedMs,
      2 * WINDOW_MS,
    );
    // The counts are from before this take, which used one of the room they leave.
    const left = taken === 1 ? room(limit, current, previous, elapsedMs) - 1 : 0;
    this.known.set(userId, { minute, room: left });
    if (taken !== 1) refuse(limit, current, previous, elapsedMs);
    return { key, budget: budgetOf(limit, current + 1, previous, elapsedMs) };
  }

  /** Gives a taken creation back, when no job came of it after all. */
  async refund(ticket: CreationTicket): Promise<void> {
    await this.commands.refundCreation(ticket.key);
  }
}

/** Creations a budget of `limit` still allows with these counts: the sliding window of TAKE_SCRIPT. */
function room(limit: number, current: number, previous: number, elapsedMs: number): number {
  return limit - (previous * (WINDOW_MS - elapsedMs)) / WINDOW_MS - current;
}

function refuse(limit: number, current: number, previous: number, elapsedMs: number): never {
  const budget = budgetOf(limit, current, previous, elapsedMs);
  const retryAfter = budget.resetSeconds;
  throw new DomainError('rate_limited', `At most ${count(limit, 'job creation')} a minute; retry in ${retryAfter} s.`, {
    headers: { 'Retry-After': String(retryAfter), ...rateLimitHeaders(budget) },
  });
}

/** The budget these counts leave, by the sliding window of TAKE_SCRIPT. */
export function budgetOf(limit: number, current: number, previous: number, elapsedMs: number): CreationBudget {
  // In creation-milliseconds, whole numbers, as TAKE_SCRIPT counts: no rounding error at the edges.
  const counted = previous * (WINDOW_MS - elapsedMs) + current * WINDOW_MS;
  const remaining = Math.max(0, Math.floor((limit * WINDOW_MS - counted) / WINDOW_MS));
  return {
    limit,
    used: Math.ceil(counted / WINDOW_MS),
    remaining,
    resetSeconds:
      remaining > 0 ? Math.ceil((WINDOW_MS - elapsedMs) / 1000) : secondsUntilFree(limit, current, previous, elapsedMs),
  };
}

/** This minute's and the previous minute's counters, and how far into this minute `now` is (ms). */
function windowOf(userId: string, now: number) {
  const minute = Math.floor(now / WINDOW_MS);
  return {
    minute,
    key: counterKey(userId, minute),
    previousKey: counterKey(userId, minute - 1),
    elapsedMs: now % WINDOW_MS,
  };
}

function counterKey(userId: string, minute: number): string {
  return `${creationCountersOf(userId)}${minute}`;
}

/** What the names of a user's creation counters start with (a user's removal deletes them). */
export function creationCountersOf(userId: string): string {
  return `rate:create:${userId}:`;
}

/**
 * Whole seconds from a refusal (at `elapsedMs` into the minute) until TAKE_SCRIPT accepts one more creation, if
 * nothing else is created meanwhile: the `Retry-After` of a 429. At most two minutes, the time a full minute takes to
 * slide out of the window after the minute it was counted in.
 */
export function secondsUntilFree(limit: number, current: number, previous: number, elapsedMs: number): number {
  // The first millisecond, counted from the start of this minute, at which the weighted count leaves room for one.
  let readyAt: number;
  if (current + 1 <= limit) {
    // Within this minute, as the previous minute's weight shrinks: previous * (W - t) <= (limit - current - 1) * W.
    readyAt = previous === 0 ? elapsedMs : WINDOW_MS - Math.floor(((limit - current - 1) * WINDOW_MS) / previous);
  } else {
    // In the next minute, where this minute's count is the shrinking one: current * (W - x) <= (limit - 1) * W.
    readyAt = 2 * WINDOW_MS - Math.floor(((limit - 1) * WINDOW_MS) / current);
  }
  return Math.max(1, Math.ceil((readyAt - elapsedMs) / 1000));
}
