import { Redis } from 'ioredis';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  getItem,
  query,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../support/harness.js';
import { type PrivateServer, startPrivateRedis } from '../support/private-servers.js';

/**
 * Far longer than the test waits: a model left running after its job ended would hold its slot this long. The job's
 * deadline must be at least as long (the configuration refuses a shorter one).
 */
const LONG_ENGINE_TIMEOUT = { ENGINE_TIMEOUT_MS: String(15 * 60_000), JOB_DEADLINE_MS: String(15 * 60_000) };
/** A periodic check that never comes while the test runs: only the resync after a reconnect can find the change. */
const NO_PERIODIC_CHECK = { JOB_STATE_CHECK_MS: String(60 * 60_000) };

/**
 * Cancels, deletes and deadlines reach the worker running the job as events over Redis pub/sub, which delivers at most
 * once. Here the change is made in the database without its event, which is what a lost message leaves behind, while
 * the fake Cog server runs the job's prediction until it is canceled (`hang`). The model server must still be told.
 * Redis is private to this file: its pub/sub connections are cut on purpose.
 */
describe("an item's end whose event never reaches the worker running its job", () => {
  let redis: PrivateServer;
  let world: WorkerWorld | undefined;

  beforeAll(async () => {
    redis = await startPrivateRedis();
  }, 30_000);

  afterEach(async () => {
    await world?.dispose();
    world = undefined;
  }, 60_000);

  afterAll(async () => {
    await redis?.dispose();
  });

  /** An API and one worker with `workerSettings`, on the fake Cog (one prediction at a time), and a job hanging on it. */
  async function hangingJob(workerSettings: Record<string, string> = {}) {
    world = await WorkerWorld.create(() => ({ kind: 'hang' }), { queue: false, servers: { redisUrl: redis.url } });
    const { env, processes, fake } = world;
    const engine = { ...cogEngine(fake), ...LONG_ENGINE_TIMEOUT };
    const [api] = await Promise.all([
      processes.start('api', engine),
      processes.start('worker', { ...engine, ...workerSettings }),
    ]);
    const { key } = await createUser(env);
    const clothes = await uniqueImage();
    const id = await submit(api.baseUrl, key, clothes);
    await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the worker to start the prediction');
    return { env, fake, api, key, id };
  }

  it('tells the model server to stop a canceled job at the next periodic check', async () => {
    const { env, fake, api, key, id } = await hangingJob();

    // The cancel as the API commits it, without its event.
    await query(
      env,
      `UPDATE history_items SET status = 'error', error_code = 'canceled', error_message = 'The job was canceled.',
              completed_at = now(), updated_at = now()
        WHERE id = $1`,
      [id],
    );

    await fake.waitFor((f) => f.cancels.includes(id), 'the cancel to reach the model server');
    await fake.waitFor((f) => f.requests[0].status === 'canceled', 'the prediction to end canceled');
    expect((await getItem(api.baseUrl, key, id)).body).toMatchObject({ status: 'error', error: { code: 'canceled' } });
    // The model's one slot is free again: the next job runs on it and completes.
    fake.behave(() => ({ kind: 'succeed' }));
    const next = await submit(api.baseUrl, key, await uniqueImage());
    await expectCompleteWithOutputs(api.baseUrl, await final(api.baseUrl, key, next));
  }, 90_000);

  it('tells the model server to stop a deleted job once the fan-out reconnects', async () => {
    const { env, fake, id } = await hangingJob(NO_PERIODIC_CHECK);

    // The item deleted while its event could not reach the worker, whose pub/sub connection is then cut.
    await query(env, 'DELETE FROM history_items WHERE id = $1', [id]);
    const admin = new Redis(redis.url);
    try {
      await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    } finally {
      admin.disconnect();
    }

    await fake.waitFor((f) => f.cancels.includes(id), 'the cancel to reach the model server');
    await fake.waitFor((f) => f.requests[0].status === 'canceled', 'the prediction to end canceled');
  }, 90_000);
});
