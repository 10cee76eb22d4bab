import { Metrics } from '../metrics/metrics.js';
import type { HistoryRepository } from './history.repository.js';
import { PendingAge } from './pending-age.js';

function itemsAnswering(oldest: () => Promise<number>) {
  return { oldestPendingSeconds: oldest } as unknown as HistoryRepository;
}

/** The samples' values as a scrape would show them. */
async function valuesOf(metrics: Metrics) {
  const metric = metrics.registry.getSingleMetric('igs_oldest_pending_job_age_seconds');
  if (!metric) throw new Error('igs_oldest_pending_job_age_seconds is not registered');
  return (await metric.get()).values.map(({ value }) => value);
}

describe('PendingAge', () => {
  it('reports how long the oldest pending item has been pending', async () => {
    const metrics = new Metrics();
    new PendingAge(
      metrics,
      itemsAnswering(() => Promise.resolve(42.5)),
    );

    expect(await valuesOf(metrics)).toEqual([42.5]);
  });

  it('reports no age, never 0 (nothing pending), while the database cannot be read', async () => {
    const metrics = new Metrics();
    let down = false;
    new PendingAge(
      metrics,
      itemsAnswering(() => (down ? Promise.reject(new Error('connection refused')) : Promise.resolve(700))),
    );
    await valuesOf(metrics);
    down = true;

    expect(await valuesOf(metrics)).toEqual([Number.NaN]);
  });
});
