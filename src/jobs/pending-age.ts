import { Injectable } from '@nestjs/common';
import { Gauge } from 'prom-client';
import { Metrics } from '../metrics/metrics.js';
import { HistoryRepository } from './history.repository.js';

/**
 * The age of the oldest pending item, read from the database at each scrape as the queue depth is read from Redis.
 * Jobs that are lost, stuck or waiting on a full engine all show here long before JOB_DEADLINE_MS ends them. Every
 * process reports the same figure, so aggregate with max(), not sum().
 */
@Injectable()
export class PendingAge {
  constructor(metrics: Metrics, items: HistoryRepository) {
    const gauge = new Gauge({
      name: 'igs_oldest_pending_job_age_seconds',
      help: 'Seconds since the oldest pending item was created (0 when none is pending, NaN while the database cannot be read), read from the database at scrape time',
      registers: [metrics.registry],
      async collect() {
        try {
          gauge.set(await items.oldestPendingSeconds());
        } catch {
          // No figure while the database is down rather than a stale one, or 0 (nothing pending), which a gauge without
          // labels goes back to when reset: NaN, which max() passes over and no threshold exceeds. The scrape itself
          // still succeeds.
          gauge.set(Number.NaN);
        }
      },
    });
  }
}
