import { randomUUID } from 'node:crypto';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeCog, startFakeCog } from '../../support/fake-cog.js';
import { inputsFor } from '../../support/jobs.js';
import { createUserWithKey, freePort, type RunningService, startService } from '../../support/service.js';
import { type Sample, scrape, valueOf } from '../../support/prometheus.js';
import { Client, type JobAcceptedBody, postJob, waitForFinal } from '../../support/client.js';
import { query } from '../../support/harness.js';
import { PIPELINE_APPLICATION_NAME } from '../../../src/database/statement-pipeline.js';

const UUID_ANYWHERE = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
const HTTP_COUNT = 'http_request_duration_seconds_count';

describe('metrics on METRICS_PORT', () => {
  let env: TestEnvironment;
  let cog: FakeCog;
  let sut: RunningService;
  let metricsUrl: string;
  let apiKey: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // fabric's engine refuses every job, so a failure outcome can be counted too.
    cog = await startFakeCog(() => ({ kind: 'http', status: 422 }));
    const metricsPort = await freePort();
    metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    sut = await startService({ ...env.serviceEnv, METRICS_PORT: String(metricsPort), ENGINE_FABRIC: `cog:${cog.url}` });
    apiKey = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await cog?.close();
    await env?.dispose();
  }, 60_000);

  async function createJob(tool: string): Promise<string> {
    const response = await postJob(sut.baseUrl, apiKey, await inputsFor(tool));
    expect(response.status).toBe(202);
    return ((await response.json()) as JobAcceptedBody).history_item_id;
  }

  it('serves the Prometheus text format on its own port, and not on the API port', async () => {
    const response = await fetch(metricsUrl);

    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect((await fetch(`${sut.baseUrl}/metrics`)).status).toBe(404);
    expect((await fetch(metricsUrl.replace('/metrics', '/other'))).status).toBe(404);
  });

  it('counts requests by method, route template and status', async () => {
    const route = { method: 'GET', route: '/user/generation-history/:id' };
    const before = await scrape(metricsUrl);

    const client = new Client(sut.baseUrl, apiKey);
    for (let i = 0; i < 3; i++) await client.get(randomUUID());
    // Without credentials: a request no client makes.
    await fetch(`${sut.baseUrl}/user/generation-history/${randomUUID()}`);
    await client.tools();
    await fetch(`${sut.baseUrl}/no/such/${randomUUID()}`);

    const after = await scrape(metricsUrl);
    const increase = (labels: Record<string, string>) =>
      valueOf(after, HTTP_COUNT, labels) - valueOf(before, HTTP_COUNT, labels);
    expect(increase({ ...route, status_code: '404' })).toBe(3);
    expect(increase({ ...route, status_code: '401' })).toBe(1);
    expect(increase({ method: 'GET', route: '/generation/tools', status_code: '200' })).toBe(1);
    expect(increase({ method: 'GET', route: 'unmatched', status_code: '404' })).toBe(1);
  });

  it('counts a completed job by tool and outcome, with its durations and queue wait', async () => {
    const id = await createJob('default');
    expect((await waitForFinal(sut.baseUrl, apiKey, id)).status).toBe('complete');

    const samples = await scrape(metricsUrl);
    expect(valueOf(samples, 'igs_jobs_total', { tool: 'default', outcome: 'complete' })).toBe(1);
    expect(valueOf(samples, 'igs_job_duration_seconds_count', { tool: 'default', result: 'complete' })).toBe(1);
    expect(valueOf(samples, 'igs_job_queue_wait_seconds_count', { tool: 'default' })).toBe(1);
    expect(valueOf(samples, 'igs_engine_duration_seconds_count', { tool: 'default', engine: 'local' })).toBe(1);
  }, 60_000);

  it('counts a failed job under the error code it ended with', async () => {
    const id = await createJob('fabric');
    expect((await waitForFinal(sut.baseUrl, apiKey, id)).error?.code).toBe('engine_failed');

    const samples = await scrape(metricsUrl);
    expect(valueOf(samples, 'igs_jobs_total', { tool: 'fabric', outcome: 'engine_failed' })).toBe(1);
    expect(valueOf(samples, 'igs_jobs_total', { tool: 'fabric', outcome: 'complete' })).toBe(0);
    expect(valueOf(samples, 'igs_job_duration_seconds_count', { tool: 'fabric', result: 'failed' })).toBe(1);
    expect(valueOf(samples, 'igs_engine_duration_seconds_count', { tool: 'fabric', engine: 'cog' })).toBe(1);
  }, 60_000);

  it('reports the queue depth by state, read from Redis: jobs no worker has taken are waiting', async () => {
    // An API process alone, on a queue of its own: nothing takes the jobs it queues.
    const queueEnv = await createTestEnvironment();
    const apiMetricsPort = await freePort();
    const api = await startService({ ...queueEnv.serviceEnv, ROLE: 'api', METRICS_PORT: String(apiMetricsPort) });
    try {
      const key = await createUserWithKey(queueEnv.databaseUrl);
      const depth = async () =>
        Object.fromEntries(
          (await scrape(`http://127.0.0.1:${apiMetricsPort}/metrics`))
            .filter((sample) => sample.name === 'igs_queue_jobs')
            .map((sample) => [sample.labels.state, sample.value]),
        );
      expect(await depth()).toEqual({ active: 0, delayed: 0, failed: 0, waiting: 0 });

      for (let i = 0; i < 3; i++)
        expect((await postJob(api.baseUrl, key, await inputsFor('default'))).status).toBe(202);

      expect(await depth()).toEqual({ active: 0, delayed: 0, failed: 0, waiting: 3 });
    } finally {
      await api.stop();
      await queueEnv.dispose();
    }
  }, 60_000);

  it("are read by a worker without opening the API's statement pipeline connections", async () => {
    const pipelines = async () =>
      (
        await query<{ n: number }>(
          env,
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()',
          [PIPELINE_APPLICATION_NAME],
        )
      )[0].n;
    // This file's API process has opened its own by now: an item read goes through them.
    await new Client(sut.baseUrl, apiKey).get(randomUUID());
    const before = await pipelines();
    const metricsPort = await freePort();
    const worker = await startService({ ...env.serviceEnv, ROLE: 'worker', METRICS_PORT: String(metricsPort) });
    try {
      const samples = await scrape(`http://127.0.0.1:${metricsPort}/metrics`);

      expect(valueOf(samples, 'igs_oldest_pending_job_age_seconds', {})).toBe(0);
      expect(before).toBeGreaterThan(0);
      expect(await pipelines()).toBe(before);
    } finally {
      await worker.stop();
    }
  }, 60_000);

  it('includes the default process metrics', async () => {
    const names = new Set((await scrape(metricsUrl)).map((sample: Sample) => sample.name));

    for (const name of [
      'process_cpu_seconds_total',
      'process_resident_memory_bytes',
      'nodejs_eventloop_lag_seconds',
      'nodejs_heap_size_used_bytes',
    ]) {
      expect(names).toContain(name);
    }
  });

  it('never puts an id in a label, so series do not grow with traffic', async () => {
    const samples = await scrape(metricsUrl);

    const withIds = samples.filter((sample) => Object.values(sample.labels).some((value) => UUID_ANYWHERE.test(value)));
    expect(withIds).toEqual([]);
    const routes = new Set(samples.filter((sample) => sample.name === HTTP_COUNT).map((sample) => sample.labels.route));
    for (const route of routes) expect(route === 'unmatched' || route.startsWith('/')).toBe(true);
  });
});
