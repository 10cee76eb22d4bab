import type Bull from 'bull';
import { Redis } from 'ioredis';
import type { TestEnvironment } from '../support/environment.js';
import type { FakeCog } from '../support/fake-cog.js';
import type { RunningService } from '../support/service.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  Processes,
  storedInputs,
  submit,
  uniqueImage,
  waitUntil,
  WorkerWorld,
} from '../support/harness.js';

const ENGINE_MS = 1500;
const CONCURRENCY = 3;

describe('a worker told to stop (SIGTERM) while jobs run', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let queue: Bull.Queue;
  let key: string;

  const workerEnv = (): Record<string, string> => ({
    ...cogEngine(fake),
    WORKER_CONCURRENCY: String(CONCURRENCY),
    // Far more than the jobs need: the worker is to wait for them, not give up on them.
    SHUTDOWN_TIMEOUT_MS: '30000',
  });

  beforeAll(async () => {
    world = await WorkerWorld.create(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), { concurrency: CONCURRENCY });
    ({ env, processes, fake, queue } = world);
    api = await processes.start('api', cogEngine(fake));
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  it('finishes the running jobs, exits 0 and leaves nothing pending', async () => {
    const sut = await processes.start('worker', workerEnv());
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
      await processes.start('worker', workerEnv());
      await waitUntil(
        async () => (await redis.exists(...marks)) === 2,
        'the new worker to check for stalled jobs and sweep',
      );
    } finally {
      redis.disconnect();
    }
    expect(await queue.getJobCounts()).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: 0 });
    expect(fake.requests).toHaveLength(CONCURRENCY);
    for (const item of items) expect(await final(api.baseUrl, key, item.history_item_id)).toEqual(item);
  }, 60_000);
});
