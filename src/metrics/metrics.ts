import { Injectable } from '@nestjs/common';
import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';
import type { components } from '../generated/openapi.js';

/** How a job ended for good: `complete`, or the error code its item records. */
export type JobOutcome = 'complete' | NonNullable<components['schemas']['HistoryItem']['error']>['code'];

/** How one processing attempt ended: its result stored, thrown away (the item was deleted or ended), or failed. */
export type AttemptResult = 'complete' | 'dropped' | 'failed';

/** What the reconciler did to an item: ended it `timeout`, queued its job again, or queued its webhook message. */
export type ReconcilerAction = 'timeout' | 'requeue' | 'webhook';

/** From a fast local pipeline to a remote model hitting ENGINE_TIMEOUT_MS (120 s) and JOB_DEADLINE_MS (15 min). */
const JOB_SECONDS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900];

/**
 * The service's Prometheus metrics, in a registry of its own. Every label has a small, fixed set of values
 * (route templates, tools, outcomes), never an id: one series per id would grow without end.
 */
@Injectable()
export class Metrics {
  readonly registry = new Registry();

  private readonly httpDuration = new Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP requests by method, route template and status, from arrival to the last byte of the answer',
    labelNames: ['method', 'route', 'status_code'] as const,
    registers: [this.registry],
  });

  private readonly jobs = new Counter({
    name: 'igs_jobs_total',
    help: 'Jobs that reached a final status, by tool and outcome: complete, or the error code of the item',
    labelNames: ['tool', 'outcome'] as const,
    registers: [this.registry],
  });

  private readonly jobDuration = new Histogram({
    name: 'igs_job_duration_seconds',
    help: 'Processing attempts by tool and result (complete, dropped, failed): inputs read, engine, outputs stored',
    labelNames: ['tool', 'result'] as const,
    buckets: JOB_SECONDS,
    registers: [this.registry],
  });

  private readonly queueWait = new Histogram({
    name: 'igs_job_queue_wait_seconds',
    help: 'Time from a job being queued to a worker taking it up the first time, by tool',
    labelNames: ['tool'] as const,
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600],
    registers: [this.registry],
  });

  private readonly webhookDeliveries = new Counter({
    name: 'igs_webhook_deliveries_total',
    help: 'Webhook delivery attempts by outcome: delivered (2xx), retried, failed (gave up: retries spent or refused address), gone (410)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  private readonly webhookLatency = new Histogram({
    name: 'igs_webhook_delivery_seconds',
    help: 'From a job ending to its webhook being delivered (the receiver answering 2xx), retries included',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300, 1800, 7200, 86_400],
    registers: [this.registry],
  });

  private readonly engineDuration = new Histogram({
    name: 'igs_engine_duration_seconds',
    help: 'Engine calls, successful or not, by tool and engine kind (local, cog); local ones include encoding the outputs',
    labelNames: ['tool', 'engine'] as const,
    buckets: JOB_SECONDS,
    registers: [this.registry],
  });

  private readonly reconciled = new Counter({
    name: 'igs_reconciler_items_total',
    help: 'Items the reconciler acted on, by action: timeout (pending past JOB_DEADLINE_MS, ended), requeue (pending with no queued job), webhook (ended, its webhook never queued)',
    labelNames: ['action'] as const,
    registers: [this.registry],
  });

  private readonly retentionFailures = new Counter({
    name: 'igs_retention_failures_total',
    help: 'Expired items whose files retention could not remove: their rows went, the store sweeps remove the files later',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
    this.retentionFailures.inc(0);
    // Present at 0 from the start, so the first timeout shows as an increase rather than as a new series.
    for (const action of ['timeout', 'requeue', 'webhook'] as const) this.reconciled.inc({ action }, 0);
  }

  observeHttp(method: string, route: string, statusCode: number, seconds: number): void {
    this.httpDuration.observe({ method, route, status_code: statusCode }, seconds);
  }

  countWebhookAttempt(outcome: 'delivered' | 'retried' | 'failed' | 'gone', sinceEndedSeconds?: number): void {
    this.webhookDeliveries.inc({ outcome });
    if (outcome === 'delivered' && sinceEndedSeconds !== undefined) this.webhookLatency.observe(sinceEndedSeconds);
  }

  countJobOutcome(tool: string, outcome: JobOutcome): void {
    this.jobs.inc({ tool, outcome });
  }

  observeQueueWait(tool: string, seconds: number): void {
    this.queueWait.observe({ tool }, Math.max(0, seconds));
  }

  countReconciled(action: ReconcilerAction, items: number): void {
    this.reconciled.inc({ action }, items);
  }

  countRetentionFailures(items: number): void {
    this.retentionFailures.inc(items);
  }

  /** Starts timing an attempt; call the result with how it ended. */
  startAttempt(tool: string): (result: AttemptResult) => void {
    const end = this.jobDuration.startTimer({ tool });
    return (result) => end({ result });
  }

  /** Times one engine call, whether it succeeds or throws. */
  async timeEngine<T>(tool: string, engine: string, call: () => Promise<T>): Promise<T> {
    const end = this.engineDuration.startTimer({ tool, engine });
    try {
      return await call();
    } finally {
      end();
    }
  }
}
