import type { AppConfig } from '../config/config.js';
import type { components } from '../generated/openapi.js';
import type { MediaUrls, SignedMediaUrls } from '../media/media-urls.js';
import type { HistoryItemRow } from './history.repository.js';

type HistoryItemSchema = components['schemas']['HistoryItem'];

/** The deployment's settings an item is shown with: how its media URLs are signed, and how long it is kept. */
export type ItemSettings = Pick<AppConfig, 'historyRetentionMs'> & { mediaUrls: MediaUrls };

/** A history item as every client sees it: the item GET, event streams and webhooks. */
export class HistoryItemDto implements HistoryItemSchema {
  history_item_id: string;
  tool: string;
  generation_type: string;
  status: HistoryItemSchema['status'];
  preview_url: string | null;
  stock_url: string | null;
  output_url: string | null;
  like: boolean | null;
  error: HistoryItemSchema['error'];
  created_at: string;
  updated_at: string;
  completed_at: string | null;
  webhook: HistoryItemSchema['webhook'];
  progress: number | null;
  expires_at: string | null;
  media_urls_expire_at: string | null;
  started_at: string | null;
  queue_position: number | null;
  metrics: HistoryItemSchema['metrics'];
  outputs: HistoryItemSchema['outputs'];

  /**
   * Result paths are shown only once the result exists, signed at `now` for MEDIA_URL_TTL: every read signs afresh.
   * `output_url` is the stock image's absolute URL, on the service itself or on whatever serves the media store
   * (MEDIA_PUBLIC_BASE_URL). `progress` is what the running job
   * last reported (`JobProgress`), if anything: 1 once complete, null once failed. A final item expires
   * HISTORY_RETENTION after it ended, when the retention sweep removes it. `queuePosition` is the job's place in its
   * engine's line (`QueueLine`), shown only while it is queued; `metrics` come once it is final.
   */
  static from(
    item: HistoryItemRow,
    settings: ItemSettings,
    progress?: number,
    queuePosition?: number,
    now = Date.now(),
  ): HistoryItemDto {
    const complete = item.status === 'complete';
    const urls = complete ? settings.mediaUrls.forItem(item.id, now) : undefined;
    return {
      history_item_id: item.id,
      tool: item.tool,
      generation_type: item.generationType,
      status: item.status,
      preview_url: urls?.preview ?? null,
      stock_url: urls?.stock ?? null,
      output_url: urls?.output ?? null,
      like: item.like,
      error: item.errorCode ? { code: item.errorCode, message: item.errorMessage ?? '' } : null,
      created_at: item.createdAt.toISOString(),
      updated_at: item.updatedAt.toISOString(),
      completed_at: item.completedAt?.toISOString() ?? null,
      progress: complete ? 1 : item.status === 'pending' ? (progress ?? null) : null,
      expires_at:
        item.completedAt && settings.historyRetentionMs !== undefined
          ? new Date(item.completedAt.getTime() + settings.historyRetentionMs).toISOString()
          : null,
      media_urls_expire_at: urls?.expiresAt.toISOString() ?? null,
      outputs: urls ? outputsOf(item, urls, settings.mediaUrls, now) : null,
      webhook: item.webhookUrl
        ? {
            url: item.webhookUrl,
            state: item.webhookState ?? 'pending',
            attempts: item.webhookAttempts,
            last_attempt_at: item.webhookLastAttemptAt?.toISOString() ?? null,
            last_status: item.webhookLastStatus,
          }
        : null,
      started_at: item.startedAt?.toISOString() ?? null,
      queue_position: item.status === 'pending' && !item.startedAt ? (queuePosition ?? null) : null,
      metrics: item.completedAt ? metricsOf(item.createdAt, item.startedAt, item.completedAt) : null,
    };
  }
}

/** How long a final job waited and ran, in seconds (to the millisecond); a job that never started only waited. */
function metricsOf(created: Date, started: Date | null, ended: Date): NonNullable<HistoryItemSchema['metrics']> {
  const seconds = (from: Date, to: Date) => Math.max(0, to.getTime() - from.getTime()) / 1000;
  return started
    ? { queue_seconds: seconds(created, started), run_seconds: seconds(started, ended) }
    : { queue_seconds: seconds(created, ended), run_seconds: null };
}

/**
 * Every result of a complete item with its seed, the first with the item's own URLs (`first`, signed once). An item
 * completed before results were counted has none recorded: it has its one result, whose seed is unknown.
 */
function outputsOf(
  item: HistoryItemRow,
  first: SignedMediaUrls,
  mediaUrls: MediaUrls,
  now: number,
): HistoryItemSchema['outputs'] {
  return (item.outputSeeds ?? [null]).map((seed, index) => {
    const urls = index === 0 ? first : mediaUrls.forItem(item.id, now, index);
    return { preview_url: urls.preview, stock_url: urls.stock, output_url: urls.output, seed };
  });
}
