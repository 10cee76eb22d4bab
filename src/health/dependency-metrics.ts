import { Injectable } from '@nestjs/common';
import { Gauge } from 'prom-client';
import { Metrics } from '../metrics/metrics.js';
import { DependencyChecks } from './dependency-checks.js';

/**
 * Whether this process reaches PostgreSQL, Redis and each remote model server, checked at each scrape the way the
 * readiness probe checks them. A process that cannot reach a dependency says so here even while it is taken out of
 * rotation; one that is gone altogether shows as its scrape failing (`up == 0`).
 */
@Injectable()
export class DependencyMetrics {
  constructor(metrics: Metrics, checks: DependencyChecks) {
    const dependencyUp: Gauge<'dependency'> = new Gauge({
      name: 'igs_dependency_up',
      help: '1 when this process reached the dependency (postgresql, redis) at scrape time, 0 when not',
      labelNames: ['dependency'] as const,
      registers: [metrics.registry],
      async collect() {
        const [database, queue] = await Promise.all([checks.database(), checks.queue()]);
        dependencyUp.set({ dependency: 'postgresql' }, database.database.status === 'up' ? 1 : 0);
        dependencyUp.set({ dependency: 'redis' }, queue.queue.status === 'up' ? 1 : 0);
      },
    });
    const engineUp: Gauge<'engine' | 'kind'> = new Gauge({
      name: 'igs_engine_up',
      help: "1 when the remote model server (by its name in the routing file, and its kind) answered this process's health probe at scrape time, 0 when not",
      labelNames: ['engine', 'kind'] as const,
      registers: [metrics.registry],
      async collect() {
        for (const [engine, { kind, up }] of Object.entries(await checks.engineServers())) {
          engineUp.set({ engine, kind }, up ? 1 : 0);
        }
      },
    });
  }
}
