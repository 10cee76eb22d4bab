import { Injectable } from '@nestjs/common';
import { Gauge } from 'prom-client';
import type { ServerState } from '../engines/index.js';
import { EngineSlotQueue } from '../jobs/engine-slot-queue.js';
import { Metrics } from '../metrics/metrics.js';
import { DependencyChecks } from './dependency-checks.js';

/**
 * Whether this process reaches PostgreSQL, Redis and each remote model server, checked at each scrape the way the
 * readiness probe checks them. A process that cannot reach a dependency says so here even while it is taken out of
 * rotation; one that is gone altogether shows as its scrape failing (`up == 0`).
 */
@Injectable()
export class DependencyMetrics {
  constructor(metrics: Metrics, checks: DependencyChecks, slots: EngineSlotQueue) {
    // One probe of the model servers per scrape, whichever gauge asks first.
    let probing: Promise<Record<string, ServerState>> | undefined;
    const engineServers = () => {
      probing ??= checks.engineServers().finally(() => setImmediate(() => (probing = undefined)));
      return probing;
    };
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
        for (const [engine, { kind, up }] of Object.entries(await engineServers())) {
          engineUp.set({ engine, kind }, up ? 1 : 0);
        }
      },
    });
    /** Each server of each engine with its answer: a pool's by address, a single one by the engine's name. */
    const eachServer = async () =>
      Object.entries(await engineServers()).flatMap(([engine, state]) =>
        Object.entries(state.servers ?? { [engine]: state.up }).map(([server, up]) => ({ engine, server, up, state })),
      );
    const serverUp: Gauge<'engine' | 'server'> = new Gauge({
      name: 'igs_engine_server_up',
      help: "1 when the model server (by its engine's name, and its address in a pool) answered this process's health probe at scrape time, 0 when not",
      labelNames: ['engine', 'server'] as const,
      registers: [metrics.registry],
      async collect() {
        serverUp.reset();
        for (const { engine, server, up } of await eachServer()) serverUp.set({ engine, server }, up ? 1 : 0);
      },
    });
    const slotsTotal: Gauge<'engine' | 'server'> = new Gauge({
      name: 'igs_engine_slots_total',
      help: "Jobs the model server takes at once (its engine's concurrency), across all workers",
      labelNames: ['engine', 'server'] as const,
      registers: [metrics.registry],
      async collect() {
        slotsTotal.reset();
        for (const { engine, server, state } of await eachServer()) {
          slotsTotal.set({ engine, server }, state.concurrency);
        }
      },
    });
    const slotsBusy: Gauge<'engine' | 'server'> = new Gauge({
      name: 'igs_engine_slots_busy',
      help: 'Slots of the model server held by jobs, across all workers (the same in every process)',
      labelNames: ['engine', 'server'] as const,
      registers: [metrics.registry],
      async collect() {
        slotsBusy.reset();
        const servers = await eachServer();
        const busy = new Map<string, Record<string, number>>();
        for (const engine of new Set(servers.map((one) => one.engine))) {
          busy.set(engine, await slots.busy(engine).catch(() => ({})));
        }
        for (const { engine, server } of servers) slotsBusy.set({ engine, server }, busy.get(engine)?.[server] ?? 0);
      },
    });
    const jobsWaiting: Gauge<'engine'> = new Gauge({
      name: 'igs_engine_jobs_waiting',
      help: "Jobs this process holds that wait for a slot of the engine's model servers",
      labelNames: ['engine'] as const,
      registers: [metrics.registry],
      async collect() {
        jobsWaiting.reset();
        for (const engine of Object.keys(await engineServers())) jobsWaiting.set({ engine }, slots.waiting(engine));
      },
    });
  }
}
