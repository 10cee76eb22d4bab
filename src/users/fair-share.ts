import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { Inject, Injectable, Logger, type OnApplicationShutdown, Optional } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { count } from '../common/count.js';
import { DomainError } from '../common/problem.js';
import { REDIS } from '../redis/redis.module.js';
import { type Limits, UserLimits } from './user-limits.js';

/** What a user may hold only so many of at once, in every API process together. */
export type Share = 'uploads' | 'streams' | 'held';

const SHARES: Record<Share, { limit: keyof Limits; refusal: (limit: number) => string }> = {
  uploads: {
    limit: 'concurrentUploads',
    refusal: (limit) => `At most ${count(limit, 'upload')} may be in progress at once; retry when one has ended.`,
  },
  streams: {
    limit: 'eventStreams',
    refusal: (limit) => `At most ${count(limit, 'event stream')} may be open at once; close one first.`,
  },
  held: {
    limit: 'heldRequests',
    refusal: (limit) =>
      `At most ${count(limit, 'request')} may wait (Prefer: wait) at once; retry when one has been answered.`,
  },
};

/** What the keys of users' shares start with: a sorted set per user and share, `fair-share:<share>:<user id>`. */
export const FAIR_SHARE = 'fair-share:';

/**
 * How long a lease lasts unless renewed: what a crashed replica's requests go on counting for. Its holder renews it
 * three times as often, so a renewal or two may fail (Redis restarting) without the lease lapsing.
 */
const LEASE_MS = 30_000;

/** When a refused client may try again: nothing says when a held request ends, so a short wait, as for the pending. */
const RETRY_AFTER_SECONDS = '5';

/**
 * Takes a lease when fewer than ARGV[1] unexpired ones are held: KEYS[1] = the user's share; ARGV = limit, lease id,
 * lease length (ms). Each lease is a member scored by when it expires, on Redis's clock (replicas' clocks may
 * differ); expired ones (a crashed replica's) are dropped first. Returns 1 when taken, 0 when refused.
 */
const TAKE_LEASE = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`;

/**
 * Renews a process's leases of one share: KEYS[1] = the share; ARGV = lease length (ms), then the lease ids. A lease
 * Redis lost meanwhile (a restart without persistence) is added back: it is still held, and counts.
 */
const RENEW_LEASES = `
local time = redis.call('TIME')
local expires = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], expires, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 0
`;

interface LeaseCommands {
  takeLease(key: string, limit: number, id: string, leaseMs: number): Promise<number>;
  renewLeases(key: string, leaseMs: number, ...ids: string[]): Promise<number>;
}

/**
 * Each user's share of what holds a request open, at once, counted in Redis across every API replica: uploads in
 * progress, open event streams and held `Prefer: wait` requests. A request holds a lease from when it is let in until
 * its response closes, however that happens (answered, an error, the client going away, the process shutting down);
 * a replica that dies without giving its leases back stops renewing them, and they lapse after LEASE_MS.
 *
 * Hand-written rather than redis-semaphore (the engines' slots), which renews each lease on a timer of its own: its
 * renewal failing (Redis restarting) is an unhandled rejection that ends the process (swarthy/redis-semaphore#199), and
 * a replica with thousands of open streams would send thousands of renewals. Here one timer renews every lease this
 * process holds, a command per user and share. rate-limiter-flexible counts requests in windows of time, not requests
 * still open.
 */
@Injectable()
export class FairShare implements OnApplicationShutdown {
  private readonly logger = new Logger(FairShare.name);
  private readonly commands: LeaseCommands;
  /** The leases this process holds, by key: what each renewal renews. */
  private readonly held = new Map<string, Set<string>>();
  private readonly renewal: NodeJS.Timeout;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly limits: UserLimits,
    // Nothing provides it in the service, which gets the default; a test gives a short one, to see leases lapse.
    @Optional() private readonly leaseMs: number = LEASE_MS,
  ) {
    redis.defineCommand('takeLease', { numberOfKeys: 1, lua: TAKE_LEASE });
    redis.defineCommand('renewLeases', { numberOfKeys: 1, lua: RENEW_LEASES });
    this.commands = redis as unknown as LeaseCommands;
    this.renewal = setInterval(() => void this.renew(), Math.floor(leaseMs / 3)).unref();
  }

  /**
   * Lets the request `response` answers hold one of the user's `share`, or refuses it (429
   * `too_many_concurrent_requests`) when the user holds all of it. The share is given back when the response closes,
   * or earlier by calling the function returned (any number of times).
   */
  async take(userId: string, share: Share, response: ServerResponse): Promise<() => void> {
    const limit = (await this.limits.of(userId))[SHARES[share].limit];
    const key = `${FAIR_SHARE}${share}:${userId}`;
    const id = randomUUID();
    if ((await this.commands.takeLease(key, limit, id, this.leaseMs)) !== 1) {
      throw new DomainError('too_many_concurrent_requests', SHARES[share].refusal(limit), {
        headers: { 'Retry-After': RETRY_AFTER_SECONDS },
      });
    }
    let ended = false;
    const release = () => {
      if (ended) return;
      ended = true;
      response.off('close', release);
      this.release(key, id);
    };
    // The client may have gone while the lease was taken: its response closed already, and will not close again.
    if (response.closed) {
      release();
      return release;
    }
    let ids = this.held.get(key);
    if (!ids) this.held.set(key, (ids = new Set()));
    ids.add(id);
    response.once('close', release);
    return release;
  }

  onApplicationShutdown(): void {
    clearInterval(this.renewal);
  }

  /** Gives a lease back; if Redis cannot be told, the lease lapses, no longer renewed. */
  private release(key: string, id: string): void {
    const ids = this.held.get(key);
    ids?.delete(id);
    if (ids?.size === 0) this.held.delete(key);
    this.redis.zrem(key, id).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'a fair share lease was not given back; it lapses unrenewed');
    });
  }

  private async renew(): Promise<void> {
    const renewals = [...this.held].map(([key, ids]) => this.commands.renewLeases(key, this.leaseMs, ...ids));
    const failed = (await Promise.allSettled(renewals)).find((result) => result.status === 'rejected');
    if (failed)
      this.logger.warn({ err: failed.reason as unknown }, 'fair share leases were not renewed; the next round retries');
  }
}
