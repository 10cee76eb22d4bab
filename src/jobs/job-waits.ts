import { Injectable } from '@nestjs/common';
import { Draining } from '../common/draining.js';
import { type HistoryItemRow, HistoryRepository } from './history.repository.js';
import { JobEvents } from './job-events.js';

/** Waits for a job to end, on the lifecycle's events rather than by polling the database. */
@Injectable()
export class JobWaits {
  constructor(
    private readonly items: HistoryRepository,
    private readonly events: JobEvents,
    private readonly draining: Draining,
  ) {}

  /**
   * The user's item as soon as it is final, or as it is after `ms` if still pending; undefined when the user has no
   * such item (or it is deleted meanwhile). The item is read again on each change announced for it, by any process.
   * A process shutting down answers with the item as last read, at once.
   */
  async untilFinal(userId: string, id: string, ms: number): Promise<HistoryItemRow | undefined> {
    const deadline = Date.now() + ms;
    const shutdown = this.draining.signal;
    let wake = () => {};
    // Watching starts before the first read, so a change committed in between still wakes the loop.
    // A line's move tells nothing of this item's status (and comes for every queued job): no read for it.
    const unwatch = await this.events.watch({ historyItemId: id }, (event) => {
      if (event.kind !== 'line') wake();
    });
    let stop = () => {};
    const stopped = new Promise<boolean>((resolve) => (stop = () => resolve(false)));
    shutdown.addEventListener('abort', stop, { once: true });
    try {
      for (;;) {
        const changed = new Promise<boolean>((resolve) => (wake = () => resolve(true)));
        const item = await this.items.findOwned(userId, id);
        const left = deadline - Date.now();
        if (!item || item.status !== 'pending' || left <= 0 || shutdown.aborted) return item;
        let timer: NodeJS.Timeout | undefined;
        const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), left)));
        const woken = await Promise.race([changed, timedOut, stopped]);
        clearTimeout(timer);
        if (!woken) return item;
      }
    } finally {
      shutdown.removeEventListener('abort', stop);
      unwatch();
    }
  }
}
