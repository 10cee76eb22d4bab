import { type FakeCog, sha256 } from '../../support/fake-cog.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  getItem,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../../support/harness.js';
import { Client } from '../../support/client.js';
import type { RunningService } from '../../support/service.js';

/** The model server's slots, as the routing file gives them. */
const CONCURRENCY = 2;
const JOBS = 8;
const MODEL_MS = 600;
/**
 * The routing file's `timeout`, where a test sets one: more than a job's own time on the model, less than the last
 * of JOBS jobs waits for a slot when every job is taken at once (JOBS / CONCURRENCY - 1 runs of MODEL_MS).
 */
const TIMEOUT_MS = 1500;

/**
 * An engine's `concurrency` holds across worker processes: the jobs beyond it wait, `pending`, whichever worker took
 * them, and a worker that dies holding a slot frees it.
 */
describe('engine slots across worker processes', () => {
  let world: WorkerWorld;
  let fake: FakeCog;
  let api: RunningService;
  let key: string;
  /** By the sha256 of a job's image: how long the fake model takes on it (default MODEL_MS), or hangs. */
  const plans = new Map<string, number | 'hang'>();
  /** The most predictions the fake has had running at once. */
  let mostAtOnce = 0;

  beforeAll(async () => {
    world = await WorkerWorld.create(
      (request) => {
        const plan = plans.get(Object.values(request.images)[0]) ?? MODEL_MS;
        return plan === 'hang' ? { kind: 'hang' } : { kind: 'succeed', delayMs: plan };
      },
      // The fake takes more than the routing file allows: a 409 (Cog's "busy") would show the limit broken.
      { concurrency: CONCURRENCY * 4 },
    );
    fake = world.fake;
    api = await world.processes.start('api', routing());
    ({ key } = await createUser(world.env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  /** The fake's routing with its slots at CONCURRENCY, whatever the fake itself could take. */
  function routing(timeoutMs?: number): Record<string, string> {
    return cogEngine({ ...fake, concurrency: CONCURRENCY }, { timeoutMs });
  }

  it(`never has more than ${CONCURRENCY} jobs on the model server with two workers, the others waiting pending and not timed out`, async () => {
    // Every job taken at once: all but CONCURRENCY of them wait for a slot, the last ones longer than TIMEOUT_MS.
    const settings = { ...routing(TIMEOUT_MS), WORKER_CONCURRENCY: String(JOBS / 2) };
    const workers = await Promise.all([
      world.processes.start('worker', settings),
      world.processes.start('worker', settings),
    ]);
    const sampler = setInterval(() => (mostAtOnce = Math.max(mostAtOnce, fake.inFlight().length)), 10);
    try {
      const images = await Promise.all(Array.from({ length: JOBS }, () => uniqueImage()));
      const ids = await Promise.all(images.map((clothes) => submit(api.baseUrl, key, clothes)));
      await fake.waitFor((f) => f.inFlight().length === CONCURRENCY, 'the slots to fill');
      const waiting = await Promise.all(
        ids
          .filter((_, index) => fake.requestsFor(images[index]).length === 0)
          .map(async (id) => (await getItem(api.baseUrl, key, id)).body),
      );

      const items = await Promise.all(ids.map((id) => final(api.baseUrl, key, id, 60_000)));

      for (const item of items) await expectCompleteWithOutputs(api.baseUrl, item);
      expect(waiting.length).toBeGreaterThan(0);
      for (const item of waiting) expect(item).toMatchObject({ status: 'pending', progress: null });
      expect(mostAtOnce).toBe(CONCURRENCY);
      expect(fake.calls.filter((call) => call.status === 409)).toEqual([]);
      // Each job ran the model once.
      for (const clothes of images) expect(fake.requestsFor(clothes)).toHaveLength(1);
    } finally {
      clearInterval(sampler);
      await Promise.all(workers.map((worker) => world.processes.stop(worker)));
    }
  }, 90_000);

  it("times an attempt out on a schema read that never ends, the engine's timeout not waiting for a slot", async () => {
    const worker = await world.processes.start('worker', routing(TIMEOUT_MS));
    fake.failSchema('hang');
    const callsBefore = fake.calls.length;
    try {
      const clothes = await uniqueImage();
      const id = await submit(api.baseUrl, key, clothes);
      const item = await final(api.baseUrl, key, id, 30_000);

      expect(item).toMatchObject({ status: 'error', error: { code: 'timeout' } });
      // The timeout ended each of the job's three attempts (JOB_ATTEMPTS' default) at its first read, instead of each
      // of the read's own three tries timing out in turn.
      const schemaReads = fake.calls.slice(callsBefore).filter((call) => call.path === '/openapi.json');
      expect(schemaReads).toHaveLength(3);
      expect(fake.requestsFor(clothes)).toEqual([]);
    } finally {
      fake.failSchema(undefined);
      await world.processes.stop(worker);
    }
  }, 60_000);

  it('frees the slots of a worker killed while its jobs ran, for other jobs', async () => {
    const doomed = await world.processes.start('worker', routing());
    const stuck = await Promise.all([uniqueImage(), uniqueImage()]);
    for (const clothes of stuck) plans.set(sha256(clothes), 'hang');
    const stuckIds = await Promise.all(stuck.map((clothes) => submit(api.baseUrl, key, clothes)));
    await fake.waitFor((f) => stuck.every((clothes) => f.requestsFor(clothes).length === 1), 'both slots taken');
    await doomed.stop('SIGKILL');
    // The stuck jobs are given up on, so no later run of theirs holds their slots: only the lapse of the dead
    // worker's leases can free them.
    for (const id of stuckIds) {
      const canceled = await new Client(api.baseUrl, key).cancel(id);
      expect(canceled.status).toBe(200);
    }

    const next = await uniqueImage();
    const id = await submit(api.baseUrl, key, next);
    await world.processes.start('worker', routing());
    const item = await final(api.baseUrl, key, id, 30_000);

    await expectCompleteWithOutputs(api.baseUrl, item);
    expect(fake.requestsFor(next)).toHaveLength(1);
  }, 60_000);
});
