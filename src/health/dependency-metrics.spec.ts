import type { DependencyChecks } from './dependency-checks.js';
import { DependencyMetrics } from './dependency-metrics.js';
import { Metrics } from '../metrics/metrics.js';

type Status = 'up' | 'down';

function checksWith(database: Status, queue: Status, engines: Record<string, { kind: string; up: boolean }> = {}) {
  return {
    database: () => Promise.resolve({ database: { status: database } }),
    queue: () => Promise.resolve({ queue: { status: queue } }),
    engineServers: () => Promise.resolve(engines),
  } as unknown as DependencyChecks;
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
    new DependencyMetrics(metrics, checksWith('up', 'down'));

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
    );

    const sut = await samplesOf(metrics, 'igs_engine_up');

    expect(sut).toEqual([
      { labels: { engine: 'tryon-gpu', kind: 'cog' }, value: 1 },
      { labels: { engine: 'flux', kind: 'replicate' }, value: 0 },
    ]);
  });

  it('has no engine series when every job runs on the local engine', async () => {
    const metrics = new Metrics();
    new DependencyMetrics(metrics, checksWith('up', 'up'));

    expect(await samplesOf(metrics, 'igs_engine_up')).toEqual([]);
  });
});
