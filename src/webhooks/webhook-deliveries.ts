import { Injectable, Logger, type OnApplicationBootstrap, type BeforeApplicationShutdown } from '@nestjs/common';
import { Webhook } from 'standardwebhooks';
import { AppConfig } from '../config/config.js';
import { HistoryItemDto, type ItemSettings } from '../jobs/history-item.dto.js';
import { MediaUrls } from '../media/media-urls.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobEvents } from '../jobs/job-events.js';
import { Metrics } from '../metrics/metrics.js';
import { type WebhookDelivery, WebhookQueue } from '../queue/webhook-queue.js';
import { postJson } from './webhook-sender.js';
import { WebhooksService } from './webhooks.service.js';

/** Webhook attempts one worker process makes at once: they mostly wait on receivers. */
const DELIVERY_CONCURRENCY = 16;
/** A running job's progress is sent at most this often (`webhook_events` with `progress`). */
const PROGRESS_INTERVAL_MS = 1000;
/**
 * A job that reported no progress for this long is forgotten: one canceled or deleted through another process ends
 * without this process hearing it (its end is announced where it was made).
 */
const PROGRESS_FORGET_MS = 600_000;

/** Per running job in this process: whether its webhook wants progress, and the pace it is sent at. */
interface ProgressSending {
  wanted: Promise<boolean>;
  sentAt: number;
  /** A progress held back until the interval is over, and its timer. */
  held?: number;
  timer?: NodeJS.Timeout;
}

/**
 * Webhooks, per API.md: when an item with a `webhook_url` becomes final, a message is queued (in the process that
 * ended it, once), and workers POST it, signed per Standard Webhooks, until the receiver answers 2xx, answers 410,
 * turns out to be a private address, or the retries run out. The item's `webhook` shows each attempt.
 */
@Injectable()
export class WebhookDeliveries implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(WebhookDeliveries.name);
  private readonly progressSending = new Map<string, ProgressSending>();

  private readonly itemSettings: ItemSettings;

  constructor(
    private readonly events: JobEvents,
    private readonly queue: WebhookQueue,
    private readonly items: HistoryRepository,
    private readonly webhooks: WebhooksService,
    private readonly metrics: Metrics,
    private readonly config: AppConfig,
    mediaUrls: MediaUrls,
  ) {
    this.itemSettings = { historyRetentionMs: config.historyRetentionMs, mediaUrls };
  }

  onApplicationBootstrap(): void {
    this.events.subscribe(async (event) => {
      if (event.kind === 'started') {
        const item = await this.items.findWithOwner(event.historyItemId);
        if (item?.webhookUrl && item.webhookEvents?.includes('started')) {
          await this.queue.enqueue({ historyItemId: event.historyItemId, type: 'generation.started' });
        }
        return;
      }
      if (event.kind !== 'completed' && event.kind !== 'failed') return;
      this.stopProgress(event.historyItemId);
      const type = event.kind === 'completed' ? 'generation.completed' : 'generation.failed';
      const item = await this.items.findWithOwner(event.historyItemId);
      if (item?.webhookUrl) await this.queue.enqueue({ historyItemId: event.historyItemId, type });
    });
    // Reported in the worker that runs the job, so this process holds the job's pace.
    this.events.subscribeProgress((event) => this.progressed(event.historyItemId, event.progress));
    if (this.config.runsWorker) this.queue.process(DELIVERY_CONCURRENCY, (delivery) => this.attempt(delivery));
  }

  async beforeApplicationShutdown(): Promise<void> {
    for (const id of [...this.progressSending.keys()]) this.stopProgress(id);
    if (this.config.runsWorker) await this.queue.close();
  }

  /**
   * Queues a `generation.progress` message for a job whose webhook asked for them (read once per job), at most one per
   * PROGRESS_INTERVAL_MS: one at once, and the latest of those that came meanwhile at the end of the interval.
   */
  private progressed(id: string, progress: number): void {
    let sending = this.progressSending.get(id);
    if (!sending) {
      for (const [other, state] of this.progressSending) {
        if (state.sentAt < Date.now() - PROGRESS_FORGET_MS && state.timer === undefined) this.stopProgress(other);
      }
      const wanted = this.items
        .findWithOwner(id)
        .then((item) => Boolean(item?.webhookUrl && item.webhookEvents?.includes('progress')));
      sending = { wanted, sentAt: -Infinity };
      this.progressSending.set(id, sending);
    }
    const state = sending;
    const send = async (value: number) => {
      state.sentAt = Date.now();
      if (await state.wanted) {
        await this.queue.enqueue({ historyItemId: id, type: 'generation.progress', progress: value });
      }
    };
    const wait = state.sentAt + PROGRESS_INTERVAL_MS - Date.now();
    if (wait <= 0 && state.timer === undefined) {
      void send(progress).catch((error: unknown) =>
        this.logger.warn({ err: error, id }, 'a progress message was lost'),
      );
      return;
    }
    state.held = progress;
    state.timer ??= setTimeout(
      () => {
        state.timer = undefined;
        const held = state.held;
        state.held = undefined;
        if (held !== undefined && this.progressSending.get(id) === state) {
          send(held).catch((error: unknown) => this.logger.warn({ err: error, id }, 'a progress message was lost'));
        }
      },
      Math.max(0, wait),
    ).unref();
  }

  /** The job ended: no progress of it is sent any more. */
  private stopProgress(id: string): void {
    clearTimeout(this.progressSending.get(id)?.timer);
    this.progressSending.delete(id);
  }

  /** One attempt; throws to have the queue retry it on the schedule. */
  private async attempt(delivery: WebhookDelivery): Promise<void> {
    const id = delivery.historyItemId;
    const item = await this.items.findWithOwner(id);
    if (delivery.type === 'generation.started' || delivery.type === 'generation.progress') {
      // Deleted or ended since: the final state's message tells more, and comes anyway.
      if (!item?.webhookUrl || item.status !== 'pending') return;
      return this.attemptUpdate(delivery, item);
    }
    // Deleted since, or already settled by an earlier run of this attempt.
    if (!item?.webhookUrl || item.webhookState !== 'pending') return;
    const body = JSON.stringify({
      type: delivery.type,
      timestamp: (item.completedAt ?? item.updatedAt).toISOString(),
      data: HistoryItemDto.from(item, this.itemSettings),
    });
    const messageId = `msg_${delivery.messageId}`;
    const result = await this.send(item.userId, item.webhookUrl, messageId, body);
    const status = result.kind === 'answered' ? result.status : null;
    if (status !== null && status >= 200 && status < 300) {
      await this.items.recordWebhookAttempt(id, 'delivered', status);
      const endedAt = (item.completedAt ?? item.updatedAt).getTime();
      this.metrics.countWebhookAttempt('delivered', (Date.now() - endedAt) / 1000);
      return;
    }
    const why = result.kind === 'answered' ? `answered ${result.status}` : result.reason;
    if (status === 410 || result.kind === 'refused' || delivery.isLastAttempt) {
      await this.items.recordWebhookAttempt(id, 'failed', status);
      this.metrics.countWebhookAttempt(status === 410 ? 'gone' : 'failed');
      this.logger.warn({ id, attempt: delivery.attemptsMade + 1, why }, 'webhook not delivered: given up');
      if (!delivery.isLastAttempt) await delivery.discard();
      throw new Error(`webhook not delivered: ${why}`);
    }
    await this.items.recordWebhookAttempt(id, 'pending', status);
    this.metrics.countWebhookAttempt('retried');
    throw new Error(`webhook attempt ${delivery.attemptsMade + 1} failed: ${why}`);
  }

  /**
   * One attempt of a start or progress message: signed, sent and retried as the final state's, but the item's
   * `webhook` field (which tells of the final state's delivery) is left as it is.
   */
  private async attemptUpdate(
    delivery: WebhookDelivery,
    item: NonNullable<Awaited<ReturnType<HistoryRepository['findWithOwner']>>>,
  ): Promise<void> {
    const started = delivery.type === 'generation.started';
    const body = JSON.stringify({
      type: delivery.type,
      timestamp: (started && item.startedAt ? item.startedAt : new Date(delivery.queuedAt)).toISOString(),
      data: HistoryItemDto.from(item, this.itemSettings, delivery.progress),
    });
    const result = await this.send(item.userId, item.webhookUrl!, `msg_${delivery.messageId}`, body);
    const status = result.kind === 'answered' ? result.status : null;
    if (status !== null && status >= 200 && status < 300) return;
    const why = result.kind === 'answered' ? `answered ${result.status}` : result.reason;
    if (status === 410 || result.kind === 'refused') {
      if (!delivery.isLastAttempt) await delivery.discard();
      throw new Error(`webhook not delivered: ${why}`);
    }
    throw new Error(`webhook attempt ${delivery.attemptsMade + 1} failed: ${why}`);
  }

  /** POSTs a message signed with each of the user's signing secrets (two for a day after a rotation). */
  private async send(userId: string, url: string, messageId: string, body: string) {
    const signedAt = new Date();
    const signatures = (await this.webhooks.signingSecrets(userId)).map((secret) =>
      new Webhook(secret).sign(messageId, signedAt, body),
    );
    return postJson(
      url,
      {
        'webhook-id': messageId,
        'webhook-timestamp': String(Math.floor(signedAt.getTime() / 1000)),
        'webhook-signature': signatures.join(' '),
      },
      body,
      { timeoutMs: this.config.webhookTimeoutMs, allowPrivateNetworks: this.config.webhookAllowPrivateNetworks },
    );
  }
}
