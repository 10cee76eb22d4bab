import { isIPv4, isIPv6 } from 'node:net';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

const WINDOW_MS = 60_000;
/**
 * Bounds the memory a flood of addresses can take; past it the least recently refused are forgotten here (their
 * next failure finds them over the limit in Redis again).
 */
const MAX_REFUSED_ADDRESSES = 100_000;

/**
 * Failed authentications per client address, counted in Redis so every API replica shares one count. A
 * client that used up AUTH_FAILURES_PER_MINUTE is refused before its key is looked at, valid or not, until
 * the minute that began with its first failure is over. A success does not reset the count: otherwise one
 * valid key would let its holder guess others without limit.
 *
 * Only failures touch Redis: each replica remembers the addresses its own failures found over the limit,
 * so the requests of well-behaved clients (polling, mostly) cost no round trip. Across N replicas an
 * attacker gets at most N extra guesses before every replica refuses it.
 *
 * The count is a safeguard, not a gate: while Redis is unreachable, requests are authenticated as usual.
 */
@Injectable()
export class AuthFailureLimit {
  private readonly logger = new Logger(AuthFailureLimit.name);
  private redisDown = false;
  /** Refused addresses, each kept until its window ends. */
  private readonly refused = new LRUCache<string, true>({ max: MAX_REFUSED_ADDRESSES });

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  /** Throws 429 `rate_limited` when the client has no failures left this minute. */
  assertAllowed(clientIp: string | undefined): void {
    const client = clientOf(clientIp ?? 'unknown');
    const remainingMs = this.refused.getRemainingTTL(client);
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
    const key = `auth:failures:${client}`;
    // SET NX PX opens the window at the first failure (INCR keeps the expiry); Redis 6 lacks PEXPIRE NX.
    const results = await this.failOpen(() =>
      this.redis.multi().set(key, 0, 'PX', WINDOW_MS, 'NX').incr(key).pttl(key).exec(),
    );
    const failures = Number(results?.[1]?.[1] ?? 0);
    if (failures < this.config.authFailuresPerMinute) return;
    const remainingMs = Number(results?.[2]?.[1]);
    this.refused.set(client, true, { ttl: remainingMs > 0 ? remainingMs : WINDOW_MS });
  }

  /** Runs a Redis command, or logs (once per outage) and answers undefined when Redis does not. */
  private async failOpen<T>(command: () => Promise<T>): Promise<T | undefined> {
    try {
      const result = await command();
      if (this.redisDown) this.logger.log('Redis is reachable again: failed authentications are counted again');
      this.redisDown = false;
      return result;
    } catch (error) {
      if (!this.redisDown) {
        this.logger.warn(
          `Redis is unreachable (${error instanceof Error ? error.message : String(error)}): ` +
            'failed authentications are not counted or limited until it is back',
        );
      }
      this.redisDown = true;
      return undefined;
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
