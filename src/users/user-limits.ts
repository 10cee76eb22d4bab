import { Injectable } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { AppConfig } from '../config/config.js';
import { UserRepository } from './user.repository.js';

/** A user's limits in effect: their own (`igs limits set`) where set, the service's defaults elsewhere. */
export interface Limits {
  maxPending: number;
  creationsPerMinute: number;
  concurrentUploads: number;
  eventStreams: number;
  heldRequests: number;
}

/**
 * How long a process keeps a user's limits: a change made with `igs limits` applies in every process within 10 s,
 * counted from the change, so the cached value lives a little less, leaving room for the read that fetched it.
 */
const LIMITS_TTL_MS = 9_000;
/** Users whose limits a process keeps at once; the least recently used go first. */
const LIMITS_MAX_USERS = 10_000;

/** Each user's limits, read from their `users` row at most once per LIMITS_TTL_MS per process. */
@Injectable()
export class UserLimits {
  private readonly cache: LRUCache<string, Limits>;

  constructor(users: UserRepository, config: AppConfig) {
    this.cache = new LRUCache<string, Limits>({
      max: LIMITS_MAX_USERS,
      ttl: LIMITS_TTL_MS,
      fetchMethod: async (userId) => {
        const own = await users.limitsOf(userId);
        return {
          maxPending: own?.maxPending ?? config.limitMaxPending,
          creationsPerMinute: own?.creationsPerMinute ?? config.limitCreationsPerMinute,
          concurrentUploads: own?.concurrentUploads ?? config.limitConcurrentUploads,
          eventStreams: own?.eventStreams ?? config.limitEventStreams,
          heldRequests: own?.heldRequests ?? config.limitHeldRequests,
        };
      },
    });
  }

  async of(userId: string): Promise<Limits> {
    return (await this.cache.fetch(userId))!;
  }
}
