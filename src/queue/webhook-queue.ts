import { InjectQueue } from '@nestjs/bull';
import { Injectable } from '@nestjs/common';
import { SpanKind } from '@opentelemetry/api';
import type { Job, Queue } from 'bull';
import { currentTraceCarrier, inSpan } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import { addInTime, type Delivery, deliveryOf, dropJob, jobAttributes, queueAttributes } from './job-queue.js';
import { DELIVER_JOB, WEBHOOK_QUEUE, type WebhookJobData, webhookJobOptions, webhookMessageId } from './queues.js';

/** One delivery attempt of a webhook message. */
export interface WebhookDelivery extends Delivery {
  type: WebhookJobData['type'];
  progress: number | undefined;
  /** The message's id (`webhookMessageId`). */
  messageId: string;
}

/**
 * The webhook messages: queued in Redis like jobs, so a message survives restarts of every process and is retried on
 * its schedule (WEBHOOK_RETRY_DELAYS_MS) by whichever worker is up.
 */
@Injectable()
export class WebhookQueue {
  constructor(
    @InjectQueue(WEBHOOK_QUEUE) private readonly queue: Queue<WebhookJobData>,
    private readonly config: AppConfig,
  ) {}

  /** Queues a message in the active trace (the job's, when its end is announced), continued by its deliveries. */
  async enqueue(message: WebhookJobData): Promise<void> {
    await inSpan(
      `send ${WEBHOOK_QUEUE}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: { ...queueAttributes(WEBHOOK_QUEUE), 'igs.item_id': message.historyItemId },
      },
      () =>
        addInTime(() =>
          this.queue.add(
            DELIVER_JOB,
            { ...message, trace: currentTraceCarrier() },
            webhookJobOptions(this.config, webhookMessageId(message)),
          ),
        ),
    );
  }

  /**
   * Drops the item's final-state and start messages, queued or kept after their delivery; false when a worker is
   * delivering one just now. Its progress messages are dropped by their next attempt, which finds the item gone.
   */
  async drop(historyItemId: string): Promise<boolean> {
    const dropped = await Promise.all(
      (['generation.completed', 'generation.started'] as const).map((type) =>
        dropJob(this.queue, webhookMessageId({ historyItemId, type })),
      ),
    );
    return dropped.every(Boolean);
  }

  /** Runs `handler` for each attempt; what it throws is retried on the schedule until the attempts run out. */
  process(concurrency: number, handler: (delivery: WebhookDelivery) => Promise<void>): void {
    void this.queue.process(DELIVER_JOB, concurrency, (job: Job<WebhookJobData>) =>
      inSpan(
        `process ${WEBHOOK_QUEUE}`,
        { kind: SpanKind.CONSUMER, attributes: jobAttributes(WEBHOOK_QUEUE, job), parent: job.data.trace },
        () =>
          handler({
            ...deliveryOf(job),
            type: job.data.type,
            progress: job.data.progress,
            messageId: webhookMessageId(job.data),
          }),
      ),
    );
  }

  close(): Promise<void> {
    return this.queue.close();
  }
}
