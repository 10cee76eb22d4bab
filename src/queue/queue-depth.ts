import { Injectable } from '@nestjs/common';
import { Gauge } from 'prom-client';
import { Metrics } from '../metrics/metrics.js';
import { JobQueue } from './job-queue.js';

const STATES = ['waiting', 'active', 'delayed', 'failed'] as const;

/**
 * The generation queue's job counts, read from Redis at each scrape. Every process reports the same queue, so
 * aggregate with max(), not sum().
 */
@Injectable()
export class QueueDepth {
  constructor(metrics: Metrics, queue: JobQueue) {
    const gauge: Gauge<'state'> = new Gauge({
      name: 'igs_queue_jobs',
      help: 'Jobs in the generation queue by state (waiting, active, delayed, failed), read from Redis at scrape time',
      labelNames: ['state'] as const,
      registers: [metrics.registry],
      async collect() {
        try {
          const counts = await queue.counts();
          for (const state of STATES) gauge.set({ state }, counts[state]);
        } catch {
          // No figures while Redis is down rather than stale ones; the scrape itself still succeeds.
          gauge.reset();
        }
      },
    });
  }
}
