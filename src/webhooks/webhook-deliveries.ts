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

/**
 * Webhooks, per API.md: when an item with a `webhook_url` becomes final, a message is queued (in the process that
 * ended it, once), and workers POST it, signed per Standard Webhooks, until the receiver answers 2xx, answers 410,
 * turns out to be a private address, or the retries run out. The item's `webhook` shows each attempt.
 */
@Injectable()
export class WebhookDeliveries implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(WebhookDeliveries.name);

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
      if (event.kind !== 'completed' && event.kind !== 'failed') return;
      const type = event.kind === 'completed' ? 'generation.completed' : 'generation.failed';
      const item = await this.items.findWithOwner(event.historyItemId);
      if (item?.webhookUrl) await this.queue.enqueue({ historyItemId: event.historyItemId, type });
    });
    if (this.config.runsWorker) this.queue.process(DELIVERY_CONCURRENCY, (delivery) => this.attempt(delivery));
  }

  async beforeApplicationShutdown(): Promise<void> {
    if (this.config.runsWorker) await this.queue.close();
  }

  /** One attempt; throws to have the queue retry it on the schedule. */
  private async attempt(delivery: WebhookDelivery): Promise<void> {
    const id = delivery.historyItemId;
    const item = await this.items.findWithOwner(id);
    // Deleted since, or already settled by an earlier run of this attempt.
    if (!item?.webhookUrl || item.webhookState !== 'pending') return;
    const body = JSON.stringify({
      type: delivery.type,
      timestamp: (item.completedAt ?? item.updatedAt).toISOString(),
      data: HistoryItemDto.from(item, this.itemSettings),
    });
    const messageId = `msg_${id}`;
    const signedAt = new Date();
    const signatures = (await this.webhooks.signingSecrets(item.userId)).map((secret) =>
      new Webhook(secret).sign(messageId, signedAt, body),
    );
    const result = await postJson(
      item.webhookUrl,
      {
        'webhook-id': messageId,
        'webhook-timestamp': String(Math.floor(signedAt.getTime() / 1000)),
        'webhook-signature': signatures.join(' '),
      },
      body,
      { timeoutMs: this.config.webhookTimeoutMs, allowPrivateNetworks: this.config.webhookAllowPrivateNetworks },
    );
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
}
