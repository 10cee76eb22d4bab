import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { Metrics } from '../metrics/metrics.js';
import { JobQueue } from '../queue/job-queue.js';
import { WebhookQueue } from '../queue/webhook-queue.js';
import { REDIS } from '../redis/redis.module.js';
import { takeRound } from './round-lock.js';

/** An item this young may still be between its insert and its enqueue in the API. */
const ORPHAN_GRACE_SECONDS = 10;
const SWEEP_BATCH = 500;

/**
 * Keeps the promise that every accepted job ends `complete` or `error`: pending items without a queued
 * job are queued again, and items pending past JOB_DEADLINE_MS end as `timeout`. One worker sweeps at a
 * time (a Redis lock); the others skip that round.
 */
@Injectable()
export class Reconciler implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(Reconciler.name);
  private timer?: NodeJS.Timeout;
  private sweeping?: Promise<void>;

  constructor(
    private readonly items: HistoryRepository,
    private readonly queue: JobQueue,
    private readonly webhooks: WebhookQueue,
    @Inject(REDIS) private readonly redis: Redis,
    private readonly lifecycle: JobLifecycle,
    private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  onApplicationBootstrap(): void {
    this.timer = setInterval(() => void this.tick(), this.config.reconcileIntervalMs);
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping;
  }

  private async tick(): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = this.sweep()
      .then(() => undefined)
      .catch((error: unknown) => this.logger.warn({ err: error }, 'reconciliation sweep failed'))
      .finally(() => (this.sweeping = undefined));
    await this.sweeping;
  }

  async sweep(): Promise<{ requeued: number; timedOut: number }> {
    if ((await takeRound(this.redis, 'reconciler:lock', this.config.reconcileIntervalMs)) === undefined) {
      return { requeued: 0, timedOut: 0 };
    }
    const timedOut = await this.expireOverdue();
    const orphans = await this.requeueOrphans();
    this.metrics.countReconciled('requeue', orphans);
    const webhooks = await this.requeueWebhooks();
    this.metrics.countReconciled('webhook', webhooks);
    const requeued = orphans + webhooks;
    if (timedOut + requeued > 0) this.logger.log({ timedOut, requeued }, 'reconciled pending jobs');
    return { requeued, timedOut };
  }

  private async expireOverdue(): Promise<number> {
    let count = 0;
    for (const id of await this.items.pendingOlderThan(this.config.jobDeadlineMs / 1000, SWEEP_BATCH)) {
      if (await this.lifecycle.timeOut(id)) {
        count++;
        // Counted as each item ends: a sweep that fails halfway still counts the items it ended.
        this.metrics.countReconciled('timeout', 1);
      }
    }
    return count;
  }

  /** Webhook messages of ended items that never reached the queue (Redis was down when their job ended). */
  private async requeueWebhooks(): Promise<number> {
    const items = await this.items.awaitingWebhook(ORPHAN_GRACE_SECONDS, SWEEP_BATCH);
    for (const { id, status } of items) {
      const type = status === 'complete' ? 'generation.completed' : 'generation.failed';
      await this.webhooks.enqueue({ historyItemId: id, type });
    }
    return items.length;
  }

  private async requeueOrphans(): Promise<number> {
    let count = 0;
    // An item past its deadline is never run again, only ended `timeout`: one that passed it since expireOverdue read
    // the items (or was inserted already past it) is left to the next sweep's expireOverdue.
    const deadlineSeconds = this.config.jobDeadlineMs / 1000;
    for (const id of await this.items.pendingOlderThan(ORPHAN_GRACE_SECONDS, SWEEP_BATCH, deadlineSeconds)) {
      const state = await this.queue.stateOf(id);
      // Gone from Redis (lost, evicted), or ended without its row being updated: queue it again. A failed job whose
      // item is still pending could not write its outcome, so the database was down at its last attempt, and its
      // attempts may all have failed on the database rather than the engine: ending it as engine_failed would blame
      // the engine for an outage. Run again, a job whose engine really fails ends as error; JOB_DEADLINE_MS bounds it.
      if (state === undefined || state === 'completed' || state === 'failed') {
        await this.lifecycle.requeue(id);
        count++;
      }
    }
    return count;
  }
}
