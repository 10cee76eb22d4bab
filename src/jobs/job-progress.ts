import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { REDIS } from '../redis/redis.module.js';
import type { HistoryItemRow } from './history.repository.js';
import { JobEvents } from './job-events.js';

/** Progress is passed on at most this often per job: a client's stream gets at most two a second. */
const MIN_INTERVAL_MS = 500;
/** A running job reports more often than this; a key left by a worker that died expires on its own. */
const KEY_TTL_MS = 3_600_000;

interface Reporting {
  /** The highest fraction reported. */
  highest: number;
  /** The fraction last passed on, and when. */
  sent: number;
  sentAt: number;
  timer?: NodeJS.Timeout;
}

/**
 * How far each running job is, from 0 to 1 (ENGINES.md, "Progress and cancel"). Not worth a PostgreSQL write a
 * tick: the worker keeps it in Redis, where an item GET on any replica reads it, and announces it on the job events'
 * channel, where streams pick it up. It only rises, and moves clients at most twice a second.
 */
@Injectable()
export class JobProgress {
  private readonly logger = new Logger(JobProgress.name);
  private readonly reporting = new Map<string, Reporting>();

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly events: JobEvents,
  ) {}

  /** A reporter for one running job, and the function that ends it (no report is passed on after that). */
  start(job: { id: string; userId: string }): { report: (fraction: number) => void; end: () => void } {
    const state: Reporting = { highest: 0, sent: -1, sentAt: 0 };
    this.reporting.set(job.id, state);
    const flush = () => {
      state.timer = undefined;
      if (this.reporting.get(job.id) !== state || state.highest <= state.sent) return;
      state.sent = state.highest;
      state.sentAt = Date.now();
      this.publish(job, state.sent);
    };
    return {
      report: (fraction: number) => {
        if (!Number.isFinite(fraction)) return;
        const clamped = Math.min(1, Math.max(0, fraction));
        if (clamped <= state.highest && state.sent >= 0) return;
        state.highest = Math.max(state.highest, clamped);
        if (state.timer) return;
        const wait = state.sentAt + MIN_INTERVAL_MS - Date.now();
        if (wait <= 0) flush();
        else state.timer = setTimeout(flush, wait);
      },
      end: () => {
        clearTimeout(state.timer);
        if (this.reporting.get(job.id) === state) this.reporting.delete(job.id);
      },
    };
  }

  /** The progress of each pending item among `items` that has reported any; one Redis call for them all. */
  async of(items: readonly Pick<HistoryItemRow, 'id' | 'status'>[]): Promise<Map<string, number>> {
    const pending = items.filter((item) => item.status === 'pending').map((item) => item.id);
    if (pending.length === 0) return new Map();
    const values = await this.redis.mget(pending.map(progressKey));
    const found = new Map<string, number>();
    values.forEach((value, index) => {
      if (value !== null) found.set(pending[index], Number(value));
    });
    return found;
  }

  /** Forgets an item's progress: it is deleted. */
  async forget(id: string): Promise<void> {
    await this.redis.del(progressKey(id));
  }

  private publish(job: { id: string; userId: string }, progress: number): void {
    const value = String(Math.round(progress * 1000) / 1000);
    this.redis
      .set(progressKey(job.id), value, 'PX', KEY_TTL_MS)
      .then(() => this.events.announceProgress({ historyItemId: job.id, userId: job.userId, progress: Number(value) }))
      .catch((error: unknown) => this.logger.warn({ err: error, id: job.id }, 'progress was not recorded'));
  }
}

/** Where a running job's progress is kept. */
function progressKey(id: string): string {
  return `progress:${id}`;
}
