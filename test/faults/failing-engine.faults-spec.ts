import type Bull from 'bull';
import type { TestEnvironment } from '../support/environment.js';
import { type FakeCog, type FakeCogAnswer, sha256 } from '../support/fake-cog.js';
import {
  cogEngine,
  createUser,
  expectFailedLeavingNothing,
  final,
  jobSettled,
  Processes,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../support/harness.js';
import { freePort, type RunningService } from '../support/service.js';
import { millisSince, percentile, report, statusCounts } from './observe.js';
import { type HistoryItemBody, postJob } from '../support/client.js';

const ATTEMPTS = 3;
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

describe('an engine that keeps failing', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let queue: Bull.Queue;
  let key: string;
  const plans = new Map<string, FakeCogAnswer>();

  beforeAll(async () => {
    world = await WorkerWorld.create((request) => plans.get(Object.values(request.images)[0]) ?? { kind: 'succeed' });
    ({ env, processes, fake, queue } = world);
    // `default` is sent to a port nobody listens on: the engine's server is down altogether.
    const settings = {
      ...cogEngine(fake),
      ENGINE_DEFAULT: `cog:http://127.0.0.1:${await freePort()}`,
      JOB_ATTEMPTS: String(ATTEMPTS),
      ENGINE_TIMEOUT_MS: String(ENGINE_TIMEOUT_MS),
      WORKER_CONCURRENCY: '4',
    };
    [api] = await Promise.all([processes.start('api', settings), processes.start('worker', settings)]);
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  it(`ends every job as error with a code after ${ATTEMPTS} attempts; none stays pending`, async () => {
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
      // Retried as often as configured, no more: the item ended with the last attempt.
      if (clothes) expect(fake.requestsFor(clothes)).toHaveLength(ATTEMPTS);
    }
    expect(await statusCounts(env)).toEqual({ error: jobs.length });
    expect(counts).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: jobs.length });
  }, 120_000);
});
