import type { ServerResponse } from 'node:http';
import { Injectable, Logger } from '@nestjs/common';
import { Draining } from '../common/draining.js';
import { EventStream } from '../common/event-stream.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobEvents, type WatchedEvent } from '../jobs/job-events.js';
import { ItemViews } from '../jobs/item-views.js';
import type { HistoryItemDto } from '../jobs/history-item.dto.js';

/**
 * Whether the stream's client may still read it (its key not revoked, its user not removed). Asked no more often
 * than this, nor than a key's cached authentication lasts (AUTH_CACHE_TTL_MS).
 */
export type StreamAccess = () => Promise<boolean>;
const ACCESS_CHECK_MIN_MS = 1000;

/** A stream sends a queued item's new place in line at most this often. */
const POSITION_INTERVAL_MS = 1000;

/**
 * Calls `run` at once, then at most once per `ms`: a call within the interval is put off to its end, and calls put
 * off together run once. `run` is skipped once `closed` says the stream is gone.
 */
function throttled(ms: number, closed: () => boolean, run: () => void): () => void {
  let lastAt = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  const fire = () => {
    timer = undefined;
    if (closed()) return;
    lastAt = Date.now();
    run();
  };
  return () => {
    if (timer) return;
    const wait = lastAt + ms - Date.now();
    if (wait <= 0) fire();
    else timer = setTimeout(fire, wait).unref();
  };
}

/** Event streams of a user's history: one item until it is final, or every change of all the user's items. */
@Injectable()
export class HistoryStreams {
  private readonly logger = new Logger(HistoryStreams.name);

  constructor(
    private readonly items: HistoryRepository,
    private readonly events: JobEvents,
    private readonly views: ItemViews,
    private readonly config: AppConfig,
    private readonly draining: Draining,
  ) {}

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
    // A queued item's place in line, read again when a line moves (any engine's: a read is one cheap Redis call).
    const readPosition = throttled(
      POSITION_INTERVAL_MS,
      () => open.stream?.isClosed ?? false,
      () => {
        reading = reading.then(async () => {
          const stream = open.stream;
          if (!stream || stream.isClosed || sent?.queue_position == null) return;
          try {
            const position = (await this.views.positions([id])).get(id);
            // Out of line: it started or ended, which its own event tells with the whole item.
            if (position !== undefined && position < sent.queue_position) {
              send(stream, { ...sent, queue_position: position });
            }
          } catch (error) {
            this.logger.warn({ err: error, id }, 'a place in line was not read');
          }
        });
      },
    );
    const refresh = (event?: WatchedEvent) => {
      // Whether the item is queued is known once the reads before this one are done: readPosition asks then.
      if (event?.kind === 'line') return readPosition();
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
          send(stream, await this.views.one(item));
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
    /** The user's queued items as last sent, by id: a new place is sent as a copy with it. */
    const queued = new Map<string, HistoryItemDto>();
    const sendItem = (dto: HistoryItemDto) => {
      if (dto.queue_position === null) queued.delete(dto.history_item_id);
      else queued.set(dto.history_item_id, dto);
      stream.send('item', dto);
    };
    const readPositions = throttled(
      POSITION_INTERVAL_MS,
      () => stream.isClosed,
      () => {
        reading = reading.then(async () => {
          if (stream.isClosed) return;
          try {
            // Every queued item of the user's, also those queued before the stream opened (a history page lists them).
            const positions = await this.views.positionsOfUser(userId);
            for (const id of queued.keys()) {
              // Out of line: it started or ended, which its own event tells with the whole item.
              if (!positions.has(id)) queued.delete(id);
            }
            for (const [id, position] of positions) {
              const last = queued.get(id);
              if (last) {
                if (position < last.queue_position!) sendItem({ ...last, queue_position: position });
                continue;
              }
              // Not sent since the stream opened: read once, then sent as copies.
              const item = await this.items.findOwned(userId, id);
              if (item?.status === 'pending' && !item.startedAt) sendItem(await this.views.one(item));
            }
          } catch (error) {
            this.logger.warn({ err: error }, 'places in line were not read');
          }
        });
      },
    );
    const onEvent = (event: WatchedEvent) => {
      // After a gap in the fan-out a history page lists its items again; a stream cannot say what was missed.
      if (event.kind === 'resync') return;
      // Which items are queued is known once the reads before this one are done: readPositions asks then.
      if (event.kind === 'line') return readPositions();
      reading = reading.then(async () => {
        if (stream.isClosed) return;
        if (event.kind === 'deleted') {
          queued.delete(event.historyItemId);
          return stream.send('deleted', { history_item_id: event.historyItemId });
        }
        try {
          const item = await this.items.findOwned(userId, event.historyItemId);
          if (!item) return;
          // A progress event read after its job ended would show the item going back to pending's progress.
          if (event.kind === 'progress' && item.status !== 'pending') return;
          const view = await this.views.one(item);
          sendItem(event.kind === 'progress' ? { ...view, progress: event.progress } : view);
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
