import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

const WINDOW_MS = 60_000;

/**
 * Job creations per user per minute, counted in Redis so every API replica shares one budget. A sliding
 * window (this minute's count plus the previous minute's, weighted by how much of it still overlaps)
 * keeps a burst across a minute boundary from getting two budgets.
 */
@Injectable()
export class CreationRateLimit {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  /** Refuses early, before an upload is read, when the budget is already spent; takes nothing. */
  async check(userId: string, now = Date.now()): Promise<void> {
    const window = this.window(userId, now);
    const [current, previous] = await this.redis.mget(window.currentKey, window.previousKey);
    this.refuseOver(Number(current ?? 0), Number(previous ?? 0), window.elapsed, 0);
  }

  /** Takes one creation from the budget, or refuses with the seconds until one is free again. */
  async take(userId: string, now = Date.now()): Promise<void> {
    const window = this.window(userId, now);
    const results = await this.redis
      .multi()
      .incr(window.currentKey)
      .pexpire(window.currentKey, 2 * WINDOW_MS)
      .get(window.previousKey)
      .exec();
    const current = Number(results?.[0]?.[1] ?? 0);
    const previous = Number(results?.[2]?.[1] ?? 0);
    try {
      this.refuseOver(current, previous, window.elapsed, 1);
    } catch (error) {
      // A refused request does not spend the budget.
      await this.redis.decr(window.currentKey);
      throw error;
    }
  }

  private window(userId: string, now: number) {
    const minute = Math.floor(now / WINDOW_MS);
    return {
      currentKey: `rate:create:${userId}:${minute}`,
      previousKey: `rate:create:${userId}:${minute - 1}`,
      elapsed: (now % WINDOW_MS) / WINDOW_MS,
    };
  }

  /** `including` is 1 when `current` already counts the request being decided. */
  private refuseOver(current: number, previous: number, elapsed: number, including: number): void {
    const limit = this.config.limitCreationsPerMinute;
    const used = previous * (1 - elapsed) + current - including;
    if (used + 1 <= limit) return;
    const retryAfter = secondsUntilFree(limit, current - including, previous, elapsed);
    throw new DomainError('rate_limited', `At most ${limit} job creations a minute; retry in ${retryAfter} s.`, {
      headers: { 'Retry-After': String(retryAfter) },
    });
  }
}

/** When the weighted count first leaves room for one more creation, in whole seconds (1..60). */
function secondsUntilFree(limit: number, current: number, previous: number, elapsed: number): number {
  let waitFraction: number;
  if (current + 1 <= limit && previous > 0) {
    // Room appears within this minute, as the previous minute's weight shrinks.
    waitFraction = 1 - (limit - 1 - current) / previous - elapsed;
  } else {
    // Not before the next minute, where this minute's count becomes the shrinking one.
    const next = current + 1 <= limit ? 0 : 1 - (limit - 1) / current;
    waitFraction = 1 - elapsed + Math.max(0, next);
  }
  return Math.min(60, Math.max(1, Math.ceil(waitFraction * 60)));
}
