import { setTimeout as sleep } from 'node:timers/promises';
import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { idempotencyKeysOf } from '../generation/idempotency.js';
import { creationCountersOf } from '../generation/limits.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { StoredFiles } from '../files/stored-files.js';
import { JobQueue } from '../queue/job-queue.js';
import { REDIS } from '../redis/redis.module.js';
import { type UserHoldings, UserRepository, type UserRow } from '../users/user.repository.js';
import { engineRunKey, laterRunsKey } from '../jobs/engine-runs.js';
import { EngineSlotQueue } from '../jobs/engine-slot-queue.js';

/** Items taken per round of a removal. */
const BATCH = 100;
/** How often a removal looks again whether a worker still runs one of the user's canceled jobs. */
const POLL_MS = 200;

/** A user and what removing them takes along. */
export interface RemovalPlan {
  user: UserRow;
  holdings: UserHoldings;
}

/** What a removal took along, besides the user. */
export interface Removed {
  keys: number;
  secrets: number;
  items: number;
  /** Pending items among them, canceled before they were deleted. */
  canceled: number;
  /** Redis keys of the user's own (creation counters, idempotency keys) and of their items' runs. */
  redisKeys: number;
  /** Stored files (`POST /files`), with their bytes. */
  storedFiles: number;
}

/**
 * Removes a user and everything of theirs (`igs users delete`): keys first, so that no new request of theirs gets in,
 * then each item as the user's own delete removes it (pending jobs canceled first, through the lifecycle), then their
 * keys in Redis and their stored files, last the user row with their webhook secret. Every step can be repeated: a removal cut short is
 * finished by running it again.
 */
@Injectable()
export class UserRemoval {
  constructor(
    private readonly users: UserRepository,
    private readonly items: HistoryRepository,
    private readonly lifecycle: JobLifecycle,
    private readonly jobs: JobQueue,
    private readonly slots: EngineSlotQueue,
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
    private readonly files: StoredFiles,
  ) {}

  /** What removing the user named `name` would take along; undefined when there is no such user. */
  async plan(name: string): Promise<RemovalPlan | undefined> {
    const user = await this.users.findByName(name);
    return user && { user, holdings: await this.users.holdingsOf(user.id) };
  }

  async remove({ user, holdings }: RemovalPlan): Promise<Removed> {
    const removed: Removed = {
      keys: holdings.keys,
      secrets: holdings.secrets,
      items: 0,
      canceled: 0,
      redisKeys: 0,
      storedFiles: 0,
    };
    await this.users.revokeKeysOf(user.id);
    // Every API process forgets a revoked key within AUTH_CACHE_TTL_MS: after that no new request of theirs gets in.
    await sleep(this.config.authCacheTtlMs);
    for (;;) {
      const batch = await this.items.someOf(user.id, BATCH);
      if (batch.length === 0) {
        // The user's own keys in Redis go while their row is still there: a removal cut short here (Redis unreachable)
        // is finished by running it again, which finds the user by that row.
        removed.redisKeys += await this.deleteMatching(`${creationCountersOf(user.id)}*`);
        removed.redisKeys += await this.deleteMatching(`${idempotencyKeysOf(user.id)}*`);
        // Their bytes first, then the rows: the user row's removal would drop the rows alone, leaving bytes to a sweep.
        let files: number;
        do {
          files = await this.files.removeSome(BATCH, user.id);
          removed.storedFiles += files;
        } while (files === BATCH);
        if (await this.users.deleteIfNoItems(user.id)) break;
        continue;
      }
      for (const item of batch) {
        if (item.status === 'pending' && (await this.lifecycle.cancel(user.id, item.id)) === 'canceled') {
          removed.canceled++;
        }
      }
      const ids = batch.map((item) => item.id);
      await this.untilNoWorkerRuns(ids);
      // Each as the user's own DELETE: with its files, its queue records and webhook message, its progress.
      for (const id of ids) if (await this.lifecycle.delete(user.id, id)) removed.items++;
      removed.redisKeys += await this.forgetRuns(ids);
    }
    return removed;
  }

  /**
   * Waits until no worker runs any of these jobs: a canceled job's worker stops it and ends the run, and only then can
   * the job's record leave the queue. A worker that died holding one lets go when its lock expires.
   */
  private async untilNoWorkerRuns(ids: string[]): Promise<void> {
    const deadline = Date.now() + this.config.engineTimeoutMs + this.config.jobLockMs + this.config.jobStalledCheckMs;
    for (;;) {
      const states = await Promise.all(ids.map((id) => this.jobs.stateOf(id)));
      const running = ids.filter((_id, index) => states[index] === 'active');
      if (running.length === 0) return;
      if (Date.now() > deadline) {
        throw new Error(`a worker still runs job ${running[0]}; run the command again once it has stopped`);
      }
      await sleep(POLL_MS);
    }
  }

  /** Deletes what the runs of these jobs left in Redis beyond what a delete takes: remote run ids, engine slots. */
  private async forgetRuns(ids: string[]): Promise<number> {
    const keys = ids.flatMap((id) => [engineRunKey(id), laterRunsKey(id)]);
    return (await this.redis.del(...keys)) + (await this.slots.forget(ids));
  }

  private async deleteMatching(pattern: string): Promise<number> {
    const keys = await this.keysMatching(pattern);
    return keys.length === 0 ? 0 : this.redis.del(...keys);
  }

  /** The service's keys matching `pattern`, named as its connection names them (without REDIS_PREFIX). */
  private async keysMatching(pattern: string): Promise<string[]> {
    const prefix = `${this.config.redisPrefix}:`;
    const found: string[] = [];
    let cursor = '0';
    do {
      // SCAN's pattern and answers are not prefixed by the connection: the names are whole.
      const [next, keys] = await this.redis.scan(cursor, 'MATCH', `${prefix}${pattern}`, 'COUNT', 1000);
      found.push(...keys.map((key) => key.slice(prefix.length)));
      cursor = next;
    } while (cursor !== '0');
    return found;
  }
}
