import { EventEmitter } from 'node:events';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

/** How often a job waiting for a slot tries again, unless a slot is freed in its own process first. */
const RETRY_INTERVAL_MS = 20;

/**
 * Slots of each remote engine, counted across every worker process (a GPU serves one or two jobs at a time): a Redis
 * semaphore per engine (redis-semaphore). A slot is a lease renewed while its job runs, so a crashed worker's slot is
 * free once JOB_LOCK_MS has passed, as its queue lock is. The slot is named after the job: a second run of the same job
 * (its queue lock lapsed) shares the first run's slot rather than taking another.
 */
@Injectable()
export class EngineSlots {
  private readonly logger = new Logger(EngineSlots.name);
  /** Slots freed in this process: a waiter here tries at once instead of at its next interval. */
  private readonly freed = new EventEmitter().setMaxListeners(0);

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  /**
   * Resolves once the job holds a slot of `engine` (at most `concurrency` held at once), with the function that frees
   * it; rejects with the signal's reason if it fires first.
   */
  async acquire(engine: string, concurrency: number, jobId: string, signal: AbortSignal): Promise<() => Promise<void>> {
    const key = `engine-slots:${engine}`;
    const options = {
      identifier: jobId,
      lockTimeout: this.config.jobLockMs,
      refreshInterval: Math.max(100, Math.floor(this.config.jobLockMs / 3)),
      onLockLost: (error: Error) =>
        this.logger.warn({ err: error, id: jobId, engine }, 'an engine slot lapsed while its job ran'),
    };
    const shared = new Semaphore(this.redis, key, concurrency, { ...options, acquiredExternally: true });
    const own = new Semaphore(this.redis, key, concurrency, options);
    let held: Semaphore | undefined;
    while (!held) {
      signal.throwIfAborted();
      if (await shared.tryAcquire()) held = shared;
      else if (await own.tryAcquire()) held = own;
      else await this.freedOrRetry(engine, signal);
    }
    const slot = held;
    return async () => {
      await slot
        .release()
        .catch((error: unknown) => this.logger.warn({ err: error, id: jobId }, 'a slot was not freed'));
      this.freed.emit(engine);
    };
  }

  private freedOrRetry(engine: string, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.freed.off(engine, done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, RETRY_INTERVAL_MS);
      this.freed.once(engine, done);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}
