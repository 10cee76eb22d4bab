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

/**
 * One webhook message, sent (and re-sent) to the item's `webhook_url`: its final state, or, when its `webhook_events`
 * ask for them, its start and its progress.
 */
export interface WebhookJobData {
  historyItemId: string;
  type: 'generation.completed' | 'generation.failed' | 'generation.started' | 'generation.progress';
  /** The progress a `generation.progress` message tells of (0 to 1). */
  progress?: number;
  /** The trace of the job whose change the message announces; absent when nothing is traced. */
  trace?: TraceCarrier;
}

/**
 * A message's id, its queue job's id and (after `msg_`) its `webhook-id`: the same for one event, announced twice or
 * retried, and another for each event of an item. The final state's is the item id, as it was when that was the only
 * message: an item ends once. A start happens once; progress only rises, so its value in thousandths names it.
 */
export function webhookMessageId(message: Pick<WebhookJobData, 'historyItemId' | 'type' | 'progress'>): string {
  switch (message.type) {
    case 'generation.started':
      return `${message.historyItemId}_started`;
    case 'generation.progress':
      return `${message.historyItemId}_progress_${Math.round((message.progress ?? 0) * 1000)}`;
    default:
      return message.historyItemId;
  }
}

export function webhookJobOptions(config: AppConfig, messageId: string): JobOptions {
  return {
    jobId: messageId,
    attempts: config.webhookRetryDelaysMs.length + 1,
    backoff: { type: WEBHOOK_BACKOFF },
    removeOnComplete: { age: 3600, count: 1000 },
    removeOnFail: { age: 24 * 3600, count: 5000 },
  };
}
