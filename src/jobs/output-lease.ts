import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import { REDIS } from '../redis/redis.module.js';

/** How long the lease outlives a writer that stopped renewing it (a killed worker); renewed every third of it. */
const LEASE_MS = 30_000;

/**
 * The right to write one item's outputs, held by one run of its job at a time across workers (a Redis mutex that its
 * holder renews). Two runs of the same job (a queue lock that lapsed) thus write and commit one after the other: the
 * second finds the item complete and writes nothing, instead of rewriting the files of a complete item. No database
 * lock or transaction is held while storage answers.
 */
@Injectable()
export class OutputLease {
  private readonly logger = new Logger(OutputLease.name);

  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  /** Runs `work` holding the item's lease; waits for another run's, which lapses within LEASE_MS of its death. */
  async whileHeld<T>(itemId: string, work: () => Promise<T>): Promise<T> {
    const mutex = new Mutex(this.redis, `output-writes:${itemId}`, {
      lockTimeout: LEASE_MS,
      refreshInterval: LEASE_MS / 3,
      acquireTimeout: LEASE_MS * 2,
      retryInterval: 100,
      // The outcome is still decided by the status-guarded update: a lost lease (Redis unreachable for LEASE_MS) only
      // lets a second run of the job write the same files at the same time.
      onLockLost: (error) => this.logger.warn({ id: itemId, err: error.message }, 'lost the lease on writing outputs'),
    });
    await mutex.acquire();
    try {
      return await work();
    } finally {
      // Lapses on its own when Redis cannot be told.
      await mutex.release().catch(() => {});
    }
  }
}
