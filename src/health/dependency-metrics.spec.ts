import type { ServerState } from '../engines/index.js';
import type { EngineSlotQueue } from '../jobs/engine-slot-queue.js';
import type { DependencyChecks } from './dependency-checks.js';
import { DependencyMetrics } from './dependency-metrics.js';
import { Metrics } from '../metrics/metrics.js';

type Status = 'up' | 'down';

function checksWith(database: Status, queue: Status, engines: Record<string, Partial<ServerState>> = {}) {
  return {
    database: () => Promise.resolve({ database: { status: database } }),
    queue: () => Promise.resolve({ queue: { status: queue } }),
    engineServers: () => Promise.resolve(engines),
  } as unknown as DependencyChecks;
}

/** The slots as Redis and this process hold them: busy slots by engine and server, and this process's waiting jobs. */
function slotsWith(busy: Record<string, Record<string, number>> = {}, waiting: Record<string, number> = {}) {
  return {
    busy: (engine: string) => Promise.resolve(busy[engine] ?? {}),
    waiting: (engine: string) => waiting[engine] ?? 0,
  } as unknown as EngineSlotQueue;
}

/** The samples of one metric as a scrape would show them: labels and value. */
async function samplesOf(metrics: Metrics, name: string) {
  const metric = metrics.registry.getSingleMetric(name);
  if (!metric) throw new Error(`${name} is not registered`);
  return (await metric.get()).values.map(({ labels, value }) => ({ labels, value }));
}

describe('DependencyMetrics', () => {
  it('reports 1 for each dependency the process reaches and 0 for one it does not', async () => {
    const metrics = new Metrics();
    new DependencyMetrics(metrics, checksWith('up', 'down'), slotsWith());

    const sut = await samplesOf(metrics, 'igs_dependency_up');

    expect(sut).toEqual([
      { labels: { dependency: 'postgresql' }, value: 1 },
      { labels: { dependency: 'redis' }, value: 0 },
    ]);
  });

  it('reports each remote model server by its name and kind, 0 when it did not answer', async () => {
    const metrics = new Metrics();
    new DependencyMetrics(
      metrics,
      checksWith('up', 'up', { 'tryon-gpu': { kind: 'cog', up: true }, flux: { kind: 'replicate', up: false } }),
      slotsWith(),
    );

    const sut = await samplesOf(metrics, 'igs_engine_up');

    expect(sut).toEqual([
      { labels: { engine: 'tryon-gpu', kind: 'cog' }, value: 1 },
      { labels: { engine: 'flux', kind: 'replicate' }, value: 0 },
    ]);
  });

  it('has no engine series when every job runs on the local engine', async () => {
    const metrics = new Metrics();
    new DependencyMetrics(metrics, checksWith('up', 'up'), slotsWith());

    expect(await samplesOf(metrics, 'igs_engine_up')).toEqual([]);
  });

  it("reports each server of a pool by its address: whether it answered, its slots, the slots held, and the engine's waiting jobs", async () => {
    const metrics = new Metrics();
    const pool = {
      kind: 'cog' as const,
      up: true,
      concurrency: 2,
      servers: { 'http://a:5000': true, 'http://b:5000': false },
    };
    const single = { kind: 'comfyui' as const, up: true, concurrency: 1 };
    new DependencyMetrics(
      metrics,
      checksWith('up', 'up', { vton: pool, comfy: single }),
      slotsWith({ vton: { 'http://a:5000': 2 }, comfy: { comfy: 1 } }, { vton: 3 }),
    );

    const sut = {
      up: await samplesOf(metrics, 'igs_engine_server_up'),
      total: await samplesOf(metrics, 'igs_engine_slots_total'),
      busy: await samplesOf(metrics, 'igs_engine_slots_busy'),
      waiting: await samplesOf(metrics, 'igs_engine_jobs_waiting'),
    };

    const a = { engine: 'vton', server: 'http://a:5000' };
    const b = { engine: 'vton', server: 'http://b:5000' };
    const comfy = { engine: 'comfy', server: 'comfy' };
    expect(sut).toEqual({
      up: [
        { labels: a, value: 1 },
        { labels: b, value: 0 },
        { labels: comfy, value: 1 },
      ],
      total: [
        { labels: a, value: 2 },
        { labels: b, value: 2 },
        { labels: comfy, value: 1 },
      ],
      busy: [
        { labels: a, value: 2 },
        { labels: b, value: 0 },
        { labels: comfy, value: 1 },
      ],
      waiting: [
        { labels: { engine: 'vton' }, value: 3 },
        { labels: { engine: 'comfy' }, value: 0 },
      ],
    });
  });
});
