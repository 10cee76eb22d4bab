import type { JobOptions } from 'bull';
import type { AppConfig } from '../config/config.js';

/** Queue, job name and payload in one place: `JobQueue` queues and delivers them. */
export const GENERATION_QUEUE = 'generation';
export const GENERATE_JOB = 'generate';

/** Everything else the worker needs is on the history item row, which is the source of truth. */
export interface GenerateJobData {
  historyItemId: string;
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
