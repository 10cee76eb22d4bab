import { setTimeout as sleep } from 'node:timers/promises';
import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { REDIS } from '../redis/redis.module.js';
import { takeRound } from './round-lock.js';

/**
 * Items removed per round trip: each batch is one read and one delete of a few hundred rows, so the counts rows
 * a delete locks (`history_counts`, shared with the jobs ending meanwhile) are held only briefly.
 */
const BATCH = 200;

/**
 * Removes final items HISTORY_RETENTION after they ended, with their files, as their users' deletes would
 * (`JobLifecycle.expire`). Every RETENTION_SWEEP_INTERVAL_MS one worker sweeps (a Redis lock; the others skip that
 * round), batch after batch until nothing more is due or its round is over; the rest waits for the next round.
 * After each batch the sweep rests as long as the batch took: a backlog (the first day with retention on, say) is
 * removed at half the speed it could be, and the jobs beside it keep at least half of the worker's time.
 */
@Injectable()
export class RetentionSweep implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(RetentionSweep.name);
  private timer?: NodeJS.Timeout;
  private sweeping?: Promise<void>;
  private stopping = false;

  constructor(
    private readonly lifecycle: JobLifecycle,
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  onApplicationBootstrap(): void {
    if (this.config.historyRetentionMs === undefined) return;
    this.timer = setInterval(() => void this.tick(), this.config.retentionSweepIntervalMs);
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    this.stopping = true;
    await this.sweeping;
  }

  private async tick(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = this.sweep()
      .then(() => undefined)
      .catch((error: unknown) => this.logger.warn({ err: error }, 'retention sweep failed'))
      .finally(() => (this.sweeping = undefined));
    await this.sweeping;
  }

  /** One round, if no other worker holds it; resolves how many items were removed. */
  async sweep(): Promise<number> {
    const retentionMs = this.config.historyRetentionMs;
    if (retentionMs === undefined) return 0;
    // The round ends with its lock: past it, another worker may start the next one.
    const roundEnd = await takeRound(this.redis, 'retention:lock', this.config.retentionSweepIntervalMs);
    if (roundEnd === undefined) return 0;
    let removed = 0;
    let batch: number;
    do {
      const started = performance.now();
      batch = await this.lifecycle.expire(retentionMs, BATCH);
      removed += batch;
      if (batch === BATCH) await sleep(performance.now() - started);
    } while (batch === BATCH && !this.stopping && Date.now() < roundEnd);
    if (removed > 0) this.logger.log({ removed }, 'removed items past their retention');
    return removed;
  }
}
