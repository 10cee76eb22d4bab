import { InjectQueue } from '@nestjs/bull';
import { Injectable } from '@nestjs/common';
import { SpanKind } from '@opentelemetry/api';
import type { Job, Queue } from 'bull';
import { currentTraceCarrier, inSpan } from '../common/tracing.js';
import { ServiceUnavailableError } from '../common/unavailable.js';
import { AppConfig } from '../config/config.js';
import { GENERATE_JOB, type GenerateJobData, GENERATION_QUEUE, generateJobOptions } from './queues.js';

/** Redis that does not answer within this long counts as down: the client gets 503, not a hang. */
const ENQUEUE_TIMEOUT_MS = 1500;

/** Where a generation job is in the queue; `undefined` when the queue has no job for the item. */
export type QueuedState = 'waiting' | 'delayed' | 'active' | 'completed' | 'failed' | 'paused' | 'stuck';

/** One delivery of a generation job to a worker. */
export interface Delivery {
  historyItemId: string;
  /** Earlier attempts of this job; 0 on its first. */
  attemptsMade: number;
  isLastAttempt: boolean;
  /** When the job was first queued (ms since the epoch). */
  queuedAt: number;
  /** Ends the job without further attempts, whatever its attempts left. */
  discard(): Promise<void>;
}

/**
 * The generation queue: the one class that speaks to Bull. The job id is the history item id, so queueing an item
 * twice (a retried request, the reconciler racing the API) queues it once.
 */
@Injectable()
export class JobQueue {
  constructor(
    @InjectQueue(GENERATION_QUEUE) private readonly queue: Queue<GenerateJobData>,
    private readonly config: AppConfig,
  ) {}

  /** Queues the item's job; a queue that fails or does not answer in time is `ServiceUnavailableError`. */
  async enqueue(historyItemId: string): Promise<void> {
    await addInTime(() => this.add(historyItemId));
  }

  /** Queues the item again after its job was lost or ended without recording an outcome. */
  async requeue(historyItemId: string): Promise<void> {
    await (await this.queue.getJob(historyItemId))?.remove();
    await this.add(historyItemId);
  }

  async stateOf(historyItemId: string): Promise<QueuedState | undefined> {
    const job = await this.queue.getJob(historyItemId);
    return job ? await job.getState() : undefined;
  }

  /**
   * Drops the item's job unless a worker is running it: a queued job never runs. Resolves false when a worker holds
   * it (its lock forbids removal), in which case that worker finds the item final and throws its result away.
   */
  drop(historyItemId: string): Promise<boolean> {
    return dropJob(this.queue, historyItemId);
  }

  /**
   * Runs `handler` for each delivered job, `concurrency` at a time. What the handler throws fails the attempt, and
   * Bull tries again after a backoff until the attempts run out.
   */
  process(concurrency: number, handler: (delivery: Delivery) => Promise<void>): void {
    void this.queue.process(GENERATE_JOB, concurrency, (job) =>
      inSpan(
        `process ${GENERATION_QUEUE}`,
        { kind: SpanKind.CONSUMER, attributes: jobAttributes(GENERATION_QUEUE, job), parent: job.data.trace },
        () => handler(deliveryOf(job)),
      ),
    );
  }

  /** Calls `listener` for each job whose last attempt failed, also one that never reached a handler (stalled). */
  onFinalFailure(listener: (historyItemId: string, error: Error) => void): void {
    this.queue.on('failed', (job: Job<GenerateJobData>, error: Error) => {
      if (job.attemptsMade >= (job.opts.attempts ?? 1)) listener(job.data.historyItemId, error);
    });
  }

  /** Job counts by state, for the queue depth metric. */
  counts(): Promise<Record<'waiting' | 'active' | 'delayed' | 'failed', number>> {
    return this.queue.getJobCounts();
  }

  /** Stops taking jobs; resolves once the running ones have finished. */
  close(): Promise<void> {
    return this.queue.close();
  }

  private async add(historyItemId: string): Promise<void> {
    await inSpan(
      `send ${GENERATION_QUEUE}`,
      { kind: SpanKind.PRODUCER, attributes: { ...queueAttributes(GENERATION_QUEUE), 'igs.item_id': historyItemId } },
      () =>
        this.queue.add(
          GENERATE_JOB,
          { historyItemId, trace: currentTraceCarrier() },
          generateJobOptions(this.config, historyItemId),
        ),
    );
  }
}

/** What a queueing or processing span says about its queue, per OpenTelemetry's messaging conventions. */
export function queueAttributes(queue: string): Record<string, string> {
  return { 'messaging.system': 'bull', 'messaging.destination.name': queue };
}

/** What a processing span says about the job: the item, and which attempt this is. */
export function jobAttributes(queue: string, job: Job<{ historyItemId: string }>): Record<string, string | number> {
  return { ...queueAttributes(queue), 'igs.item_id': job.data.historyItemId, 'igs.attempt': job.attemptsMade + 1 };
}

/** Removes the item's job if there is one; false when a worker holds it (its lock forbids removal). */
export async function dropJob(queue: Queue, historyItemId: string): Promise<boolean> {
  try {
    await (await queue.getJob(historyItemId))?.remove();
    return true;
  } catch {
    return false;
  }
}

/** Adds a job, or fails with `ServiceUnavailableError` when the queue fails or does not answer in time. */
export async function addInTime(add: () => Promise<unknown>): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ENQUEUE_TIMEOUT_MS} ms`)), ENQUEUE_TIMEOUT_MS);
  });
  try {
    await Promise.race([add(), timeout]);
  } catch (error) {
    throw new ServiceUnavailableError('queue', { cause: error });
  } finally {
    clearTimeout(timer);
  }
}

export function deliveryOf<T extends { historyItemId: string }>(job: Job<T>): Delivery {
  const attempts = job.opts.attempts ?? 1;
  return {
    historyItemId: job.data.historyItemId,
    attemptsMade: job.attemptsMade,
    isLastAttempt: job.attemptsMade + 1 >= attempts,
    queuedAt: job.timestamp,
    discard: () => job.discard(),
  };
}
