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
const MODEL_MS = 400;

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
  function routing(): Record<string, string> {
    return cogEngine({ ...fake, concurrency: CONCURRENCY });
  }

  it(`never has more than ${CONCURRENCY} jobs on the model server with two workers, the others waiting pending`, async () => {
    const workers = await Promise.all([
      world.processes.start('worker', routing()),
      world.processes.start('worker', routing()),
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
