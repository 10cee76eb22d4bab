import { Injectable } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { MediaUrls } from '../media/media-urls.js';
import { HistoryItemDto, type ItemSettings } from './history-item.dto.js';
import type { HistoryItemRow } from './history.repository.js';
import { JobProgress } from './job-progress.js';
import { QueueLine } from './queue-line.js';

/**
 * Items as clients see them (the item GET, lists, event streams, webhooks): a row with what lives in Redis beside it,
 * the progress of running jobs and the place in line of queued ones, read for all the rows at once.
 */
@Injectable()
export class ItemViews {
  private readonly settings: ItemSettings;

  constructor(
    private readonly progress: JobProgress,
    private readonly line: QueueLine,
    config: AppConfig,
    mediaUrls: MediaUrls,
  ) {
    this.settings = { historyRetentionMs: config.historyRetentionMs, mediaUrls };
  }

  async one(item: HistoryItemRow): Promise<HistoryItemDto> {
    const [view] = await this.many([item]);
    return view;
  }

  /**
   * Two Redis calls at most, whatever the number of rows; one when the pending rows are all queued or all running, and
   * none for rows that are all final. Only a running job has progress (a job reports it once it has started), only a
   * queued one a place in line.
   */
  async many(items: readonly HistoryItemRow[]): Promise<HistoryItemDto[]> {
    const pending = items.filter((item) => item.status === 'pending');
    const queued = pending.filter((item) => !item.startedAt).map((item) => item.id);
    const running = pending.filter((item) => item.startedAt);
    const [progress, positions] = await Promise.all([this.progress.of(running), this.line.positions(queued)]);
    return items.map((item) => HistoryItemDto.from(item, this.settings, progress.get(item.id), positions.get(item.id)));
  }

  /** The places in line of these queued items (absent: no longer in line). */
  positions(ids: readonly string[]): Promise<Map<string, number>> {
    return this.line.positions(ids);
  }

  /** The places in line of all of the user's queued items. */
  positionsOfUser(userId: string): Promise<Map<string, number>> {
    return this.line.positionsOfUser(userId);
  }
}
