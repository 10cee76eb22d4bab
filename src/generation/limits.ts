import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

/** Job creations per user per minute, counted in Redis so every API replica shares one budget. */
@Injectable()
export class CreationRateLimit {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  async take(userId: string, now = Date.now()): Promise<void> {
    const minute = Math.floor(now / 60_000);
    const key = `rate:create:${userId}:${minute}`;
    const [[, count]] = (await this.redis.multi().incr(key).expire(key, 120).exec()) as [[null, number], unknown];
    if (count > this.config.limitCreationsPerMinute) {
      const retryAfter = Math.max(1, Math.ceil(((minute + 1) * 60_000 - now) / 1000));
      throw new DomainError(
        'rate_limited',
        `At most ${this.config.limitCreationsPerMinute} job creations a minute; retry in ${retryAfter} s.`,
        { headers: { 'Retry-After': String(retryAfter) } },
      );
    }
  }
}
