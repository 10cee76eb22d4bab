import { Redis } from 'ioredis';
import type { FakeCog } from '../support/fake-cog.js';
import {
  cogEngine,
  expectCompleteWithOutputs,
  final,
  listDir,
  mediaFolder,
  query,
  storedInputs,
  streamSettings,
  submit,
  uniqueImage,
  waitUntil,
  worldForBlock,
} from '../support/harness.js';
import { millisSince, recordStalls, report, statusCounts } from '../support/observe.js';
import { unsignedItem } from '../support/media.js';

/** Far more than the running jobs need: the worker is to wait for them, not give up on them. */
const WAIT_FOR_RUNNING_JOBS = { SHUTDOWN_TIMEOUT_MS: '30000' };

describe('a worker told to stop (SIGTERM)', () => {
  describe('while every job it took is in the engine', () => {
    const ENGINE_MS = 1500;
    const CONCURRENCY = 3;

    const block = worldForBlock(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), { concurrency: CONCURRENCY });
    const workerEnv = (fake: FakeCog): Record<string, string> => ({
      ...cogEngine(fake),
      WORKER_CONCURRENCY: String(CONCURRENCY),
      ...WAIT_FOR_RUNNING_JOBS,
    });

    it('finishes the running jobs, exits 0 and leaves nothing pending', async () => {
      const { env, processes, fake, queue, api, key } = block;
      const sut = await processes.start('worker', workerEnv(fake));
      const images = await Promise.all(Array.from({ length: CONCURRENCY }, () => uniqueImage()));
      const ids = await Promise.all(images.map((clothes) => submit(api.baseUrl, key, clothes)));
      await fake.waitFor((f) => f.inFlight().length === CONCURRENCY, 'every job to be in the engine');

      const code = await processes.stop(sut);

      expect(code).toBe(0);
      expect(sut.output()).not.toMatch(/"level":(50|60)/);
      // It waited for the engine's answers instead of dropping the calls.
      expect(fake.requests).toHaveLength(CONCURRENCY);
      expect(fake.requests.every((request) => request.answered && !request.aborted)).toBe(true);
      const items = await Promise.all(ids.map((id) => final(api.baseUrl, key, id)));
      for (const item of items) await expectCompleteWithOutputs(api.baseUrl, item);
      for (const id of ids) expect(await storedInputs(env, id)).toEqual([]);
      const counts = await queue.getJobCounts();
      expect(counts).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: 0 });

      // A worker started afterwards finds nothing to do: once its stalled-job check and a reconciler sweep have run
      // (each leaves a key in Redis, cleared here first), no engine call was made and every item is as it ended.
      const redis = new Redis(env.redisUrl);
      try {
        const marks = [`${env.redisPrefix}:reconciler:lock`, `${env.redisPrefix}:bull:generation:stalled-check`];
        await redis.del(...marks);
        await processes.start('worker', workerEnv(fake));
        await waitUntil(
          async () => (await redis.exists(...marks)) === 2,
          'the new worker to check for stalled jobs and sweep',
        );
      } finally {
        redis.disconnect();
      }
      expect(await queue.getJobCounts()).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: 0 });
      expect(fake.requests).toHaveLength(CONCURRENCY);
      // Read again later, so their media URLs are signed afresh: the same items otherwise.
      for (const item of items) {
        expect(unsignedItem(await final(api.baseUrl, key, item.history_item_id))).toEqual(unsignedItem(item));
      }
    }, 60_000);
  });

  describe('while jobs run and more wait', () => {
    const JOBS = 30;
    const CONCURRENCY = 4;
    /** Long enough that SIGTERM reliably lands while every slot has a job in the engine. */
    const ENGINE_MS = 1000;

    let stalled: string[];

    const settings = (fake: FakeCog) => ({ ...streamSettings(fake, CONCURRENCY), ...WAIT_FOR_RUNNING_JOBS });
    const block = worldForBlock(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), {
      concurrency: CONCURRENCY,
      services: (fake) => ({ api: settings(fake) }),
    });

    beforeAll(async () => {
      stalled = await recordStalls(block.queue);
    });

    it('finishes the running jobs, exits 0, and leaves the waiting ones to the next worker; none stalls', async () => {
      const { env, processes, fake, queue, api, key } = block;
      const images = await Promise.all(Array.from({ length: JOBS }, () => uniqueImage()));
      const ids = await Promise.all(images.map((clothes) => submit(api.baseUrl, key, clothes)));
      const sut = await processes.start('worker', settings(fake));
      // A few rounds done, a full round in the engine.
      await fake.waitFor(
        (f) => f.requests.filter((r) => r.answered).length >= CONCURRENCY && f.inFlight().length === CONCURRENCY,
        'a full round of jobs in the engine after a first one',
      );

      const started = performance.now();
      const runningAtSignal = fake.inFlight();
      const callsAtSignal = fake.requests.length;
      const code = await processes.stop(sut);
      const exitMs = millisSince(started);
      const callsByStopping = fake.requests.length - callsAtSignal;
      const afterStop = await statusCounts(env);
      const counts = await queue.getJobCounts();

      await processes.start('worker', settings(fake));
      await waitUntil(async () => (await statusCounts(env)).pending === undefined, 'no item to be pending', 60_000);
      const drainMs = millisSince(started);

      report('SIGTERM', {
        'jobs / worker concurrency / engine ms': `${JOBS} / ${CONCURRENCY} / ${ENGINE_MS}`,
        'in the engine at SIGTERM': runningAtSignal.length,
        'engine calls started after SIGTERM by the stopping worker': callsByStopping,
        'exit code / ms from SIGTERM to exit': `${code} / ${exitMs}`,
        'items after the exit': afterStop,
        'queue after the exit': counts,
        'all complete (ms from SIGTERM, with a new worker)': drainMs,
        'engine calls in total': fake.requests.length,
        'stalled jobs': stalled.length,
      });

      expect(code).toBe(0);
      expect(sut.output()).not.toMatch(/"level":(50|60)/);
      // The running jobs were waited for: answered, not cut, and they completed before the process went away.
      expect(runningAtSignal.every((request) => request.answered && !request.aborted)).toBe(true);
      expect(callsByStopping).toBe(0);
      expect(afterStop.complete).toBeGreaterThanOrEqual(runningAtSignal.length + CONCURRENCY);
      expect(counts).toMatchObject({ active: 0, failed: 0 });
      expect(counts.waiting).toBe(JOBS - afterStop.complete);
      // No job stalled or ran twice, and every one completed with its outputs.
      expect(stalled).toEqual([]);
      expect(fake.requests).toHaveLength(JOBS);
      expect(fake.requests.every((request) => request.answered && !request.aborted)).toBe(true);
      for (const clothes of images) expect(fake.requestsFor(clothes)).toHaveLength(1);
      for (const id of ids) {
        await expectCompleteWithOutputs(api.baseUrl, await final(api.baseUrl, key, id));
        expect(await listDir(mediaFolder(env, id))).toEqual(['preview.webp', 'stock.jpg']);
      }
    }, 120_000);
  });

  describe('past SHUTDOWN_TIMEOUT_MS, on the last attempt of its job', () => {
    // The API sets a job's attempts as it queues it.
    const block = worldForBlock(() => ({ kind: 'succeed', delayMs: 60_000 }), {
      services: () => ({ api: { JOB_ATTEMPTS: '1' } }),
    });
    const workerEnv = (fake: FakeCog): Record<string, string> => ({
      ...cogEngine(fake),
      SHUTDOWN_TIMEOUT_MS: '500',
      RECONCILE_INTERVAL_MS: '500',
    });

    it('stops the job, which stays pending and is run again by the next worker, not failed', async () => {
      const { processes, fake, api, key } = block;
      const sut = await processes.start('worker', workerEnv(fake));
      const id = await submit(api.baseUrl, key, await uniqueImage());
      await fake.waitFor((f) => f.inFlight().length === 1, 'the job to be in the engine');

      const code = await processes.stop(sut);

      expect(code).toBe(0);
      expect(sut.output()).toContain('running jobs did not finish in time');
      // Its attempt was cut short, not failed: nothing says the job failed, and its item was not ended.
      expect(sut.output()).not.toMatch(/"msg":"job failed"/);
      expect(fake.requests[0].aborted).toBe(true);
      const [row] = await query<{ status: string }>(block.env, 'SELECT status FROM history_items WHERE id = $1', [id]);
      expect(row.status).toBe('pending');
      // The stop was recorded before the exit, as the queue board shows it, not left to a lock that has to expire.
      const job = await block.queue.getJob(id);
      expect(await job?.getState()).toBe('failed');
      expect(job?.failedReason).toBe('the worker shut down while the job ran');

      fake.behave(() => ({ kind: 'succeed' }));
      await processes.start('worker', workerEnv(fake));
      await expectCompleteWithOutputs(api.baseUrl, await final(api.baseUrl, key, id));
    }, 60_000);
  });
});
