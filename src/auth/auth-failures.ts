import { isIPv4, isIPv6 } from 'node:net';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

/** A client's window opens with its first failure and lasts a minute. */
const WINDOW_SECONDS = 60;

/** rate-limiter-flexible's in-memory block, public on its store limiters but missing from its type declarations. */
type WithInMemoryBlock = RateLimiterRedis & { getInMemoryBlockMsBeforeExpire(rlKey: string): number };

/**
 * Failed authentications per client address, counted in Redis so every API replica shares one count. A
 * client that used up AUTH_FAILURES_PER_MINUTE is refused before its key is looked at, valid or not, until
 * the minute that began with its first failure is over. A success does not reset the count: otherwise one
 * valid key would let its holder guess others without limit.
 *
 * Only failures touch Redis: each replica remembers the addresses its own failures found over the limit
 * (the limiter's in-memory block), so the requests of well-behaved clients (polling, mostly) cost no round trip.
 * Across N replicas an attacker gets at most N extra guesses before every replica refuses it.
 *
 * The count is a safeguard, not a gate: while Redis is unreachable, requests are authenticated as usual.
 */
@Injectable()
export class AuthFailureLimit {
  private readonly logger = new Logger(AuthFailureLimit.name);
  private redisDown = false;
  private readonly failures: WithInMemoryBlock;

  constructor(@Inject(REDIS) redis: Redis, config: AppConfig) {
    this.failures = new RateLimiterRedis({
      storeClient: redis,
      keyPrefix: 'auth:failures',
      points: config.authFailuresPerMinute,
      duration: WINDOW_SECONDS,
      inMemoryBlockOnConsumed: config.authFailuresPerMinute,
    }) as WithInMemoryBlock;
  }

  /** Throws 429 `rate_limited` when the client has no failures left this minute. */
  assertAllowed(clientIp: string | undefined): void {
    const key = this.failures.getKey(clientOf(clientIp ?? 'unknown'));
    const remainingMs = this.failures.getInMemoryBlockMsBeforeExpire(key);
    if (remainingMs <= 0) return;
    const retryAfter = Math.ceil(remainingMs / 1000);
    throw new DomainError(
      'rate_limited',
      `Too many failed authentications from this address; retry in ${retryAfter} s.`,
      { headers: { 'Retry-After': String(retryAfter) } },
    );
  }

  async recordFailure(clientIp: string | undefined): Promise<void> {
    const client = clientOf(clientIp ?? 'unknown');
    // Over the limit (failures counted by other replicas too) is an answer like any other: the block is set.
    await this.failOpen(() =>
      this.failures.consume(client).catch((refused: unknown) => {
        if (refused instanceof RateLimiterRes) return refused;
        throw refused;
      }),
    );
  }

  /** Runs a Redis command, or logs (once per outage) that Redis does not answer. */
  private async failOpen(command: () => Promise<unknown>): Promise<void> {
    try {
      await command();
      if (this.redisDown) this.logger.log('Redis is reachable again: failed authentications are counted again');
      this.redisDown = false;
    } catch (error) {
      if (!this.redisDown) {
        this.logger.warn(
          `Redis is unreachable (${error instanceof Error ? error.message : String(error)}): ` +
            'failed authentications are not counted or limited until it is back',
        );
      }
      this.redisDown = true;
    }
  }
}

/**
 * The unit a client is counted by: an IPv4 address, or the /64 network of an IPv6 address, since one
 * subscriber usually holds a whole /64 and could otherwise take a fresh address for every few guesses.
 */
export function clientOf(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1];
  if (isIPv4(ip) || !isIPv6(ip)) return ip;
  const [head, tail = ''] = ip.toLowerCase().split('%')[0].split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = ip.includes('::') ? (tail === '' ? [] : tail.split(':')) : [];
  const groups = [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  return `${groups
    .slice(0, 4)
    .map((group) => group.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}
