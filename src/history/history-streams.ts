import type { ServerResponse } from 'node:http';
import { Injectable, Logger } from '@nestjs/common';
import { Draining } from '../common/draining.js';
import { EventStream } from '../common/event-stream.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobEvents, type WatchedEvent } from '../jobs/job-events.js';
import { JobProgress } from '../jobs/job-progress.js';
import { HistoryItemDto, type ItemSettings } from '../jobs/history-item.dto.js';
import { MediaUrls } from '../media/media-urls.js';

/**
 * Whether the stream's client may still read it (its key not revoked, its user not removed). Asked no more often
 * than this, nor than a key's cached authentication lasts (AUTH_CACHE_TTL_MS).
 */
export type StreamAccess = () => Promise<boolean>;
const ACCESS_CHECK_MIN_MS = 1000;

/** Event streams of a user's history: one item until it is final, or every change of all the user's items. */
@Injectable()
export class HistoryStreams {
  private readonly logger = new Logger(HistoryStreams.name);

  private readonly itemSettings: ItemSettings;

  constructor(
    private readonly items: HistoryRepository,
    private readonly events: JobEvents,
    private readonly progress: JobProgress,
    private readonly config: AppConfig,
    private readonly draining: Draining,
    mediaUrls: MediaUrls,
  ) {
    this.itemSettings = { historyRetentionMs: config.historyRetentionMs, mediaUrls };
  }

  /**
   * The item as it is now, then again on each change, until it is final or gone. Watching starts before the first
   * read, so a change committed in between is not missed; an unchanged item is not sent twice.
   */
  async followItem(userId: string, id: string, response: ServerResponse, access: StreamAccess): Promise<void> {
    // Changes may be announced before the stream is open; they are read once it is.
    const open: { stream?: EventStream } = {};
    let sent: HistoryItemDto | undefined;
    let sentText = '';
    let reading = Promise.resolve();
    const send = (stream: EventStream, dto: HistoryItemDto) => {
      const text = JSON.stringify(dto);
      if (text !== sentText) stream.send('item', dto);
      sent = dto;
      sentText = text;
    };
    const refresh = (event?: WatchedEvent) => {
      reading = reading.then(async () => {
        const stream = open.stream;
        if (!stream || stream.isClosed) return;
        // A running job's progress changes nothing else: the item last sent, with it, needs no database read.
        if (event?.kind === 'progress') {
          if (sent?.status === 'pending' && event.progress > (sent.progress ?? -1)) {
            send(stream, { ...sent, progress: event.progress });
          }
          return;
        }
        try {
          const item = await this.items.findOwned(userId, id);
          if (!item) return stream.end();
          const progress = await this.progress.of([item]);
          send(stream, HistoryItemDto.from(item, this.itemSettings, progress.get(id)));
          if (item.status !== 'pending') stream.end();
        } catch (error) {
          // The client reconnects and reads the item afresh; an outage is not worth keeping a silent stream open.
          this.logger.warn({ err: error, id }, 'an item event stream ended on a failed read');
          stream.end();
        }
      });
    };
    const unwatch = await this.events.watch({ historyItemId: id }, refresh);
    try {
      const item = await this.items.findOwned(userId, id);
      if (!item) throw new DomainError('not_found', 'No such history item.');
    } catch (error) {
      unwatch();
      throw error;
    }
    open.stream = this.open(response, access, unwatch);
    refresh();
  }

  /** Every change of the user's items from now on, open-ended: new and ended items, and deletions. */
  async followUser(userId: string, response: ServerResponse, access: StreamAccess): Promise<void> {
    let reading = Promise.resolve();
    const onEvent = (event: WatchedEvent) => {
      // After a gap in the fan-out a history page lists its items again; a stream cannot say what was missed.
      if (event.kind === 'resync') return;
      reading = reading.then(async () => {
        if (stream.isClosed) return;
        if (event.kind === 'deleted') return stream.send('deleted', { history_item_id: event.historyItemId });
        try {
          const item = await this.items.findOwned(userId, event.historyItemId);
          if (!item) return;
          const progress = event.kind === 'progress' ? event.progress : (await this.progress.of([item])).get(item.id);
          // A progress event read after its job ended would show the item going back to pending's progress.
          if (event.kind === 'progress' && item.status !== 'pending') return;
          stream.send('item', HistoryItemDto.from(item, this.itemSettings, progress));
        } catch (error) {
          this.logger.warn({ err: error }, 'a user event stream ended on a failed read');
          stream.end();
        }
      });
    };
    const unwatch = await this.events.watch({ userId }, onEvent);
    const stream = this.open(response, access, unwatch);
    // Nothing else may come for a while: clients and proxies see at once that the stream is open.
    stream.comment('stream open');
  }

  private open(response: ServerResponse, access: StreamAccess, onClose: () => void): EventStream {
    const everyMs = Math.max(this.config.authCacheTtlMs, ACCESS_CHECK_MIN_MS);
    return new EventStream(
      response,
      this.config.eventStreamHeartbeatMs,
      this.draining.signal,
      { allowed: access, everyMs },
      onClose,
    );
  }
}
