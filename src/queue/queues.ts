import type { JobOptions } from 'bull';
import type { TraceCarrier } from '../common/tracing.js';
import type { AppConfig } from '../config/config.js';

/** Queues, job names and payloads in one place: `JobQueue` and `WebhookQueue` queue and deliver them. */
export const GENERATION_QUEUE = 'generation';
export const GENERATE_JOB = 'generate';

/** Everything else the worker needs is on the history item row, which is the source of truth. */
export interface GenerateJobData {
  historyItemId: string;
  /** The trace of the request that queued the job, continued by the worker; absent when nothing is traced. */
  trace?: TraceCarrier;
}

/**
 * The Bull job id is the history item id, so adding a job twice (a retried request, the reconciler
 * racing the API) never queues the same item twice.
 */
export function generateJobOptions(config: AppConfig, historyItemId: string): JobOptions {
  return {
    jobId: historyItemId,
    attempts: config.jobAttempts,
    backoff: { type: 'exponential', delay: config.jobBackoffMs },
    // Finished jobs are history in PostgreSQL already; Redis keeps only a short tail for debugging.
    removeOnComplete: { age: 3600, count: 1000 },
    removeOnFail: { age: 24 * 3600, count: 5000 },
  };
}

export const WEBHOOK_QUEUE = 'webhooks';
export const DELIVER_JOB = 'deliver';
/** The backoff strategy (see QueueModule) that waits WEBHOOK_RETRY_DELAYS_MS between a webhook's attempts. */
export const WEBHOOK_BACKOFF = 'webhook-schedule';

/** One webhook message: the final state of one item, sent (and re-sent) to its `webhook_url`. */
export interface WebhookJobData {
  historyItemId: string;
  type: 'generation.completed' | 'generation.failed';
  /** The trace of the job whose end the message announces; absent when nothing is traced. */
  trace?: TraceCarrier;
}

/** One message per item (an item ends once), so the item id is the job id: announcing twice queues it once. */
export function webhookJobOptions(config: AppConfig, historyItemId: string): JobOptions {
  return {
    jobId: historyItemId,
    attempts: config.webhookRetryDelaysMs.length + 1,
    backoff: { type: WEBHOOK_BACKOFF },
    removeOnComplete: { age: 3600, count: 1000 },
    removeOnFail: { age: 24 * 3600, count: 5000 },
  };
}
