import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { HistoryRepository } from '../jobs/history.repository.js';
import { MEDIA_STORE } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { REDIS } from '../redis/redis.module.js';
import { takeRound } from './round-lock.js';

/**
 * Age past which a result folder no row keeps is left over, not being written: a run writes its two files within
 * seconds, and an item leaves the database only after whatever was writing for it stopped or lost its race.
 */
const LEFTOVER_AFTER_MS = 60 * 60_000;
const SWEEP_INTERVAL_MS = 10 * 60_000;
/** Folders looked up per statement. */
const LOOKUP_BATCH = 1000;

const ITEM_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Removes result folders (`media/{id}/`, on disk or in the bucket) that no item keeps: one whose row is gone, or
 * which ended without a result (`error`). A removal's row goes before its files, so a storage failure or a crash
 * between the two leaves such a folder (a delete, retention, a user's removal, a run that lost its race to one of
 * them); this sweep finishes the job. At every worker's start, then every ten minutes in one worker at a time (a
 * Redis lock), folders older than an hour go.
 */
@Injectable()
export class ResultLeftovers implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(ResultLeftovers.name);
  private timer?: NodeJS.Timeout;
  private sweeping?: Promise<unknown>;

  constructor(
    private readonly items: HistoryRepository,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    @Inject(REDIS) private readonly redis: Redis,
  ) {}

  onApplicationBootstrap(): void {
    // Every worker at its start, so that a restart finishes what a crash left; then one worker a round.
    void this.tick({ everyWorker: true });
    this.timer = setInterval(() => void this.tick({ everyWorker: false }), SWEEP_INTERVAL_MS).unref();
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping;
  }

  private async tick({ everyWorker }: { everyWorker: boolean }): Promise<void> {
    if (this.sweeping) return;
    this.sweeping = (async () => {
      if (!everyWorker && (await takeRound(this.redis, 'result-leftovers:lock', SWEEP_INTERVAL_MS)) === undefined)
        return;
      await this.sweep();
    })()
      .catch((error: unknown) => this.logger.warn({ err: error }, 'could not sweep the media store'))
      .finally(() => (this.sweeping = undefined));
    await this.sweeping;
  }

  /**
   * Removes the folders older than an hour before `now` that no item keeps; resolves how many went and how many could
   * not be removed (logged; the next sweep tries again).
   */
  async sweep(now = Date.now()): Promise<{ removed: number; failed: number }> {
    const cutoff = now - LEFTOVER_AFTER_MS;
    const tally = { removed: 0, failed: 0 };
    let batch: string[] = [];
    for await (const { key, writtenAt } of this.media.folders()) {
      // Anything else in the store is not the service's to remove.
      if (!ITEM_ID.test(key) || writtenAt.getTime() > cutoff) continue;
      batch.push(key);
      if (batch.length === LOOKUP_BATCH) {
        await this.removeUnkept(batch, tally);
        batch = [];
      }
    }
    if (batch.length > 0) await this.removeUnkept(batch, tally);
    if (tally.removed > 0) this.logger.log({ removed: tally.removed }, 'removed result folders no item keeps');
    return tally;
  }

  private async removeUnkept(folders: string[], tally: { removed: number; failed: number }): Promise<void> {
    const kept = new Set(await this.items.keepingOutputsAmong(folders));
    for (const id of folders.filter((folder) => !kept.has(folder))) {
      try {
        await this.media.deleteFolder(id);
        tally.removed++;
      } catch (error) {
        tally.failed++;
        this.logger.warn({ id, err: error }, 'could not remove a result folder no item keeps');
      }
    }
  }
}
