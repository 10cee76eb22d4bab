import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { REQUEST_ATTEMPTS } from '../../src/engines/index.js';
import { type HistoryItemBody, postJob } from '../support/client.js';
import { type FakeCogAnswer, type FakeCogRequest, sha256 } from '../support/fake-cog.js';
import {
  cogEngine,
  expectCompleteWithOutputs,
  expectFailedLeavingNothing,
  final,
  jobSettled,
  storedInputPath,
  submit,
  uniqueImage,
  worldForBlock,
} from '../support/harness.js';
import { millisSince, percentile, report, statusCounts } from '../support/observe.js';
import { freePort, type RunningService } from '../support/service.js';

const ATTEMPTS = 3;
const WORKER_CONCURRENCY = 4;

/** A worker's settings for `engine`: ATTEMPTS attempts of a job, each given `engineTimeoutMs` by the engine. */
function failingEngineSettings(engine: Record<string, string>, engineTimeoutMs: number): Record<string, string> {
  return {
    ...engine,
    JOB_ATTEMPTS: String(ATTEMPTS),
    ENGINE_TIMEOUT_MS: String(engineTimeoutMs),
    WORKER_CONCURRENCY: String(WORKER_CONCURRENCY),
  };
}

describe('engine failures', () => {
  describe('one job at a time', () => {
    /** Short, so a hanging engine uses up its attempts quickly. */
    // Longer than one attempt's own retries of a failing request (remote-http's backoff).
    const ENGINE_TIMEOUT_MS = 3000;

    let worker: RunningService | undefined;
    /** What the fake does for each job, by the sha256 of the job's `clothes` image; unlisted jobs succeed. */
    const plans = new Map<string, (request: FakeCogRequest) => FakeCogAnswer>();
    const block = worldForBlock(
      (request) => plans.get(Object.values(request.images)[0])?.(request) ?? { kind: 'succeed' },
    );

    async function ensureWorker(): Promise<void> {
      worker ??= await block.processes.start('worker', failingEngineSettings(cogEngine(block.fake), ENGINE_TIMEOUT_MS));
    }

    /** Submits a job whose engine calls the fake answers as `plan` says; returns its id and image. */
    async function submitWithPlan(
      plan: (request: FakeCogRequest) => FakeCogAnswer,
    ): Promise<{ id: string; clothes: Buffer }> {
      const clothes = await uniqueImage();
      plans.set(sha256(clothes), plan);
      return { id: await submit(block.api.baseUrl, block.key, clothes), clothes };
    }

    /** The final item, once the workers have let go of the job (so no further attempt can come). */
    async function settled(id: string): Promise<HistoryItemBody> {
      const item = await final(block.api.baseUrl, block.key, id);
      await jobSettled(block.queue, id);
      return item;
    }

    /** What a client reads in `error.message` names nothing inside the machine. */
    function expectPlainMessage(item: HistoryItemBody): void {
      const { port, hostname } = new URL(block.fake.url);
      expect(item.error!.message).not.toContain(hostname);
      expect(item.error!.message).not.toContain(port);
      expect(item.error!.message).not.toMatch(/https?:|predictions|Cog|HTTP \d{3}|\bat /);
    }

    it('fails a job whose stored input no longer decodes at once, as invalid_image', async () => {
      const { env, processes, fake, api } = block;
      // Only the API runs: the job waits in the queue while its stored input is damaged.
      if (worker) await processes.stop(worker);
      worker = undefined;
      const { id, clothes } = await submitWithPlan(() => ({ kind: 'succeed' }));
      const stored = storedInputPath(env, id, 'clothes');
      expect(sha256(await readFile(stored))).toBe(sha256(clothes));
      await writeFile(stored, randomBytes(4096));

      await ensureWorker();
      const item = await settled(id);

      await expectFailedLeavingNothing(env, api.baseUrl, item, 'invalid_image');
      expectPlainMessage(item);
      expect(fake.requestsFor(clothes)).toHaveLength(0);
    }, 60_000);

    it('retries an engine that answers 500, and completes when it recovers', async () => {
      const { fake, api } = block;
      await ensureWorker();
      const { id, clothes } = await submitWithPlan((request) =>
        request.attempt <= 2 ? { kind: 'http', status: 500 } : { kind: 'succeed' },
      );

      const item = await settled(id);

      await expectCompleteWithOutputs(api.baseUrl, item);
      expect(fake.requestsFor(clothes).map((request) => request.attempt)).toEqual([1, 2, 3]);
    }, 60_000);

    it(`fails as engine_failed after ${ATTEMPTS} attempts when the engine keeps answering 500`, async () => {
      const { env, fake, api } = block;
      await ensureWorker();
      const { id, clothes } = await submitWithPlan(() => ({ kind: 'http', status: 500 }));

      const item = await settled(id);

      await expectFailedLeavingNothing(env, api.baseUrl, item, 'engine_failed');
      expectPlainMessage(item);
      // Each attempt of the job tried the request itself before giving up.
      expect(fake.requestsFor(clothes)).toHaveLength(ATTEMPTS * REQUEST_ATTEMPTS);
    }, 60_000);

    it('fails at once as engine_failed when the engine rejects the request (422)', async () => {
      const { env, fake, api } = block;
      await ensureWorker();
      const { id, clothes } = await submitWithPlan(() => ({ kind: 'http', status: 422 }));

      const item = await settled(id);

      await expectFailedLeavingNothing(env, api.baseUrl, item, 'engine_failed');
      expectPlainMessage(item);
      expect(fake.requestsFor(clothes)).toHaveLength(1);
    }, 60_000);

    it(`fails as timeout after ${ATTEMPTS} attempts when the engine never answers`, async () => {
      const { env, fake, api } = block;
      await ensureWorker();
      const { id, clothes } = await submitWithPlan(() => ({ kind: 'hang' }));

      const item = await settled(id);

      await expectFailedLeavingNothing(env, api.baseUrl, item, 'timeout');
      expectPlainMessage(item);
      const calls = fake.requestsFor(clothes);
      expect(calls).toHaveLength(ATTEMPTS);
      // The worker gave up on every call itself.
      expect(calls.every((request) => request.aborted)).toBe(true);
    }, 60_000);
  });

  describe('an engine that keeps failing, under many jobs', () => {
    /** Short, so a hanging engine uses up its attempts quickly; far above what an answer takes on a busy machine. */
    const ENGINE_TIMEOUT_MS = 1500;
    /** Jobs of each way of failing. */
    const PER_KIND = 4;

    /** What the fake answers, every time, for the jobs of each kind. */
    const KINDS: Record<string, { answer: FakeCogAnswer; code: string }> = {
      'HTTP 500': { answer: { kind: 'http', status: 500 }, code: 'engine_failed' },
      'HTTP 503': { answer: { kind: 'http', status: 503 }, code: 'engine_failed' },
      'never answers': { answer: { kind: 'hang' }, code: 'timeout' },
    };

    const plans = new Map<string, FakeCogAnswer>();
    const block = worldForBlock((request) => plans.get(Object.values(request.images)[0]) ?? { kind: 'succeed' }, {
      // The fake model runs as many jobs at once as the worker (Cog's own default is one).
      concurrency: WORKER_CONCURRENCY,
      services: async (fake) => {
        const settings = {
          ...failingEngineSettings(cogEngine(fake, { timeoutMs: ENGINE_TIMEOUT_MS }), ENGINE_TIMEOUT_MS),
          // `default` is sent to a port nobody listens on: the engine's server is down altogether.
          ENGINE_DEFAULT: `cog:http://127.0.0.1:${await freePort()}`,
        };
        return { api: settings, workers: [settings] };
      },
    });

    it(`ends every job as error with a code after ${ATTEMPTS} attempts; none stays pending`, async () => {
      const { env, fake, queue, api, key } = block;
      const started = performance.now();
      const jobs: { kind: string; id: string; clothes?: Buffer; code: string }[] = [];
      for (const [kind, { answer, code }] of Object.entries(KINDS)) {
        for (let i = 0; i < PER_KIND; i++) {
          const clothes = await uniqueImage();
          plans.set(sha256(clothes), answer);
          jobs.push({ kind, id: await submit(api.baseUrl, key, clothes), clothes, code });
        }
      }
      for (let i = 0; i < PER_KIND; i++) {
        const image = { data: await uniqueImage(), filename: 'image.png', contentType: 'image/png' };
        const response = await postJob(api.baseUrl, key, { tool: 'default', image });
        expect(response.status).toBe(202);
        const { history_item_id: id } = (await response.json()) as { history_item_id: string };
        jobs.push({ kind: 'engine server down', id, code: 'engine_failed' });
      }

      const ended: { kind: string; item: HistoryItemBody; ms: number }[] = [];
      await Promise.all(
        jobs.map(async ({ kind, id }) => {
          const item = await final(api.baseUrl, key, id);
          ended.push({ kind, item, ms: millisSince(started) });
          await jobSettled(queue, id);
        }),
      );
      const counts = await queue.getJobCounts();

      const byKind: Record<string, unknown> = {};
      for (const kind of [...Object.keys(KINDS), 'engine server down']) {
        const mine = ended.filter((e) => e.kind === kind);
        byKind[kind] =
          `${mine.map((e) => e.item.error?.code ?? e.item.status).join(',')}; error after ms p50 ` +
          `${percentile(
            mine.map((e) => e.ms),
            50,
          )}, max ${Math.max(...mine.map((e) => e.ms))}`;
      }
      report('failing engine', {
        'jobs / attempts / engine timeout ms': `${jobs.length} / ${ATTEMPTS} / ${ENGINE_TIMEOUT_MS}`,
        ...byKind,
        'engine calls (fake)': fake.requests.length,
        'items by status': await statusCounts(env),
        queue: counts,
      });

      for (const { kind, code, id, clothes } of jobs) {
        const { item } = ended.find((e) => e.item.history_item_id === id)!;
        expect({ kind, code: item.error?.code }).toEqual({ kind, code });
        await expectFailedLeavingNothing(env, api.baseUrl, item, code);
        // Retried as often as configured, no more: the item ended with the last attempt, each attempt having tried a
        // failing request REQUEST_ATTEMPTS times (a hanging one is stopped by the attempt's timeout instead).
        const perAttempt = kind === 'never answers' ? 1 : REQUEST_ATTEMPTS;
        if (clothes) expect(fake.requestsFor(clothes)).toHaveLength(ATTEMPTS * perAttempt);
      }
      expect(await statusCounts(env)).toEqual({ error: jobs.length });
      expect(counts).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: jobs.length });
    }, 120_000);
  });
});
